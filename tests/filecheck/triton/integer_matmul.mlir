// A quantized linear layer (u8 activations, s8 weights with a zero point per column) requantized to
// u8: one kernel, int8 tiles through tl.dot summing in int32, the zero points applied to the i32
// tile after the K loop, then the epilogue (scale, divide, round half even, zero point, clamp, cast)
// before the one store.
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_matmul_integer_cast_mul_div_round_etc_1: matmul, grid [3], BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8
// CHECK:           """lz.matmul_integer -> lz.cast -> lz.mul -> lz.div -> lz.round -> lz.add -> lz.max -> lz.min -> lz.cast: (tensor<64x768xui8>, tensor<768x192xi8>, tensor<ui8>, tensor<192xi8>, tensor<192xf32>, tensor<f32>, tensor<f32>) -> (tensor<64x192xui8>)"""
// CHECK:           za = tl.load(b2)
// CHECK-NEXT:      zb = tl.load(b3 + cols_in)
// CHECK:           for k in range(0, 768, BLOCK_K):
// CHECK-NEXT:          a = tl.load(a_tile)
// CHECK-NEXT:          b = tl.load(b_tile)
// The u8 tile made signed for tl.dot (its zero point moves by -128 with it); the row and column sums.
// CHECK-NEXT:          a = (a.to(tl.int16) - 128).to(tl.int8)
// CHECK-NEXT:          acc = tl.dot(a, b, acc, out_dtype=tl.int32)
// CHECK-NEXT:          a_sums += tl.sum(a.to(tl.int32), axis=1)
// CHECK-NEXT:          b_sums += tl.sum(b.to(tl.int32), axis=0)
// CHECK:           za_s0 = za.to(tl.int32) - 128
// CHECK-NEXT:      zb_s0 = zb.to(tl.int32)
// CHECK-NEXT:      k_steps = tl.cdiv(768, BLOCK_K) * BLOCK_K
// CHECK-NEXT:      sums0 = acc - zb_s0[None, :] * a_sums[:, None] - za_s0 * b_sums[None, :] + k_steps * za_s0 * zb_s0[None, :]
// CHECK:           t0 = sums0.to(tl.float32)
// CHECK:           tl.math.div_rn
// CHECK:           [[Q:t[0-9]+]] = tl.where({{.*}}).to(tl.int32).to(tl.uint8)
// CHECK-NEXT:      tl.store(b7 + rows[:, None] * 192 + cols_in[None, :], [[Q]], mask=(cols < 192)[None, :])
// CHECK-NOT:   tl.store
func.func @quantized_linear(%x: tensor<64x768xui8>, %w: tensor<768x192xi8>, %zx: tensor<ui8>, %zw: tensor<192xi8>, %s: tensor<192xf32>, %ys: tensor<f32>, %yz: tensor<ui8>) -> tensor<64x192xui8> {
  %0 = "lz.matmul_integer"(%x, %w, %zx, %zw) : (tensor<64x768xui8>, tensor<768x192xi8>, tensor<ui8>, tensor<192xi8>) -> tensor<64x192xi32>
  %1 = "lz.cast"(%0) {to = f32} : (tensor<64x192xi32>) -> tensor<64x192xf32>
  %2 = "lz.mul"(%1, %s) : (tensor<64x192xf32>, tensor<192xf32>) -> tensor<64x192xf32>
  %3 = "lz.quantize"(%2, %ys, %yz) : (tensor<64x192xf32>, tensor<f32>, tensor<ui8>) -> tensor<64x192xui8>
  func.return %3 : tensor<64x192xui8>
}

// A padded conv of s8 input and weights, both zero points constant: literals; the input's, 3, is what
// the padding taps read (a real 0 once centred); the weights', 0, needs no row sums of the input.
// CHECK-LABEL: # ---- kernel lz_fused_conv_integer_{{[0-9]+}}: conv
// CHECK-NOT:       za = tl.load
// CHECK-NOT:       a_sums
// CHECK:               a = tl.load(x_image[:, None] + {{.*}}, mask=inside, other=3)
// CHECK:               acc = tl.dot(a, b, acc, out_dtype=tl.int32)
// CHECK-NEXT:          b_sums += tl.sum(b.to(tl.int32), axis=0)
// CHECK:           sums0 = acc - 3 * b_sums[None, :]
func.func @conv(%x: tensor<1x8x6x6xi8>, %w: tensor<16x8x3x3xi8>) -> tensor<1x16x6x6xi32> {
  %zx = "lz.constant"() {value = dense<3> : tensor<i8>} : () -> tensor<i8>
  %zw = "lz.constant"() {value = dense<0> : tensor<i8>} : () -> tensor<i8>
  %0 = "lz.conv_integer"(%x, %w, %zx, %zw) {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x8x6x6xi8>, tensor<16x8x3x3xi8>, tensor<i8>, tensor<i8>) -> tensor<1x16x6x6xi32>
  func.return %0 : tensor<1x16x6x6xi32>
}
