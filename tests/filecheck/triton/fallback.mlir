// Automatic fallback: a topk over 5000 elements is longer than one Triton block (4096), so
// partition{target=cuda} places it on the CPU with transfers on its edges; --emit=triton prints
// the GPU kernels around it.
// RUN: lezero-opt %s --emit=triton | filecheck %s
// RUN: lezero-opt %s --emit=triton --debug=fusion 2>&1 >/dev/null | filecheck %s --check-prefix=LOG
// RUN: lezero-opt %s --emit=ptx | filecheck %s --check-prefix=PTX

// exp runs on the GPU; topk on the CPU (no Triton source); the transfers are copies (none either);
// the multiplication of topk's values is back on the GPU.
// CHECK-LABEL: # ---- kernel lz_fused_exp_0: elementwise
// CHECK:       def lz_fused_exp_0(b0, b1, BLOCK: tl.constexpr):
// CHECK-NOT:   # ---- kernel
// CHECK-LABEL: # ---- kernel lz_fused_mul_5: elementwise
// CHECK:       def lz_fused_mul_5(b0, b1, BLOCK: tl.constexpr):
// CHECK-NOT:   # ---- kernel

// LOG:      fusion: @top2: placed 'lz.topk' (line [[# @LINE + 14]]) on cpu: lz.topk over an axis of 5000 > 4096 elements runs on the CPU
// LOG-NEXT: fusion: @top2: transfer tensor<2x5000xf32> from cuda to cpu for 'lz.topk' (line [[# @LINE + 13]])
// LOG-NEXT: fusion: @top2: transfer tensor<2x2xf32> from cpu to cuda for 'lz.mul' (line [[# @LINE + 13]])
// LOG-NEXT: fusion: @top2: transfer tensor<2x2xi64> from cpu to cuda for the return

// PTX-LABEL: // ---- kernel lz_fused_exp_0: elementwise
// PTX:       .visible .entry lz_fused_exp_0(
// PTX-LABEL: // ---- kernel lz_fused_mul_5: elementwise
// PTX:       .visible .entry lz_fused_mul_5(
// PTX-NOT:   .entry

func.func @top2(%x: tensor<2x5000xf32>) -> (tensor<2x2xf32>, tensor<2x2xi64>) {
  %c = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "lz.exp"(%x) : (tensor<2x5000xf32>) -> tensor<2x5000xf32>
  %1:2 = "lz.topk"(%0) {k = 2 : i64} : (tensor<2x5000xf32>) -> (tensor<2x2xf32>, tensor<2x2xi64>)
  %2 = "lz.mul"(%1#0, %c) : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  func.return %2, %1#1 : tensor<2x2xf32>, tensor<2x2xi64>
}
