// shape-infer: `?` dims that inference can tell from the operands become static, through chains
// of ops, into function results and call results; sizes the IR already states are kept, and
// dims nothing can tell stay `?`.
// RUN: lezero-opt %s -p shape-infer | filecheck %s

// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>, %[[Y:[^:]+]]: tensor<3xf32>, %[[W:[^:]+]]: tensor<3x5xf32>) -> tensor<5x2xf32>
func.func @chain(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %w: tensor<3x5xf32>) -> tensor<?x?xf32> {
  // CHECK-NEXT: %[[A:.+]] = "lz.add"(%[[X]], %[[Y]]) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = "lz.add"(%x, %y) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  // CHECK-NEXT: %[[E:.+]] = "lz.exp"(%[[A]]) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "lz.exp"(%0) : (tensor<?x3xf32>) -> tensor<?x?xf32>
  // CHECK-NEXT: %[[M:.+]] = "lz.matmul"(%[[E]], %[[W]]) : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  %2 = "lz.matmul"(%1, %w) : (tensor<?x?xf32>, tensor<3x5xf32>) -> tensor<?x5xf32>
  // CHECK-NEXT: %[[T:.+]] = "lz.transpose"(%[[M]]) : (tensor<2x5xf32>) -> tensor<5x2xf32>
  %3 = "lz.transpose"(%2) : (tensor<?x5xf32>) -> tensor<?x?xf32>
  // CHECK-NEXT: func.return %[[T]] : tensor<5x2xf32>
  func.return %3 : tensor<?x?xf32>
}

// CHECK-LABEL: func.func @reshape_reduce_concat
// CHECK-SAME: -> (tensor<4x6xf32>, tensor<4x1xf32>, tensor<4x7xf32>)
func.func @reshape_reduce_concat(%x: tensor<2x2x6xf32>, %y: tensor<4x1xf32>) -> (tensor<?x6xf32>, tensor<?x?xf32>, tensor<?x?xf32>) {
  // CHECK-NEXT: "lz.reshape"(%{{.*}}) {shape = array<i64: -1, 6>} : (tensor<2x2x6xf32>) -> tensor<4x6xf32>
  %0 = "lz.reshape"(%x) {shape = array<i64: -1, 6>} : (tensor<2x2x6xf32>) -> tensor<?x6xf32>
  // CHECK-NEXT: "lz.reduce_sum"(%{{.*}}) {axes = array<i64: 1>, keepdims = true} : (tensor<4x6xf32>) -> tensor<4x1xf32>
  %1 = "lz.reduce_sum"(%0) {axes = array<i64: 1>, keepdims = true} : (tensor<?x6xf32>) -> tensor<?x?xf32>
  // CHECK-NEXT: "lz.concat"(%{{.*}}, %{{.*}}) {axis = 1 : i64} : (tensor<4x6xf32>, tensor<4x1xf32>) -> tensor<4x7xf32>
  %2 = "lz.concat"(%0, %y) {axis = 1 : i64} : (tensor<?x6xf32>, tensor<4x1xf32>) -> tensor<?x?xf32>
  // CHECK-NEXT: func.return %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x6xf32>, tensor<4x1xf32>, tensor<4x7xf32>
  func.return %0, %1, %2 : tensor<?x6xf32>, tensor<?x?xf32>, tensor<?x?xf32>
}

