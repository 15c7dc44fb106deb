// Data movement is index arithmetic on the loads: a transposed operand and a strided slice of
// another are read straight from their buffers by the one elementwise kernel that adds them.
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_transpose_slice_add_0: elementwise
// CHECK:       def lz_fused_transpose_slice_add_0(b0, b1, b2, BLOCK: tl.constexpr):
// CHECK:           mask = offs < 1536
// The transposed read: element (i, j) of x^T is x[j, i], at j * 32 + i.
// CHECK-NEXT:      [[I:i[0-9]+]] = offs // 48
// CHECK-NEXT:      [[J:i[0-9]+]] = offs % 48
// CHECK-NEXT:      [[T:idx[0-9]+]] = [[I]] + [[J]] * 32
// CHECK-NEXT:      [[XT:x[0-9]+]] = tl.load(b0 + [[T]], mask=mask, other=0)
// The slice y[:, 1::2]: row-major over 32x48 it is y's flat offset 2 * offs + 1.
// CHECK-NEXT:      [[S:idx[0-9]+]] = offs * 2 + 1
// CHECK-NEXT:      [[YS:x[0-9]+]] = tl.load(b1 + [[S]], mask=mask, other=0)
// CHECK-NEXT:      [[SUM:t[0-9]+]] = [[XT]] + [[YS]]
// CHECK-NEXT:      tl.store(b2 + offs, [[SUM]], mask=mask)
// CHECK-NOT:   # ---- kernel
func.func @transpose_slice_add(%x: tensor<48x32xf32>, %y: tensor<32x96xf32>) -> tensor<32x48xf32> {
  %0 = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<48x32xf32>) -> tensor<32x48xf32>
  %1 = "lz.slice"(%y) {starts = array<i64: 1>, ends = array<i64: 96>, axes = array<i64: 1>, steps = array<i64: 2>} : (tensor<32x96xf32>) -> tensor<32x48xf32>
  %2 = "lz.add"(%0, %1) : (tensor<32x48xf32>, tensor<32x48xf32>) -> tensor<32x48xf32>
  func.return %2 : tensor<32x48xf32>
}
