// cse: pure ops with the same name, operands (any order for commutative ops), attributes and
// result types are merged into the first; anything that differs is not.
// RUN: lezero-opt %s -p cse --allow-unregistered-dialect | filecheck %s

// CHECK-LABEL: func.func @duplicates
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @duplicates(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[E:.+]] = "lz.exp"(%[[X]])
  // CHECK-NEXT: %[[T:.+]] = "lz.tanh"(%[[E]])
  // CHECK-NEXT: func.return %[[T]], %[[T]] :
  %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  // merging %1 into %0 makes these two the same as well
  %2 = "lz.tanh"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "lz.tanh"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2, %3 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @commutative
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4xf32>, %[[B:[^:]+]]: tensor<4xf32>)
func.func @commutative(%a: tensor<4xf32>, %b: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[ADD:.+]] = "lz.add"(%[[A]], %[[B]])
  %0 = "lz.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.add"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[MUL:.+]] = "lz.mul"(%[[B]], %[[A]])
  %2 = "lz.mul"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = "lz.mul"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // sub is not commutative: a-b and b-a both stay
  // CHECK-NEXT: %[[S1:.+]] = "lz.sub"(%[[A]], %[[B]])
  // CHECK-NEXT: %[[S2:.+]] = "lz.sub"(%[[B]], %[[A]])
  %4 = "lz.sub"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %5 = "lz.sub"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[ADD]], %[[ADD]], %[[MUL]], %[[MUL]], %[[S1]], %[[S2]] :
  func.return %0, %1, %2, %3, %4, %5 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @different_attributes
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
func.func @different_attributes(%x: tensor<2x3xf32>)
    -> (tensor<2x1xf32>, tensor<1x3xf32>, tensor<2x1xf32>, tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf32>, tensor<2x3xf32>,
        tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  // CHECK-NEXT: %[[R0:.+]] = "lz.reduce_sum"(%[[X]]) {axes = array<i64: 1>, keepdims = true}
  // CHECK-NEXT: %[[R1:.+]] = "lz.reduce_sum"(%[[X]]) {axes = array<i64: 0>, keepdims = true}
  // CHECK-NEXT: %[[R2:.+]] = "lz.reduce_max"(%[[X]]) {axes = array<i64: 1>, keepdims = true}
  %0 = "lz.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = true} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  %1 = "lz.reduce_sum"(%x) {axes = array<i64: 0>, keepdims = true} : (tensor<2x3xf32>) -> tensor<1x3xf32>
  %2 = "lz.reduce_max"(%x) {axes = array<i64: 1>, keepdims = true} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  // CHECK-NEXT: %[[C0:.+]] = "lz.cast"(%[[X]]) {to = f16}
  // CHECK-NEXT: %[[C1:.+]] = "lz.cast"(%[[X]]) {to = bf16}
  %3 = "lz.cast"(%x) {to = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  %4 = "lz.cast"(%x) {to = bf16} : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  // CHECK-NEXT: %[[G0:.+]] = "lz.gelu"(%[[X]]) :
  // CHECK-NEXT: %[[G1:.+]] = "lz.gelu"(%[[X]]) {approximate = "tanh"}
  %5 = "lz.gelu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = "lz.gelu"(%x) {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // pad values 0.0 and -0.0 differ (in the sign of the padding)
  // CHECK-NEXT: %[[P0:.+]] = "lz.pad"(%[[X]]) {pads = array<i64: 0, 1, 0, 0>, value = 0.0 : f32} :
  // CHECK-NEXT: %[[P1:.+]] = "lz.pad"(%[[X]]) {pads = array<i64: 0, 1, 0, 0>, value = -0.0 : f32} :
  %p0 = "lz.pad"(%x) {pads = array<i64: 0, 1, 0, 0>, value = 0.0 : f32} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  %p1 = "lz.pad"(%x) {pads = array<i64: 0, 1, 0, 0>, value = -0.0 : f32} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  %p2 = "lz.pad"(%x) {pads = array<i64: 0, 1, 0, 0>, value = 0.0 : f32} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  // the same attributes again: merged with the first of each
  %7 = "lz.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = true} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  %8 = "lz.gelu"(%x) {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: func.return %[[R0]], %[[R1]], %[[R2]], %[[C0]], %[[C1]], %[[G1]], %[[G0]], %[[P0]], %[[P1]], %[[P0]] :
  func.return %7, %1, %2, %3, %4, %8, %5, %p0, %p1, %p2 : tensor<2x1xf32>, tensor<1x3xf32>, tensor<2x1xf32>, tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// CHECK-LABEL: func.func @constants
func.func @constants() -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf64>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
  // CHECK-NEXT: %[[ONE:.+]] = "lz.constant"() {value = dense<1.0> : tensor<2xf32>}
  %0 = "lz.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %1 = "lz.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  // the same elements written out are the same constant
  %2 = "lz.constant"() {value = dense<[1.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  // another type, another value: not merged
  // CHECK-NEXT: %[[F64:.+]] = "lz.constant"() {value = dense<1.0> : tensor<2xf64>}
  %3 = "lz.constant"() {value = dense<1.0> : tensor<2xf64>} : () -> tensor<2xf64>
  // CHECK-NEXT: %[[TWO:.+]] = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>}
  %4 = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  // 0.0 and -0.0 are different constants
  // CHECK-NEXT: %[[Z:.+]] = "lz.constant"() {value = dense<0.0> : tensor<2xf32>}
  // CHECK-NEXT: %[[NZ:.+]] = "lz.constant"() {value = dense<-0.0> : tensor<2xf32>}
  %5 = "lz.constant"() {value = dense<0.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %6 = "lz.constant"() {value = dense<-0.0> : tensor<2xf32>} : () -> tensor<2xf32>
  // CHECK-NEXT: func.return %[[ONE]], %[[ONE]], %[[ONE]], %[[F64]], %[[TWO]], %[[Z]], %[[NZ]] :
  func.return %0, %1, %2, %3, %4, %5, %6 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf64>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}

// Ops with no known effects (unregistered) are never merged.
// CHECK-LABEL: func.func @not_pure
func.func @not_pure(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[A:.+]] = "test.op"(%{{.*}})
  // CHECK-NEXT: %[[B:.+]] = "test.op"(%{{.*}})
  // CHECK-NEXT: func.return %[[A]], %[[B]]
  %0 = "test.op"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "test.op"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// A nested region has its own table: duplicates inside it merge with each other, but not with
// the op outside it (nothing reaches across a region boundary: the region may be isolated).
// CHECK-LABEL: func.func @nested_region
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @nested_region(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[OUT:.+]] = "lz.exp"(%[[X]])
  %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[R:.+]] = "test.region"(%[[X]]) ({
  // CHECK-NEXT: ^bb0(%[[ARG:.+]]: tensor<4xf32>):
  // CHECK-NEXT:   %[[IN:.+]] = "lz.exp"(%[[ARG]])
  // CHECK-NEXT:   %[[INX:.+]] = "lz.exp"(%[[X]])
  // CHECK-NEXT:   %[[SUM:.+]] = "lz.add"(%[[IN]], %[[IN]])
  // CHECK-NEXT:   %[[SUM2:.+]] = "lz.add"(%[[SUM]], %[[INX]])
  // CHECK-NEXT:   "test.yield"(%[[SUM2]])
  // CHECK-NEXT: })
  %1 = "test.region"(%x) ({
  ^bb0(%a: tensor<4xf32>):
    %2 = "lz.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %3 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %4 = "lz.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %5 = "lz.add"(%2, %4) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %6 = "lz.add"(%5, %3) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "test.yield"(%6) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[S:.+]] = "lz.add"(%[[OUT]], %[[R]])
  // CHECK-NEXT: func.return %[[S]]
  %7 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %8 = "lz.add"(%7, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %8 : tensor<4xf32>
}

// What a region computes does not dominate the ops after it: they are not merged into it.
// CHECK-LABEL: func.func @region_does_not_leak
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @region_does_not_leak(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[R:.+]] = "test.region"() ({
  // CHECK-NEXT:   %[[IN:.+]] = "lz.neg"(%[[X]])
  // CHECK-NEXT:   "test.yield"(%[[IN]])
  // CHECK-NEXT: })
  %0 = "test.region"() ({
    %1 = "lz.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "lz.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    "test.yield"(%2) : (tensor<4xf32>) -> ()
  }) : () -> tensor<4xf32>
  // CHECK-NEXT: %[[AFTER:.+]] = "lz.neg"(%[[X]])
  // CHECK-NEXT: func.return %[[R]], %[[AFTER]]
  %3 = "lz.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0, %3 : tensor<4xf32>, tensor<4xf32>
}

// Regions that hold the same ops are not compared: two identical region ops both stay.
// CHECK-LABEL: func.func @region_ops_not_merged
func.func @region_ops_not_merged(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK: "lz.kernel"
  // CHECK: "lz.kernel"
  %0 = "lz.kernel"(%x) ({
  ^bb0(%a: tensor<4xf32>):
    %1 = "lz.relu"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    "lz.yield"(%1) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.kernel"(%x) ({
  ^bb0(%b: tensor<4xf32>):
    %3 = "lz.relu"(%b) : (tensor<4xf32>) -> tensor<4xf32>
    "lz.yield"(%3) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0, %2 : tensor<4xf32>, tensor<4xf32>
}

// Different result types (one refined) are not merged: func.return needs each exactly.
// CHECK-LABEL: func.func @different_result_types
// CHECK-SAME: (%[[D:[^:]+]]: tensor<?xf32>)
func.func @different_result_types(%d: tensor<?xf32>) -> (tensor<?xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[A:.+]] = "lz.exp"(%[[D]]) : (tensor<?xf32>) -> tensor<?xf32>
  // CHECK-NEXT: %[[B:.+]] = "lz.exp"(%[[D]]) : (tensor<?xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[A]], %[[B]]
  %0 = "lz.exp"(%d) : (tensor<?xf32>) -> tensor<?xf32>
  %1 = "lz.exp"(%d) : (tensor<?xf32>) -> tensor<4xf32>
  func.return %0, %1 : tensor<?xf32>, tensor<4xf32>
}
