// A convolution with its relu: an implicit GEMM through tl.dot, the epilogue before the store.
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_conv2d_relu_0: conv, grid [7], BLOCK_M=64, BLOCK_N=32, BLOCK_K=32, GROUP_M=8
// CHECK:       def lz_fused_conv2d_relu_0(b0, b1, b2, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
// CHECK:           # lz.conv2d 2x16x14x14 * 32x16x3x3 -> 2x32x14x14 f32 (strides [1, 1], pads [1, 1, 1, 1], dilations [1, 1], groups 1): an implicit GEMM per group of 392 pixels (image, oh, ow) x 32 channels x 144 taps (ci, kh, kw)
// Rows are output pixels, columns output channels; the A tile is gathered from the input with
// the padding masked, B is the OIHW weights in place.
// CHECK:           image = pixels // 196
// CHECK-NEXT:      oh = pixels // 14 % 14
// CHECK-NEXT:      ow = pixels % 14
// CHECK:           for k in range(0, 144, BLOCK_K):
// CHECK:               inside = (ih >= 0) & (ih < 14) & (iw >= 0) & (iw < 14) & (taps < 144)[None, :]
// CHECK-NEXT:          a = tl.load(x_image[:, None] + ci[None, :] * 196 + ih * 14 + iw, mask=inside, other=0.0)
// CHECK-NEXT:          b = tl.load(w_tile, mask=ks[:, None] < 144 - k, other=0.0)
// CHECK-NEXT:          acc = tl.dot(a, b, acc, input_precision="ieee")
// relu on the accumulator, stored NCHW, the rows past the 392 pixels masked.
// CHECK:           [[RELU:t[0-9]+]] = tl.maximum(acc, tl.full([], 0.0, tl.float32), propagate_nan=tl.PropagateNan.ALL)
// CHECK-NEXT:      tl.store(b2 + image[:, None] * 6272 + channels[None, :] * 196 + oh[:, None] * 14 + ow[:, None], [[RELU]], mask=(rows < 392)[:, None])
// CHECK-NOT:   # ---- kernel
func.func @conv_relu(%x: tensor<2x16x14x14xf32>, %w: tensor<32x16x3x3xf32>) -> tensor<2x32x14x14xf32> {
  %0 = "lz.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>} : (tensor<2x16x14x14xf32>, tensor<32x16x3x3xf32>) -> tensor<2x32x14x14xf32>
  %1 = "lz.relu"(%0) : (tensor<2x32x14x14xf32>) -> tensor<2x32x14x14xf32>
  func.return %1 : tensor<2x32x14x14xf32>
}
