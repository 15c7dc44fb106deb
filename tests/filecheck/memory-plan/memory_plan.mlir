// memory-plan: one 64-byte-aligned offset per kernel result (-1: returned, written into the
// caller's buffer), the arena size and the peak of live bytes on the function.
// RUN: lezero-opt %s -p fuse,memory-plan | filecheck %s
// RUN: lezero-opt %s -p fuse,memory-plan --debug=memory-plan 2>&1 >/dev/null | filecheck %s --check-prefix=DEBUG

// The hidden layer (65536 bytes) and the logits (2560) are live together while the logits are
// computed: the arena is the peak.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: attributes {lz.arena_peak = 68096 : i64, lz.arena_size = 68096 : i64}
// CHECK: lz.offsets = array<i64: 0>, {{.*}}name = "lz_fused_matmul_add_relu_0"
// CHECK: lz.offsets = array<i64: 65536>, {{.*}}name = "lz_fused_matmul_add_1"
// CHECK: lz.offsets = array<i64: -1>, {{.*}}name = "lz_fused_reduce_max_sub_exp_reduce_sum_div_2"
// DEBUG: memory-plan: @mlp: lz_fused_matmul_add_relu_0 result #0: 65536 bytes, live 0..1, offset 0
// DEBUG: memory-plan: @mlp: lz_fused_matmul_add_1 result #0: 2560 bytes, live 1..2, offset 65536
// DEBUG: memory-plan: @mlp: arena 68096 bytes, peak 68096 bytes
func.func @mlp(%x: tensor<64x784xf32>, %w1: tensor<784x256xf32>, %b1: tensor<256xf32>,
               %w2: tensor<256x10xf32>, %b2: tensor<10xf32>) -> tensor<64x10xf32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<64x256xf32>, tensor<256x10xf32>) -> tensor<64x10xf32>
  %4 = "lz.add"(%3, %b2) : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
  %5 = "lz.reduce_max"(%4) {axes = array<i64: 1>, keepdims = true} : (tensor<64x10xf32>) -> tensor<64x1xf32>
  %6 = "lz.sub"(%4, %5) : (tensor<64x10xf32>, tensor<64x1xf32>) -> tensor<64x10xf32>
  %7 = "lz.exp"(%6) : (tensor<64x10xf32>) -> tensor<64x10xf32>
  %8 = "lz.reduce_sum"(%7) {axes = array<i64: 1>, keepdims = true} : (tensor<64x10xf32>) -> tensor<64x1xf32>
  %9 = "lz.div"(%7, %8) : (tensor<64x10xf32>, tensor<64x1xf32>) -> tensor<64x10xf32>
  func.return %9 : tensor<64x10xf32>
}

// The transposes keep each exp in a kernel of its own. The first exp reads the argument; each
// later kernel reads the previous result through a transpose (never in place), so the results
// alternate between two slots.
// CHECK-LABEL: func.func @ping_pong
// CHECK-SAME: attributes {lz.arena_peak = 128 : i64, lz.arena_size = 128 : i64}
// CHECK: lz.offsets = array<i64: 0>, {{.*}}name = "lz_fused_exp_3"
// CHECK: lz.offsets = array<i64: 64>, {{.*}}name = "lz_fused_transpose_exp_4"
// CHECK: lz.offsets = array<i64: 0>, {{.*}}name = "lz_fused_transpose_exp_5"
// CHECK: lz.offsets = array<i64: -1>, {{.*}}name = "lz_fused_transpose_exp_6"
func.func @ping_pong(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %0 = "lz.exp"(%x) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %1 = "lz.transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %2 = "lz.exp"(%1) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %3 = "lz.transpose"(%2) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %4 = "lz.exp"(%3) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %5 = "lz.transpose"(%4) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %6 = "lz.exp"(%5) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  func.return %6 : tensor<2x2xf32>
}
