// A column reduction: summing over the leading axis, each program owns a block of columns.
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_reduce_mean_0: reduction, grid [3], ROWS=16, RBLOCK=256
// CHECK:       def lz_fused_reduce_mean_0(b0, b1, ROWS: tl.constexpr, RBLOCK: tl.constexpr):
// CHECK-NEXT:      """lz.reduce_mean: (tensor<256x48xf32>) -> (tensor<48xf32>)"""
// The kernel's rows are the 48 output columns; its reduced axis walks down a column (stride 48).
// CHECK-NEXT:      rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
// CHECK-NEXT:      row_mask = rows < 48
// CHECK-NEXT:      acc0 = tl.full([ROWS, RBLOCK], 0.0, tl.float32)
// CHECK-NEXT:      for r0 in range(0, 256, RBLOCK):
// CHECK-NEXT:          cols = r0 + tl.arange(0, RBLOCK)[None, :]
// CHECK-NEXT:          mask = row_mask & (cols < 256)
// CHECK-NEXT:          [[IDX:idx[0-9]+]] = cols * 48 + rows
// CHECK-NEXT:          [[X:x[0-9]+]] = tl.load(b0 + [[IDX]], mask=mask, other=0)
// CHECK-NEXT:          [[S:t[0-9]+]] = acc0 + [[X]]
// CHECK-NEXT:          acc0 = tl.where(mask, [[S]], acc0)
// CHECK-NEXT:      [[SUM:red[0-9]+]] = tl.reduce(acc0, 1, lz_fused_reduce_mean_0_combine0, keep_dims=True)
// CHECK-NEXT:      [[MEAN:t[0-9]+]] = tl.math.div_rn([[SUM]], tl.full([], 256.0, tl.float32))
// CHECK-NEXT:      tl.store(b1 + rows, [[MEAN]], mask=row_mask)
func.func @column_mean(%x: tensor<256x48xf32>) -> tensor<48xf32> {
  %0 = "lz.reduce_mean"(%x) {axes = array<i64: 0>} : (tensor<256x48xf32>) -> tensor<48xf32>
  func.return %0 : tensor<48xf32>
}
