// Layer norm: mean, variance, normalization and the affine epilogue as one reduction kernel.
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_reduce_mean_sub_mul_add_rsqrt_0: reduction
// CHECK:       def lz_fused_reduce_mean_sub_mul_add_rsqrt_0(b0, b1, b2, b3, ROWS: tl.constexpr, RBLOCK: tl.constexpr):
// CHECK-NEXT:      """lz.reduce_mean -> lz.sub -> lz.mul -> lz.reduce_mean -> lz.add -> lz.rsqrt -> lz.mul -> lz.mul -> lz.add: (tensor<32x256xf32>, tensor<256xf32>, tensor<256xf32>) -> (tensor<32x256xf32>)"""
// The mean ...
// CHECK:           [[S1:red[0-9]+]] = tl.reduce(acc0, 1, {{.*}}, keep_dims=True)
// CHECK-NEXT:      [[MEAN:t[0-9]+]] = tl.math.div_rn([[S1]], tl.full([], 256.0, tl.float32))
// ... the variance: the mean of (x - mean)^2 ...
// CHECK:               [[C:t[0-9]+]] = {{x[0-9]+}} - [[MEAN]]
// CHECK-NEXT:          [[SQ:t[0-9]+]] = [[C]] * [[C]]
// CHECK:           [[S2:red[0-9]+]] = tl.reduce(acc1, 1, {{.*}}, keep_dims=True)
// CHECK-NEXT:      [[VAR:t[0-9]+]] = tl.math.div_rn([[S2]], tl.full([], 256.0, tl.float32))
// ... and the epilogue: (x - mean) * rsqrt(var + eps) * w + b, w and b read per column.
// CHECK:               {{t[0-9]+}} = [[VAR]] + 9.99999974{{[0-9]*}}e-06
// CHECK:               tl.sqrt_rn(
// CHECK:               [[W:x[0-9]+]] = tl.load(b1 + cols, mask=mask, other=0)
// CHECK-NEXT:          [[SCALED:t[0-9]+]] = {{t[0-9]+}} * [[W]]
// CHECK-NEXT:          [[B:x[0-9]+]] = tl.load(b2 + cols, mask=mask, other=0)
// CHECK-NEXT:          [[OUT:t[0-9]+]] = [[SCALED]] + [[B]]
// CHECK-NEXT:          tl.store(b3 + {{idx[0-9]+}}, [[OUT]], mask=mask)
// CHECK-NOT:   # ---- kernel
func.func @layer_norm(%x: tensor<32x256xf32>, %w: tensor<256xf32>, %b: tensor<256xf32>) -> tensor<32x256xf32> {
  %0 = "lz.layer_norm"(%x, %w, %b) {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<32x256xf32>, tensor<256xf32>, tensor<256xf32>) -> tensor<32x256xf32>
  func.return %0 : tensor<32x256xf32>
}
