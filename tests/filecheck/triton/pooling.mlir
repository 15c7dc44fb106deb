// Pooling: one kernel per pool, the window loop unrolled over literal sizes; max pooling's
// gradient a gather over the input elements.
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_max_pool2d_0: single, grid [1], BLOCK=1024
// CHECK:       def lz_fused_max_pool2d_0(b0, b1, BLOCK: tl.constexpr):
// CHECK:           mask = offs < 1024
// CHECK-NEXT:      ow = offs % 8
// CHECK-NEXT:      oh = offs // 8 % 8
// CHECK-NEXT:      plane = offs // 64  # n * C + c
// CHECK-NEXT:      acc = tl.full([BLOCK], -float("inf"), tl.float32)
// CHECK-NEXT:      for kh in tl.static_range(2):
// CHECK-NEXT:          ih = oh * 2 - 0 + kh * 1
// CHECK-NEXT:          for kw in tl.static_range(2):
// CHECK-NEXT:              iw = ow * 2 - 0 + kw * 1
// CHECK-NEXT:              inside = mask & (ih >= 0) & (ih < 16) & (iw >= 0) & (iw < 16)
// Padding never wins a max: it reads as -inf.
// CHECK-NEXT:              x = tl.load(b0 + (plane * 16 + ih) * 16 + iw, mask=inside, other=-float("inf"))
// CHECK-NEXT:              [[M:t[0-9]+]] = tl.maximum(acc, x, propagate_nan=tl.PropagateNan.ALL)
// CHECK-NEXT:              acc = [[M]]
// CHECK-NEXT:      tl.store(b1 + offs, acc, mask=mask)

// CHECK-LABEL: # ---- kernel lz_fused_avg_pool2d_1: single, grid [1], BLOCK=1024
// CHECK:       def lz_fused_avg_pool2d_1(b0, b1, BLOCK: tl.constexpr):
// CHECK:           for kh in tl.static_range(3):
// CHECK-NEXT:          ih = oh * 2 - 1 + kh * 1
// CHECK:                   x = tl.load(b0 + (plane * 16 + ih) * 16 + iw, mask=inside, other=0)
// Each window is divided by the count of its elements inside the input (padding not counted).
// CHECK:           rows_counted = tl.minimum(start_h + 3, 16) - tl.maximum(start_h, 0)
// CHECK-NEXT:      cols_counted = tl.minimum(start_w + 3, 16) - tl.maximum(start_w, 0)
// CHECK-NEXT:      [[COUNT:count[0-9]+]] = (rows_counted * cols_counted).to(tl.float32)
// CHECK-NEXT:      [[AVG:t[0-9]+]] = tl.math.div_rn(acc, [[COUNT]])
// CHECK-NEXT:      tl.store(b1 + offs, [[AVG]], mask=mask)
func.func @pools(%x: tensor<2x8x16x16xf32>) -> (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) {
  %0 = "lz.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<2x8x16x16xf32>) -> tensor<2x8x8x8xf32>
  %1 = "lz.avg_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x8x16x16xf32>) -> tensor<2x8x8x8xf32>
  func.return %0, %1 : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>
}

// CHECK-LABEL: # ---- kernel lz_fused_max_pool2d_grad_2: single, grid [4], BLOCK=1024
// CHECK:       def lz_fused_max_pool2d_grad_2(b0, b1, b2, BLOCK: tl.constexpr):
// CHECK:           mask = offs < 4096
// CHECK-NEXT:      iw = offs % 16
// CHECK-NEXT:      ih = offs // 16 % 16
// CHECK-NEXT:      plane = offs // 256  # n * C + c
// CHECK-NEXT:      acc = tl.full([BLOCK], 0, tl.float32)
// The windows holding (ih, iw) come in row-major (oh, ow) order, as the reference adds them.
// CHECK-NEXT:      for kh in tl.static_range(2, -1, -1):
// CHECK-NEXT:          oh_strided = ih + 1 - kh * 1
// CHECK-NEXT:          oh = oh_strided // 2
// CHECK-NEXT:          for kw in tl.static_range(2, -1, -1):
// CHECK-NEXT:              ow_strided = iw + 1 - kw * 1
// CHECK-NEXT:              ow = ow_strided // 2
// CHECK-NEXT:              window = mask & (oh_strided >= 0) & (oh < 8) & (ow_strided >= 0) & (ow < 8) & (oh_strided % 2 == 0) & (ow_strided % 2 == 0)
// Each window's winner found again: the first maximum inside the image, the last nan.
// CHECK:                   for wkh in tl.static_range(3):
// CHECK:                           x = tl.load(b0 + (plane * 16 + wh) * 16 + ww, mask=inside, other=-float("inf"))
// CHECK-NEXT:                      take = inside & ((winner < 0) | (x > best) | (x != x))
// CHECK:                   won = winner == kh * 3 + kw
// CHECK-NEXT:              g = tl.load(b1 + (plane * 8 + oh) * 8 + ow, mask=won, other=0)
// CHECK-NEXT:              [[SUM:t[0-9]+]] = acc + g
// CHECK-NEXT:              acc = tl.where(won, [[SUM]], acc)
// CHECK-NEXT:      tl.store(b2 + offs, acc, mask=mask)
// CHECK-NOT:   atomic
func.func @grad(%x: tensor<2x8x16x16xf32>, %dy: tensor<2x8x8x8xf32>) -> tensor<2x8x16x16xf32> {
  %0 = "lz.max_pool2d_grad"(%x, %dy) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x8x16x16xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x16x16xf32>
  func.return %0 : tensor<2x8x16x16xf32>
}
