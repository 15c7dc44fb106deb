// In place: an elementwise kernel that reads an operand for the last time, at the index it
// writes, of the same shape and element size, writes its result over it.
// RUN: lezero-opt %s -p "fuse{epilogues=false},memory-plan" | filecheck %s
// RUN: lezero-opt %s -p "fuse{epilogues=false},memory-plan{in-place=false}" | filecheck %s --check-prefix=NOINPLACE
// RUN: lezero-opt %s -p "fuse{epilogues=false},memory-plan" --debug=memory-plan 2>&1 >/dev/null | filecheck %s --check-prefix=DEBUG

// The bias and relu read the first matmul's result at their own index and are its last
// reader: they take its slot. The second matmul's result feeds a reduction, never in place.
// CHECK-LABEL: func.func @layers
// CHECK-SAME: attributes {lz.arena_peak = 1024 : i64, lz.arena_size = 1024 : i64}
// CHECK: lz.offsets = array<i64: 0>, {{.*}}name = "lz_fused_matmul_0"
// CHECK: lz.offsets = array<i64: 0>, {{.*}}name = "lz_fused_add_relu_1"
// CHECK: lz.offsets = array<i64: 512>, {{.*}}name = "lz_fused_matmul_2"
// CHECK: lz.offsets = array<i64: -1>, {{.*}}name = "lz_fused_reduce_sum_3"
// Without it the two matmul results still share a slot (their lifetimes do not meet).
// NOINPLACE-LABEL: func.func @layers
// NOINPLACE-SAME: attributes {lz.arena_peak = 1024 : i64, lz.arena_size = 1024 : i64}
// NOINPLACE: lz.offsets = array<i64: 0>, {{.*}}name = "lz_fused_matmul_0"
// NOINPLACE: lz.offsets = array<i64: 512>, {{.*}}name = "lz_fused_add_relu_1"
// NOINPLACE: lz.offsets = array<i64: 0>, {{.*}}name = "lz_fused_matmul_2"
// DEBUG: memory-plan: @layers: lz_fused_matmul_0 result #0: 512 bytes, live 0..1, offset 0
// DEBUG-NEXT: memory-plan: @layers: lz_fused_add_relu_1 result #0: 512 bytes, live 1..2, offset 0, in place of operand #0
func.func @layers(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>, %v: tensor<16x16xf32>) -> tensor<8xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %1 = "lz.add"(%0, %b) : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %2 = "lz.relu"(%1) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %3 = "lz.matmul"(%2, %v) : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %4 = "lz.reduce_sum"(%3) {axes = array<i64: 1>} : (tensor<8x16xf32>) -> tensor<8xf32>
  func.return %4 : tensor<8xf32>
}
