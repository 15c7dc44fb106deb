// bucket-all-reduce: a step's gradient all-reduces become DDP's buckets (reverse order, at most
// bucket-bytes each), a start right after the last gradient of each bucket, a wait (after the last
// start before it) right before the update; cse and dce neither merge nor drop a collective.
// RUN: lezero-opt %s -p cse,dce,bucket-all-reduce{bucket-bytes=64},cse,dce | filecheck %s

// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<8x2xf32>, %[[B:[^:]+]]: tensor<2xf32>)
func.func @step(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>, %b: tensor<2xf32>) -> (tensor<8x2xf32>, tensor<2xf32>) {
  // the bias's gradient comes first: its bucket (8 + 64 bytes > 64: alone) starts right after it
  // CHECK: %[[DB:.+]] = "lz.reduce_sum"
  // CHECK-NEXT: %[[T0:.+]] = "lz.all_reduce_start"(%[[DB]]) {op = "avg", tag = "bucket0"}
  // CHECK: %[[DW:.+]] = "lz.matmul"
  // CHECK-NEXT: %[[T1:.+]] = "lz.all_reduce_start"(%[[DW]]) {op = "avg", tag = "bucket1"}
  // each wait follows the last start before it, so both buckets are in flight before one blocks
  // CHECK-NEXT: %[[RW:.+]] = "lz.all_reduce_wait"(%[[T1]], %[[DW]], %[[T0]])
  // CHECK-NEXT: "lz.sub"(%[[W]], %[[RW]])
  // CHECK-NEXT: %[[RB:.+]] = "lz.all_reduce_wait"(%[[T0]], %[[DB]], %[[T1]])
  // CHECK-NEXT: "lz.sub"(%[[B]], %[[RB]])
  %ones = "lz.constant"() {value = dense<1.0> : tensor<4x2xf32>} : () -> tensor<4x2xf32>
  %db = "lz.reduce_sum"(%ones) {axes = array<i64: 0>} : (tensor<4x2xf32>) -> tensor<2xf32>
  %xt = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %dw = "lz.matmul"(%xt, %ones) : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
  %rw = "lz.all_reduce"(%dw) {op = "avg"} : (tensor<8x2xf32>) -> tensor<8x2xf32>
  %rb = "lz.all_reduce"(%db) {op = "avg"} : (tensor<2xf32>) -> tensor<2xf32>
  %nw = "lz.sub"(%w, %rw) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
  %nb = "lz.sub"(%b, %rb) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %nw, %nb : tensor<8x2xf32>, tensor<2xf32>
}

// CHECK-LABEL: func.func @one_bucket
func.func @one_bucket(%g: tensor<3xf32>, %h: tensor<2x2xf32>) -> (tensor<3xf32>, tensor<2x2xf32>) {
  // both fit in 64 bytes: one flat bucket, sliced back after the wait
  // CHECK: %[[FLAT:.+]] = "lz.concat"
  // CHECK-NEXT: %[[T:.+]] = "lz.all_reduce_start"(%[[FLAT]]) {op = "sum", tag = "bucket0"}
  // CHECK-NEXT: %[[R:.+]] = "lz.all_reduce_wait"(%[[T]], %[[FLAT]]) :
  // CHECK-DAG: "lz.slice"(%[[R]]) {axes = array<i64: 0>, ends = array<i64: 4>, starts = array<i64: 0>}
  // CHECK-DAG: "lz.slice"(%[[R]]) {axes = array<i64: 0>, ends = array<i64: 7>, starts = array<i64: 4>}
  %0 = "lz.all_reduce"(%g) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "lz.all_reduce"(%h) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  func.return %0, %1 : tensor<3xf32>, tensor<2x2xf32>
}

// CHECK-LABEL: func.func @never_merged_or_dropped
func.func @never_merged_or_dropped(%g: tensor<16xf32>) -> tensor<16xf32> {
  // two reductions of one value are two collectives (every rank issues both), the unused one too
  // CHECK-COUNT-2: "lz.all_reduce_start"
  // CHECK-COUNT-2: "lz.all_reduce_wait"
  %0 = "lz.exp"(%g) : (tensor<16xf32>) -> tensor<16xf32>
  %1 = "lz.exp"(%g) : (tensor<16xf32>) -> tensor<16xf32>
  %2 = "lz.all_reduce"(%0) {op = "max"} : (tensor<16xf32>) -> tensor<16xf32>
  %3 = "lz.all_reduce"(%1) {op = "max"} : (tensor<16xf32>) -> tensor<16xf32>
  func.return %2 : tensor<16xf32>
}