// Dims the operands do not tell stay dynamic; a size the IR states where inference only knows
// `?` is kept, never overridden.  Argument types are never changed.
// CHECK-LABEL: func.func @partial
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x3xf32>) -> (tensor<3x?xf32>, tensor<5x3xf32>, tensor<?x3xf32>)
func.func @partial(%x: tensor<?x3xf32>) -> (tensor<?x?xf32>, tensor<5x3xf32>, tensor<?x?xf32>) {
  // CHECK-NEXT: "lz.transpose"(%[[X]]) : (tensor<?x3xf32>) -> tensor<3x?xf32>
  %0 = "lz.transpose"(%x) : (tensor<?x3xf32>) -> tensor<?x?xf32>
  // CHECK-NEXT: %[[K:.+]] = "lz.exp"(%[[X]]) : (tensor<?x3xf32>) -> tensor<5x3xf32>
  %1 = "lz.exp"(%x) : (tensor<?x3xf32>) -> tensor<5x3xf32>
  // CHECK-NEXT: "lz.neg"(%[[K]]) : (tensor<5x3xf32>) -> tensor<5x3xf32>
  %2 = "lz.neg"(%1) : (tensor<5x3xf32>) -> tensor<5x3xf32>
  // CHECK-NEXT: "lz.relu"(%[[X]]) : (tensor<?x3xf32>) -> tensor<?x3xf32>
  %3 = "lz.relu"(%x) : (tensor<?x3xf32>) -> tensor<?x?xf32>
  // CHECK-NEXT: func.return %{{.*}}, %{{.*}}, %{{.*}} : tensor<3x?xf32>, tensor<5x3xf32>, tensor<?x3xf32>
  func.return %0, %2, %3 : tensor<?x?xf32>, tensor<5x3xf32>, tensor<?x?xf32>
}

// A broadcast of `?` against a static size other than 1 is that size.
// CHECK-LABEL: func.func @broadcast
// CHECK-SAME: -> tensor<4x3xf32>
func.func @broadcast(%x: tensor<?x3xf32>, %y: tensor<4x1xf32>) -> tensor<?x3xf32> {
  // CHECK-NEXT: "lz.mul"(%{{.*}}, %{{.*}}) : (tensor<?x3xf32>, tensor<4x1xf32>) -> tensor<4x3xf32>
  %0 = "lz.mul"(%x, %y) : (tensor<?x3xf32>, tensor<4x1xf32>) -> tensor<?x3xf32>
  func.return %0 : tensor<?x3xf32>
}

// Calls follow the refined signature of their callee (defined after the caller).
// CHECK-LABEL: func.func @caller
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: %[[C:.+]] = "func.call"(%[[X]]) {callee = @callee} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: %[[N:.+]] = "lz.neg"(%[[C]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: func.return %[[N]] : tensor<4xf32>
func.func @caller(%x: tensor<4xf32>) -> tensor<?xf32> {
  %0 = "func.call"(%x) {callee = @callee} : (tensor<4xf32>) -> tensor<?xf32>
  %1 = "lz.neg"(%0) : (tensor<?xf32>) -> tensor<?xf32>
  func.return %1 : tensor<?xf32>
}

// CHECK-LABEL: func.func @callee
// CHECK-SAME: (%{{.*}}: tensor<4xf32>) -> tensor<4xf32>
func.func @callee(%x: tensor<4xf32>) -> tensor<?xf32> {
  %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}

// A kernel's region arguments follow its refined operands, and its results follow its lz.yield.
// CHECK-LABEL: func.func @kernel
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: %[[R:.+]] = "lz.relu"(%[[X]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: %[[K:.+]] = "lz.kernel"(%[[R]]) ({
// CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[E:.+]] = "lz.exp"(%[[A]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:   "lz.yield"(%[[E]]) : (tensor<4xf32>) -> ()
// CHECK-NEXT: }) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: func.return %[[K]] : tensor<4xf32>
func.func @kernel(%x: tensor<4xf32>) -> tensor<?xf32> {
  %r = "lz.relu"(%x) : (tensor<4xf32>) -> tensor<?xf32>
  %0 = "lz.kernel"(%r) ({
  ^bb0(%a: tensor<?xf32>):
    %1 = "lz.exp"(%a) : (tensor<?xf32>) -> tensor<?xf32>
    "lz.yield"(%1) : (tensor<?xf32>) -> ()
  }) : (tensor<?xf32>) -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}

// Static IR is left exactly as it was.
// CHECK-LABEL: func.func @static
// CHECK-NEXT: "lz.transpose"(%{{.*}}) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT: func.return %{{.*}} : tensor<3x2xf32>
func.func @static(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}
