// --target=cuda --emit=triton: an elementwise chain with broadcast operands is one fused Triton
// kernel; a block of flat indices, the broadcast operands read through their own strides, masked
// loads and stores.
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s
// --emit=triton implies --target=cuda.
// RUN: lezero-opt %s --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_mul_add_tanh_exp_0: elementwise, grid [8], BLOCK=1024
// CHECK:       @triton.jit
// CHECK-NEXT:  def lz_fused_mul_add_tanh_exp_0(b0, b1, b2, b3, BLOCK: tl.constexpr):
// CHECK-NEXT:      """lz.mul -> lz.add -> lz.tanh -> lz.exp: (tensor<64x128xf32>, tensor<128xf32>, tensor<64x1xf32>) -> (tensor<64x128xf32>)"""
// CHECK-NEXT:      pid = tl.program_id(0)
// CHECK-NEXT:      offs = pid * BLOCK + tl.arange(0, BLOCK)
// CHECK-NEXT:      mask = offs < 8192
// x is read at the flat offsets, a (broadcast along rows) at the column, b (along columns) at the row.
// CHECK-NEXT:      [[X:x[0-9]+]] = tl.load(b0 + offs, mask=mask, other=0)
// CHECK-NEXT:      [[COL:i[0-9]+]] = offs % 128
// CHECK-NEXT:      [[A:x[0-9]+]] = tl.load(b1 + [[COL]], mask=mask, other=0)
// CHECK-NEXT:      [[XA:t[0-9]+]] = [[X]] * [[A]]
// CHECK-NEXT:      [[ROW:i[0-9]+]] = offs // 128
// CHECK-NEXT:      [[B:x[0-9]+]] = tl.load(b2 + [[ROW]], mask=mask, other=0)
// CHECK-NEXT:      [[Y:t[0-9]+]] = [[XA]] + [[B]]
// tanh is lezero's own branch-free formula (the CPU's): exp-based, with a polynomial near 0.
// CHECK:           tl.exp(
// CHECK:           tl.where(
// CHECK:           [[E:t[0-9]+]] = tl.exp({{t[0-9]+}})
// CHECK-NEXT:      tl.store(b3 + offs, [[E]], mask=mask)
// CHECK-NOT:   # ---- kernel
func.func @scale_shift_gelu(%x: tensor<64x128xf32>, %a: tensor<128xf32>, %b: tensor<64x1xf32>) -> tensor<64x128xf32> {
  %0 = "lz.mul"(%x, %a) : (tensor<64x128xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  %1 = "lz.add"(%0, %b) : (tensor<64x128xf32>, tensor<64x1xf32>) -> tensor<64x128xf32>
  %2 = "lz.tanh"(%1) : (tensor<64x128xf32>) -> tensor<64x128xf32>
  %3 = "lz.exp"(%2) : (tensor<64x128xf32>) -> tensor<64x128xf32>
  func.return %3 : tensor<64x128xf32>
}
