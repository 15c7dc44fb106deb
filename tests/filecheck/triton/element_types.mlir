// Storage and compute types: bf16 buffers are 16 bits on the device (torch.bfloat16): loads widen
// to f32, each op's result is rounded to bf16 to nearest even on its bits (NaN kept), and the store
// narrows (exactly); f16 loads widen to f32, each result rounds through f16, and the store narrows.
// RUN: lezero-opt %s --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_exp_0: elementwise
// CHECK:           """lz.exp: (tensor<16x32xbf16>) -> (tensor<16x32xbf16>)"""
// CHECK:           [[X:x[0-9]+]] = tl.load(b0 + offs, mask=mask, other=0)
// CHECK-NEXT:      [[W:t[0-9]+]] = [[X]].to(tl.float32)
// CHECK-NEXT:      [[E:t[0-9]+]] = tl.exp([[W]])
// CHECK-NEXT:      [[B:bits[0-9]+]] = [[E]].to(tl.int32, bitcast=True)
// CHECK-NEXT:      [[R:bits[0-9]+]] = (([[B]] + 0x7FFF + (([[B]] >> 16) & 1)) & -65536).to(tl.float32, bitcast=True)
// CHECK-NEXT:      [[OUT:t[0-9]+]] = tl.where([[E]] != [[E]], [[E]], [[R]])
// CHECK-NEXT:      tl.store(b1 + offs, [[OUT]].to(tl.bfloat16), mask=mask)

// CHECK-LABEL: # ---- kernel lz_fused_exp_1: elementwise
// CHECK:           """lz.exp: (tensor<16x32xf16>) -> (tensor<16x32xf16>)"""
// CHECK:           [[X:x[0-9]+]] = tl.load(b0 + offs, mask=mask, other=0)
// CHECK-NEXT:      [[W:t[0-9]+]] = [[X]].to(tl.float32)
// CHECK-NEXT:      [[E:t[0-9]+]] = tl.exp([[W]])
// CHECK-NEXT:      [[H:t[0-9]+]] = [[E]].to(tl.float16).to(tl.float32)
// CHECK-NEXT:      tl.store(b1 + offs, [[H]].to(tl.float16), mask=mask)
func.func @exps(%x: tensor<16x32xbf16>, %y: tensor<16x32xf16>) -> (tensor<16x32xbf16>, tensor<16x32xf16>) {
  %0 = "lz.exp"(%x) : (tensor<16x32xbf16>) -> tensor<16x32xbf16>
  %1 = "lz.exp"(%y) : (tensor<16x32xf16>) -> tensor<16x32xf16>
  func.return %0, %1 : tensor<16x32xbf16>, tensor<16x32xf16>
}
