// partition{target=cuda}: ops the Triton backend cannot run (here a topk over a longer axis than
// one Triton block) are placed on the CPU, every edge between the devices gets an lz.transfer (a
// group of kind "transfer" of its own), arguments and results stay on cuda, and --debug=fusion says why.
// RUN: lezero-opt %s -p "partition{target=cuda}" | filecheck %s
// RUN: lezero-opt %s -p "partition{target=cuda},fuse,memory-plan" | filecheck %s --check-prefix=FUSED
// RUN: lezero-opt %s -p "partition{target=cuda}" --debug=fusion 2>&1 >/dev/null | filecheck %s --check-prefix=LOG
// RUN: lezero-opt %s -p partition | filecheck %s --check-prefix=CPU

// CHECK-LABEL: func.func @top2
// CHECK:      %[[E:.*]] = "lz.exp"(%arg0) {lz.device = "cuda", lz.group = 0 : i64, lz.group_kind = "elementwise", lz.stage = 0 : i64}
// CHECK-NEXT: %[[H:.*]] = "lz.transfer"(%[[E]]) {device = "cpu", lz.device = "cpu", lz.group = 1 : i64, lz.group_kind = "transfer", lz.stage = 1 : i64}
// CHECK-NEXT: %[[T:.*]]:2 = "lz.topk"(%[[H]]) {k = 2 : i64, lz.device = "cpu", lz.group = 2 : i64, lz.group_kind = "single", lz.stage = 2 : i64}
// CHECK-NEXT: %[[D:.*]] = "lz.transfer"(%[[T]]#0) {device = "cuda", lz.device = "cuda", lz.group = 3 : i64, lz.group_kind = "transfer", lz.stage = 3 : i64}
// CHECK-NEXT: "lz.mul"(%[[D]], %{{.*}}) {lz.device = "cuda", lz.group = 5 : i64, lz.group_kind = "elementwise", lz.stage = 4 : i64}
// CHECK-NEXT: %[[I:.*]] = "lz.transfer"(%[[T]]#1) {device = "cuda", lz.device = "cuda", lz.group = 4 : i64, lz.group_kind = "transfer", lz.stage = 3 : i64}
// CHECK-NEXT: func.return %{{.*}}, %[[I]]

// FUSED-LABEL: func.func @top2
// FUSED-SAME:  attributes {lz.arena_peak = 40128 : i64, lz.arena_size = 40128 : i64, lz.device_arena_peak = 40000 : i64, lz.device_arena_size = 40000 : i64}
// FUSED:       }) {device = "cuda", kind = "elementwise", lz.offsets = array<i64: 0>, lz.stage = 0 : i64, name = "lz_fused_exp_0"}
// FUSED:       "lz.transfer"
// FUSED:       }) {device = "cpu", kind = "transfer", lz.offsets = array<i64: 0>, lz.stage = 1 : i64, name = "lz_transfer_to_cpu_1"}
// FUSED:       "lz.topk"
// FUSED:       }) {device = "cpu", kind = "single", lz.offsets = array<i64: 40000, 40064>, lz.stage = 2 : i64, name = "lz_fused_topk_2"}
// FUSED:       }) {device = "cuda", kind = "transfer", lz.offsets = array<i64: 0>, lz.stage = 3 : i64, name = "lz_transfer_to_cuda_3"}
// FUSED:       }) {device = "cuda", kind = "transfer", lz.offsets = array<i64: -1>, lz.stage = 3 : i64, name = "lz_transfer_to_cuda_4"}
// FUSED:       }) {device = "cuda", kind = "elementwise", lz.offsets = array<i64: -1>, lz.stage = 4 : i64, name = "lz_fused_mul_5"}

// LOG: fusion: @top2: placed 'lz.topk' (line 39) on cpu: lz.topk over an axis of 5000 > 4096 elements runs on the CPU
// LOG: fusion: @top2: transfer tensor<2x5000xf32> from cuda to cpu for 'lz.topk' (line 39)
// LOG: fusion: @top2: transfer tensor<2x2xf32> from cpu to cuda for 'lz.mul' (line 40)
// LOG: fusion: @top2: transfer tensor<2x2xi64> from cpu to cuda for the return

// CPU-NOT: lz.device
// CPU-NOT: lz.transfer
func.func @top2(%x: tensor<2x5000xf32>) -> (tensor<2x2xf32>, tensor<2x2xi64>) {
  %c = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "lz.exp"(%x) : (tensor<2x5000xf32>) -> tensor<2x5000xf32>
  %1:2 = "lz.topk"(%0) {k = 2 : i64} : (tensor<2x5000xf32>) -> (tensor<2x2xf32>, tensor<2x2xi64>)
  %2 = "lz.mul"(%1#0, %c) : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  func.return %2, %1#1 : tensor<2x2xf32>, tensor<2x2xi64>
}
