// constant-fold: ops whose operands are all constants become one lz.constant holding the
// reference result; constants left unused go; max-elements caps what is folded.
// RUN: lezero-opt %s -p constant-fold | filecheck %s
// RUN: lezero-opt %s -p 'constant-fold{max-elements=4}' | filecheck %s --check-prefix=CAP
// RUN: lezero-opt %s -p constant-fold --print-debuginfo | filecheck %s --check-prefix=LOC

// CHECK-LABEL: func.func @float_chain
func.func @float_chain() -> tensor<3x2xf32> {
  %a = "lz.constant"() {value = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %b = "lz.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  // (a * 0.5 + a), transposed
  %0 = "lz.mul"(%a, %b) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %1 = "lz.add"(%0, %a) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // the folded constant takes the location of the op it replaces
  // LOC-LABEL: func.func @float_chain
  // LOC-NEXT: "lz.constant"() {{.*}} : () -> tensor<3x2xf32> loc("{{.*}}constant_fold.mlir":[[# @LINE + 1]]:3)
  %2 = "lz.transpose"(%1) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  // CHECK-NEXT: %[[C:.+]] = "lz.constant"() {value = dense<{{\[}}[1.5, 6.0], [3.0, 7.5], [4.5, 9.0]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32>
  // CHECK-NEXT: func.return %[[C]] : tensor<3x2xf32>
  func.return %2 : tensor<3x2xf32>
}

// Integer division truncates toward zero; reductions, comparisons and casts fold too.
// CHECK-LABEL: func.func @int_chain
func.func @int_chain() -> (tensor<4xi32>, tensor<i32>, tensor<4xi1>, tensor<2xf16>) {
  %a = "lz.constant"() {value = dense<[-7, 7, -8, 9]> : tensor<4xi32>} : () -> tensor<4xi32>
  %b = "lz.constant"() {value = dense<2> : tensor<i32>} : () -> tensor<i32>
  %0 = "lz.div"(%a, %b) : (tensor<4xi32>, tensor<i32>) -> tensor<4xi32>
  %1 = "lz.reduce_sum"(%a) {axes = array<i64: 0>, keepdims = false} : (tensor<4xi32>) -> tensor<i32>
  %2 = "lz.cmp"(%a, %b) {predicate = "gt"} : (tensor<4xi32>, tensor<i32>) -> tensor<4xi1>
  %3 = "lz.reshape"(%a) {shape = array<i64: 2, 2>} : (tensor<4xi32>) -> tensor<2x2xi32>
  %4 = "lz.reduce_max"(%3) {axes = array<i64: 1>, keepdims = false} : (tensor<2x2xi32>) -> tensor<2xi32>
  %5 = "lz.cast"(%4) {to = f16} : (tensor<2xi32>) -> tensor<2xf16>
  // CHECK-NEXT: %[[Q:.+]] = "lz.constant"() {value = dense<[-3, 3, -4, 4]> : tensor<4xi32>} : () -> tensor<4xi32>
  // CHECK-NEXT: %[[S:.+]] = "lz.constant"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
  // CHECK-NEXT: %[[G:.+]] = "lz.constant"() {value = dense<[false, true, false, true]> : tensor<4xi1>} : () -> tensor<4xi1>
  // CHECK-NEXT: %[[M:.+]] = "lz.constant"() {value = dense<[7.0, 9.0]> : tensor<2xf16>} : () -> tensor<2xf16>
  // CHECK-NEXT: func.return %[[Q]], %[[S]], %[[G]], %[[M]] :
  func.return %0, %1, %2, %5 : tensor<4xi32>, tensor<i32>, tensor<4xi1>, tensor<2xf16>
}

// IEEE results are kept: 1/0 is inf, -1/0 is -inf, 0/0 is nan.
// CHECK-LABEL: func.func @ieee
func.func @ieee() -> tensor<3xf32> {
  %f = "lz.constant"() {value = dense<[1.0, -1.0, 0.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %z = "lz.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "lz.div"(%f, %z) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  // CHECK-NEXT: %[[C:.+]] = "lz.constant"() {value = dense<[0x7F800000, 0xFF800000, 0x{{7FC00000|FFC00000}}]> : tensor<3xf32>}
  // CHECK-NEXT: func.return %[[C]]
  func.return %0 : tensor<3xf32>
}

// A composite folds through its reference.
// CHECK-LABEL: func.func @composite
func.func @composite() -> tensor<2x2xf32> {
  %x = "lz.constant"() {value = dense<[[0.0, 0.0], [3.0, 3.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %0 = "lz.softmax"(%x) {axis = 1 : i64} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  // CHECK-NEXT: %[[C:.+]] = "lz.constant"() {value = dense<0.5> : tensor<2x2xf32>}
  // CHECK-NEXT: func.return %[[C]]
  func.return %0 : tensor<2x2xf32>
}

// Only the constant part of an expression folds; ops that read an argument stay.  A constant
// still used after folding stays; one that is not goes.
// CHECK-LABEL: func.func @partial
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @partial(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) {
  %two = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %three = "lz.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "lz.mul"(%two, %three) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %1 = "lz.add"(%x, %0) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %2 = "lz.mul"(%1, %three) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[THREE:.+]] = "lz.constant"() {value = dense<3.0> : tensor<f32>}
  // CHECK-NEXT: %[[SIX:.+]] = "lz.constant"() {value = dense<6.0> : tensor<f32>}
  // CHECK-NEXT: %[[A:.+]] = "lz.add"(%[[X]], %[[SIX]])
  // CHECK-NEXT: %[[M:.+]] = "lz.mul"(%[[A]], %[[THREE]])
  // CHECK-NEXT: func.return %[[M]], %[[SIX]]
  func.return %2, %0 : tensor<4xf32>, tensor<f32>
}

// max-elements: a broadcast bigger than the cap stays a broadcast (of the folded scalar); one
// within it folds.  Without the option, both fold.
// CHECK-LABEL: func.func @max_elements
// CHECK-NEXT: %[[BIG:.+]] = "lz.constant"() {value = dense<-3.0> : tensor<2x4xf32>} : () -> tensor<2x4xf32>
// CHECK-NEXT: %[[SMALL:.+]] = "lz.constant"() {value = dense<-3.0> : tensor<4xf32>} : () -> tensor<4xf32>
// CHECK-NEXT: func.return %[[BIG]], %[[SMALL]]
// CAP-LABEL: func.func @max_elements
// CAP-NEXT: %[[S:.+]] = "lz.constant"() {value = dense<-3.0> : tensor<f32>} : () -> tensor<f32>
// CAP-NEXT: %[[BIG:.+]] = "lz.broadcast_to"(%[[S]]) {shape = array<i64: 2, 4>} : (tensor<f32>) -> tensor<2x4xf32>
// CAP-NEXT: %[[SMALL:.+]] = "lz.constant"() {value = dense<-3.0> : tensor<4xf32>} : () -> tensor<4xf32>
// CAP-NEXT: func.return %[[BIG]], %[[SMALL]]
func.func @max_elements() -> (tensor<2x4xf32>, tensor<4xf32>) {
  %s = "lz.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %n = "lz.neg"(%s) : (tensor<f32>) -> tensor<f32>
  %0 = "lz.broadcast_to"(%n) {shape = array<i64: 2, 4>} : (tensor<f32>) -> tensor<2x4xf32>
  %1 = "lz.broadcast_to"(%n) {shape = array<i64: 4>} : (tensor<f32>) -> tensor<4xf32>
  func.return %0, %1 : tensor<2x4xf32>, tensor<4xf32>
}

// A declared dynamic result is not folded (the constant would need a static type), and an op
// whose reference fails (an index out of range) is left alone.
// CHECK-LABEL: func.func @not_folded
func.func @not_folded() -> (tensor<?xf32>, tensor<1xf32>) {
  // CHECK-NEXT: %[[C:.+]] = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>}
  // CHECK-NEXT: %[[I:.+]] = "lz.constant"() {value = dense<{{\[}}5]> : tensor<1xi64>}
  // CHECK-NEXT: %[[N:.+]] = "lz.neg"(%[[C]]) : (tensor<2xf32>) -> tensor<?xf32>
  // CHECK-NEXT: %[[G:.+]] = "lz.gather"(%[[C]], %[[I]])
  // CHECK-NEXT: func.return %[[N]], %[[G]]
  %c = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %i = "lz.constant"() {value = dense<5> : tensor<1xi64>} : () -> tensor<1xi64>
  %0 = "lz.neg"(%c) : (tensor<2xf32>) -> tensor<?xf32>
  %1 = "lz.gather"(%c, %i) {axis = 0 : i64} : (tensor<2xf32>, tensor<1xi64>) -> tensor<1xf32>
  func.return %0, %1 : tensor<?xf32>, tensor<1xf32>
}

// Inside a kernel's region, constants fold as well.
// CHECK-LABEL: func.func @in_region
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @in_region(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: "lz.kernel"(%[[X]]) ({
  // CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<4xf32>):
  // CHECK-NEXT:   %[[C:.+]] = "lz.constant"() {value = dense<4.0> : tensor<f32>}
  // CHECK-NEXT:   %[[M:.+]] = "lz.mul"(%[[A]], %[[C]])
  // CHECK-NEXT:   "lz.yield"(%[[M]])
  %0 = "lz.kernel"(%x) ({
  ^bb0(%a: tensor<4xf32>):
    %c = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    %sq = "lz.mul"(%c, %c) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %1 = "lz.mul"(%a, %sq) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    "lz.yield"(%1) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
