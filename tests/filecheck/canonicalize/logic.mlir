// canonicalize, logic rules: not(not x), x & x, x | x, x | 0, 0 | x, x & true, true & x (i1 only),
// select(true, a, b), select(false, a, b), select(c, a, a); and the cases that must stay.
// RUN: lezero-opt %s -p canonicalize | filecheck %s

// CHECK-LABEL: func.func @not_not
// CHECK-SAME: (%[[B:[^:]+]]: tensor<4xi1>, %[[I:[^:]+]]: tensor<4xi32>)
func.func @not_not(%b: tensor<4xi1>, %i: tensor<4xi32>) -> (tensor<4xi1>, tensor<4xi32>, tensor<4xi1>) {
  %0 = "lz.not"(%b) : (tensor<4xi1>) -> tensor<4xi1>
  %1 = "lz.not"(%0) : (tensor<4xi1>) -> tensor<4xi1>
  %2 = "lz.not"(%i) : (tensor<4xi32>) -> tensor<4xi32>
  %3 = "lz.not"(%2) : (tensor<4xi32>) -> tensor<4xi32>
  %4 = "lz.not"(%1) : (tensor<4xi1>) -> tensor<4xi1>
  // an odd count keeps one not
  // CHECK-NEXT: %[[N:.+]] = "lz.not"(%[[B]]) : (tensor<4xi1>) -> tensor<4xi1>
  // CHECK-NEXT: func.return %[[B]], %[[I]], %[[N]] :
  func.return %1, %3, %4 : tensor<4xi1>, tensor<4xi32>, tensor<4xi1>
}

