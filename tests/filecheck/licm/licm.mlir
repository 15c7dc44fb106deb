// licm: ops of a loop body that read only invariants and constants run once before the loop;
// the values the body still needs come in as new invariant operands (dce then drops the old ones).
// A transpose that only a matmul reads stays: the GEMM reads through it, hoisted it is a copy per call.
// RUN: lezero-opt %s -p licm,dce | filecheck %s

// CHECK-LABEL: func.func @rnn_step
// CHECK-SAME: (%[[W:[^:]+]]: tensor<3x3xf32>, %[[B:[^:]+]]: tensor<3xf32>, %[[H0:[^:]+]]: tensor<1x3xf32>, %[[XS:[^:]+]]: tensor<4x1x3xf32>)
func.func @rnn_step(%w: tensor<3x3xf32>, %b: tensor<3xf32>, %h0: tensor<1x3xf32>, %xs: tensor<4x1x3xf32>) -> tensor<1x3xf32> {
  // CHECK-NEXT: %[[EB:.+]] = "lz.exp"(%[[B]])
  // CHECK-NEXT: %[[H:.+]] = "lz.for"(%[[W]], %[[EB]], %[[H0]], %[[XS]])
  // CHECK-NEXT: ^bb0(%{{.+}}: tensor<i64>, %[[W_:[^:]+]]: tensor<3x3xf32>, %[[EB_:[^:]+]]: tensor<3xf32>, %[[HI:[^:]+]]: tensor<1x3xf32>, %[[X:[^:]+]]: tensor<1x3xf32>):
  // CHECK-NEXT: %[[WT:.+]] = "lz.transpose"(%[[W_]])
  // CHECK-NEXT: %[[M:.+]] = "lz.matmul"(%[[HI]], %[[WT]])
  // CHECK-NEXT: %[[A:.+]] = "lz.add"(%[[M]], %[[X]])
  // CHECK-NEXT: %[[A2:.+]] = "lz.add"(%[[A]], %[[EB_]])
  // CHECK-NEXT: %[[T:.+]] = "lz.tanh"(%[[A2]])
  // CHECK-NEXT: "lz.yield"(%[[T]])
  // CHECK-NEXT: }) {num_carried = 1 : i64, num_invariant = 2 : i64, trip_count = 4 : i64}
  %h = "lz.for"(%w, %b, %h0, %xs) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<3x3xf32>, %b_: tensor<3xf32>, %h_: tensor<1x3xf32>, %x: tensor<1x3xf32>):
    %wt = "lz.transpose"(%w_) {perm = array<i64: 1, 0>} : (tensor<3x3xf32>) -> tensor<3x3xf32>
    %eb = "lz.exp"(%b_) : (tensor<3xf32>) -> tensor<3xf32>
    %0 = "lz.matmul"(%h_, %wt) : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
    %1 = "lz.add"(%0, %x) : (tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<1x3xf32>
    %2 = "lz.add"(%1, %eb) : (tensor<1x3xf32>, tensor<3xf32>) -> tensor<1x3xf32>
    %3 = "lz.tanh"(%2) : (tensor<1x3xf32>) -> tensor<1x3xf32>
    "lz.yield"(%3) : (tensor<1x3xf32>) -> ()
  }) {trip_count = 4 : i64, num_invariant = 2 : i64, num_carried = 1 : i64} : (tensor<3x3xf32>, tensor<3xf32>, tensor<1x3xf32>, tensor<4x1x3xf32>) -> tensor<1x3xf32>
  func.return %h : tensor<1x3xf32>
}

// The carried value, and what reads it, stay: nothing here is invariant.
// CHECK-LABEL: func.func @nothing_invariant
func.func @nothing_invariant(%h0: tensor<3xf32>) -> tensor<3xf32> {
  // CHECK-NEXT: "lz.for"
  // CHECK-NEXT: ^bb0
  // CHECK-NEXT: "lz.sin"
  // CHECK-NEXT: "lz.yield"
  %h = "lz.for"(%h0) ({
  ^bb0(%i: tensor<i64>, %h_: tensor<3xf32>):
    %0 = "lz.sin"(%h_) : (tensor<3xf32>) -> tensor<3xf32>
    "lz.yield"(%0) : (tensor<3xf32>) -> ()
  }) {trip_count = 2 : i64, num_carried = 1 : i64} : (tensor<3xf32>) -> tensor<3xf32>
  func.return %h : tensor<3xf32>
}
