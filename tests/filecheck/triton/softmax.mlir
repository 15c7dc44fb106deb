// A row reduction: softmax over the last axis is one kernel (max, exp, sum and the division).
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_reduce_max_sub_exp_reduce_sum_div_0: reduction, grid [2], ROWS=32, RBLOCK=128
// The combine functions of tl.reduce: max (NaN propagates, as the reference) and sum.
// CHECK:       def lz_fused_reduce_max_sub_exp_reduce_sum_div_0_combine0(a, b):
// CHECK-NEXT:      t0 = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
// CHECK:       def lz_fused_reduce_max_sub_exp_reduce_sum_div_0_combine1(a, b):
// CHECK-NEXT:      t0 = a + b
// CHECK:       def lz_fused_reduce_max_sub_exp_reduce_sum_div_0(b0, b1, ROWS: tl.constexpr, RBLOCK: tl.constexpr):
// CHECK:           rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
// CHECK-NEXT:      row_mask = rows < 64
// Pass 1: the row maximum, over the 100 columns in RBLOCK chunks.
// CHECK-NEXT:      acc0 = tl.full([ROWS, RBLOCK], -float("inf"), tl.float32)
// CHECK-NEXT:      for r0 in range(0, 100, RBLOCK):
// CHECK-NEXT:          cols = r0 + tl.arange(0, RBLOCK)[None, :]
// CHECK-NEXT:          mask = row_mask & (cols < 100)
// CHECK:               tl.load(b0 + {{idx[0-9]+}}, mask=mask, other=0)
// CHECK:           [[MAX:red[0-9]+]] = tl.reduce(acc0, 1, lz_fused_reduce_max_sub_exp_reduce_sum_div_0_combine0, keep_dims=True)
// Pass 2: the sum of exp(x - max).
// CHECK:           for r0 in range(0, 100, RBLOCK):
// CHECK:               [[D:t[0-9]+]] = {{x[0-9]+}} - [[MAX]]
// CHECK-NEXT:          tl.exp([[D]])
// CHECK:           [[SUM:red[0-9]+]] = tl.reduce(acc1, 1, lz_fused_reduce_max_sub_exp_reduce_sum_div_0_combine1, keep_dims=True)
// Pass 3: the broadcast-back epilogue, exp(x - max) / sum, stored per chunk.
// CHECK:           for r0 in range(0, 100, RBLOCK):
// CHECK:               [[Q:t[0-9]+]] = tl.math.div_rn({{t[0-9]+}}, [[SUM]])
// CHECK-NEXT:          tl.store(b1 + {{idx[0-9]+}}, [[Q]], mask=mask)
// CHECK-NOT:   # ---- kernel
func.func @softmax(%x: tensor<64x100xf32>) -> tensor<64x100xf32> {
  %0 = "lz.softmax"(%x) {axis = -1 : i64} : (tensor<64x100xf32>) -> tensor<64x100xf32>
  func.return %0 : tensor<64x100xf32>
}