// CHECK-LABEL: func.func @idempotent_and_or
// CHECK-SAME: (%[[B:[^:]+]]: tensor<4xi1>, %[[I:[^:]+]]: tensor<4xi32>, %[[C:[^:]+]]: tensor<4xi1>)
func.func @idempotent_and_or(%b: tensor<4xi1>, %i: tensor<4xi32>, %c: tensor<4xi1>)
    -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi32>, tensor<4xi32>, tensor<4xi1>) {
  %0 = "lz.and"(%b, %b) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %1 = "lz.or"(%b, %b) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %2 = "lz.and"(%i, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %3 = "lz.or"(%i, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  // CHECK-NEXT: %[[AND:.+]] = "lz.and"(%[[B]], %[[C]])
  %4 = "lz.and"(%b, %c) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  // CHECK-NEXT: func.return %[[B]], %[[B]], %[[I]], %[[I]], %[[AND]] :
  func.return %0, %1, %2, %3, %4 : tensor<4xi1>, tensor<4xi1>, tensor<4xi32>, tensor<4xi32>, tensor<4xi1>
}

// CHECK-LABEL: func.func @or_zero
// CHECK-SAME: (%[[B:[^:]+]]: tensor<4xi1>, %[[I:[^:]+]]: tensor<4xi32>)
func.func @or_zero(%b: tensor<4xi1>, %i: tensor<4xi32>) -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi32>, tensor<4xi32>) {
  %f = "lz.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
  %z = "lz.constant"() {value = dense<0> : tensor<4xi32>} : () -> tensor<4xi32>
  %0 = "lz.or"(%b, %f) : (tensor<4xi1>, tensor<i1>) -> tensor<4xi1>
  %1 = "lz.or"(%f, %b) : (tensor<i1>, tensor<4xi1>) -> tensor<4xi1>
  %2 = "lz.or"(%i, %z) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %3 = "lz.or"(%z, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  // CHECK-NOT: lz.
  // CHECK: func.return %[[B]], %[[B]], %[[I]], %[[I]] :
  func.return %0, %1, %2, %3 : tensor<4xi1>, tensor<4xi1>, tensor<4xi32>, tensor<4xi32>
}

// x | 0 where the zeros broadcast x stays; x | true is not x.
// CHECK-LABEL: func.func @or_stays
// CHECK-SAME: (%[[B:[^:]+]]: tensor<4xi1>)
func.func @or_stays(%b: tensor<4xi1>) -> (tensor<2x4xi1>, tensor<4xi1>) {
  // CHECK-NEXT: %[[F:.+]] = "lz.constant"() {value = dense<false> : tensor<2x4xi1>}
  %f = "lz.constant"() {value = dense<false> : tensor<2x4xi1>} : () -> tensor<2x4xi1>
  // CHECK-NEXT: %[[T:.+]] = "lz.constant"() {value = dense<true> : tensor<i1>}
  %t = "lz.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
  // CHECK-NEXT: %[[A:.+]] = "lz.or"(%[[B]], %[[F]]) : (tensor<4xi1>, tensor<2x4xi1>) -> tensor<2x4xi1>
  %0 = "lz.or"(%b, %f) : (tensor<4xi1>, tensor<2x4xi1>) -> tensor<2x4xi1>
  // CHECK-NEXT: %[[O:.+]] = "lz.or"(%[[B]], %[[T]])
  %1 = "lz.or"(%b, %t) : (tensor<4xi1>, tensor<i1>) -> tensor<4xi1>
  // CHECK-NEXT: func.return %[[A]], %[[O]]
  func.return %0, %1 : tensor<2x4xi1>, tensor<4xi1>
}

// CHECK-LABEL: func.func @and_true
// CHECK-SAME: (%[[B:[^:]+]]: tensor<4xi1>)
func.func @and_true(%b: tensor<4xi1>) -> (tensor<4xi1>, tensor<4xi1>) {
  %t = "lz.constant"() {value = dense<true> : tensor<4xi1>} : () -> tensor<4xi1>
  %0 = "lz.and"(%b, %t) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %1 = "lz.and"(%t, %b) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  // CHECK-NOT: lz.
  // CHECK: func.return %[[B]], %[[B]] :
  func.return %0, %1 : tensor<4xi1>, tensor<4xi1>
}

// On integers `x & 1` keeps the low bit: it is not x (true == 1 must not fool the rule).
// CHECK-LABEL: func.func @and_one_int_stays
// CHECK-SAME: (%[[I:[^:]+]]: tensor<4xi32>)
func.func @and_one_int_stays(%i: tensor<4xi32>) -> (tensor<4xi32>, tensor<4xi32>) {
  // CHECK-NEXT: %[[ONE:.+]] = "lz.constant"() {value = dense<1> : tensor<i32>}
  %one = "lz.constant"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
  // CHECK-NEXT: %[[A:.+]] = "lz.and"(%[[I]], %[[ONE]])
  %0 = "lz.and"(%i, %one) : (tensor<4xi32>, tensor<i32>) -> tensor<4xi32>
  // CHECK-NEXT: %[[B:.+]] = "lz.and"(%[[ONE]], %[[I]])
  %1 = "lz.and"(%one, %i) : (tensor<i32>, tensor<4xi32>) -> tensor<4xi32>
  // CHECK-NEXT: func.return %[[A]], %[[B]]
  func.return %0, %1 : tensor<4xi32>, tensor<4xi32>
}

// x & false is not x.
// CHECK-LABEL: func.func @and_false_stays
func.func @and_false_stays(%b: tensor<4xi1>) -> tensor<4xi1> {
  %f = "lz.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
  // CHECK: "lz.constant"
  // CHECK-NEXT: "lz.and"
  %0 = "lz.and"(%b, %f) : (tensor<4xi1>, tensor<i1>) -> tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// CHECK-LABEL: func.func @select_constant_condition
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4xf32>, %[[B:[^:]+]]: tensor<4xf32>)
func.func @select_constant_condition(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %t = "lz.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
  %f = "lz.constant"() {value = dense<false> : tensor<4xi1>} : () -> tensor<4xi1>
  %0 = "lz.select"(%t, %a, %b) : (tensor<i1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.select"(%f, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NOT: lz.
  // CHECK: func.return %[[A]], %[[B]] :
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @select_same_values
// CHECK-SAME: (%[[C:[^:]+]]: tensor<4xi1>, %[[A:[^:]+]]: tensor<4xf32>)
func.func @select_same_values(%c: tensor<4xi1>, %a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "lz.select"(%c, %a, %a) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[A]] : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// A mixed condition, a condition that broadcasts the chosen value, and select(c, a, a) where c
// broadcasts a: all stay.
// CHECK-LABEL: func.func @select_stays
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4xf32>, %[[B:[^:]+]]: tensor<4xf32>, %[[C:[^:]+]]: tensor<2x4xi1>)
func.func @select_stays(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<2x4xi1>)
    -> (tensor<4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  // CHECK-NEXT: %[[M:.+]] = "lz.constant"() {value = dense<[true, false, true, false]> : tensor<4xi1>}
  %m = "lz.constant"() {value = dense<[true, false, true, false]> : tensor<4xi1>} : () -> tensor<4xi1>
  // CHECK-NEXT: %[[T:.+]] = "lz.constant"() {value = dense<true> : tensor<2x4xi1>}
  %t = "lz.constant"() {value = dense<true> : tensor<2x4xi1>} : () -> tensor<2x4xi1>
  // CHECK-NEXT: %[[S0:.+]] = "lz.select"(%[[M]], %[[A]], %[[B]])
  %0 = "lz.select"(%m, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[S1:.+]] = "lz.select"(%[[T]], %[[A]], %[[B]]) : (tensor<2x4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %1 = "lz.select"(%t, %a, %b) : (tensor<2x4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // CHECK-NEXT: %[[S2:.+]] = "lz.select"(%[[C]], %[[A]], %[[A]]) : (tensor<2x4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %2 = "lz.select"(%c, %a, %a) : (tensor<2x4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // CHECK-NEXT: func.return %[[S0]], %[[S1]], %[[S2]]
  func.return %0, %1, %2 : tensor<4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}
