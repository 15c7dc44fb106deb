// canonicalize, arithmetic rules: x*1, 1*x, x*0 (integers), x+0, 0+x, x-0, x-x (integers), x/1,
// x**1, neg(neg x), max(x, x), min(x, x), abs(abs x), relu(relu x); and the cases that must stay.
// RUN: lezero-opt %s -p canonicalize | filecheck %s

// CHECK-LABEL: func.func @mul_one
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
func.func @mul_one(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %one = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %ones = "lz.constant"() {value = dense<1.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %0 = "lz.mul"(%x, %one) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %1 = "lz.mul"(%one, %x) : (tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "lz.mul"(%ones, %x) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK-NOT: lz.mul
  // CHECK-NOT: lz.constant
  // CHECK: func.return %[[X]], %[[X]], %[[X]] : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
  func.return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// x*1 where the ones are bigger than x is a broadcast, not the identity: it stays.
// CHECK-LABEL: func.func @mul_one_broadcasts
// CHECK-SAME: (%[[X:[^:]+]]: tensor<3xf32>)
func.func @mul_one_broadcasts(%x: tensor<3xf32>) -> tensor<2x3xf32> {
  // CHECK-NEXT: %[[ONES:.+]] = "lz.constant"() {value = dense<1.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %ones = "lz.constant"() {value = dense<1.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  // CHECK-NEXT: %[[R:.+]] = "lz.mul"(%[[X]], %[[ONES]]) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %0 = "lz.mul"(%x, %ones) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: func.return %[[R]]
  func.return %0 : tensor<2x3xf32>
}

// A constant that is not a splat of one is not the identity.
// CHECK-LABEL: func.func @mul_not_splat
func.func @mul_not_splat(%x: tensor<2xf32>) -> tensor<2xf32> {
  %c = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  // CHECK: "lz.constant"
  // CHECK-NEXT: "lz.mul"
  %0 = "lz.mul"(%x, %c) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// CHECK-LABEL: func.func @mul_zero_int
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xi32>, %[[Y:[^:]+]]: tensor<4xi64>)
func.func @mul_zero_int(%x: tensor<4xi32>, %y: tensor<4xi64>) -> (tensor<4xi32>, tensor<2x4xi64>) {
  %z = "lz.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
  %zz = "lz.constant"() {value = dense<0> : tensor<2x4xi64>} : () -> tensor<2x4xi64>
  // x*0 is zeros of the result type, even where the zero broadcasts x.
  // CHECK-DAG: %[[Z0:.+]] = "lz.constant"() {value = dense<0> : tensor<4xi32>} : () -> tensor<4xi32>
  // CHECK-DAG: %[[Z1:.+]] = "lz.constant"() {value = dense<0> : tensor<2x4xi64>} : () -> tensor<2x4xi64>
  // CHECK-NOT: lz.mul
  // CHECK: func.return %[[Z0]], %[[Z1]] : tensor<4xi32>, tensor<2x4xi64>
  %0 = "lz.mul"(%x, %z) : (tensor<4xi32>, tensor<i32>) -> tensor<4xi32>
  %1 = "lz.mul"(%zz, %y) : (tensor<2x4xi64>, tensor<4xi64>) -> tensor<2x4xi64>
  func.return %0, %1 : tensor<4xi32>, tensor<2x4xi64>
}

// x*0 on floats stays: nan*0 and inf*0 are nan.
// CHECK-LABEL: func.func @mul_zero_float_stays
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @mul_zero_float_stays(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[Z:.+]] = "lz.constant"() {value = dense<0.0> : tensor<f32>}
  %z = "lz.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  // CHECK-NEXT: %[[A:.+]] = "lz.mul"(%[[X]], %[[Z]])
  %0 = "lz.mul"(%x, %z) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[B:.+]] = "lz.mul"(%[[Z]], %[[X]])
  %1 = "lz.mul"(%z, %x) : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[A]], %[[B]]
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// Zeros of a dynamic type cannot be built: x*0 on a tensor<?xi32> stays.
// CHECK-LABEL: func.func @mul_zero_dynamic_stays
func.func @mul_zero_dynamic_stays(%x: tensor<?xi32>) -> tensor<?xi32> {
  %z = "lz.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
  // CHECK: "lz.mul"
  %0 = "lz.mul"(%x, %z) : (tensor<?xi32>, tensor<i32>) -> tensor<?xi32>
  func.return %0 : tensor<?xi32>
}

// CHECK-LABEL: func.func @add_sub_zero
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
func.func @add_sub_zero(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %z = "lz.constant"() {value = dense<0.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %0 = "lz.add"(%x, %z) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = "lz.add"(%z, %x) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "lz.sub"(%x, %z) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK-NOT: lz.
  // CHECK: func.return %[[X]], %[[X]], %[[X]] :
  func.return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// 0-x is a negation, not x; x+0 where the zeros broadcast x stays.
// CHECK-LABEL: func.func @zero_minus_x_stays
// CHECK-SAME: (%[[X:[^:]+]]: tensor<3xf32>)
func.func @zero_minus_x_stays(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<2x3xf32>) {
  // CHECK-NEXT: %[[Z:.+]] = "lz.constant"() {value = dense<0.0> : tensor<3xf32>}
  %z = "lz.constant"() {value = dense<0.0> : tensor<3xf32>} : () -> tensor<3xf32>
  // CHECK-NEXT: %[[ZZ:.+]] = "lz.constant"() {value = dense<0.0> : tensor<2x3xf32>}
  %zz = "lz.constant"() {value = dense<0.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  // CHECK-NEXT: %[[A:.+]] = "lz.sub"(%[[Z]], %[[X]])
  %0 = "lz.sub"(%z, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  // CHECK-NEXT: %[[B:.+]] = "lz.add"(%[[X]], %[[ZZ]]) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "lz.add"(%x, %zz) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: func.return %[[A]], %[[B]]
  func.return %0, %1 : tensor<3xf32>, tensor<2x3xf32>
}

// CHECK-LABEL: func.func @sub_self
// CHECK-SAME: (%[[I:[^:]+]]: tensor<5xi64>, %[[F:[^:]+]]: tensor<5xf32>)
func.func @sub_self(%i: tensor<5xi64>, %f: tensor<5xf32>) -> (tensor<5xi64>, tensor<5xf32>) {
  // integers: x-x is 0; floats: inf-inf is nan, so it stays.
  // CHECK-NEXT: %[[Z:.+]] = "lz.constant"() {value = dense<0> : tensor<5xi64>} : () -> tensor<5xi64>
  %0 = "lz.sub"(%i, %i) : (tensor<5xi64>, tensor<5xi64>) -> tensor<5xi64>
  // CHECK-NEXT: %[[D:.+]] = "lz.sub"(%[[F]], %[[F]]) : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
  %1 = "lz.sub"(%f, %f) : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
  // CHECK-NEXT: func.return %[[Z]], %[[D]]
  func.return %0, %1 : tensor<5xi64>, tensor<5xf32>
}

// CHECK-LABEL: func.func @div_pow_one
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>, %[[I:[^:]+]]: tensor<4xi32>)
func.func @div_pow_one(%x: tensor<4xf32>, %i: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4xi32>) {
  %one = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %ione = "lz.constant"() {value = dense<1> : tensor<4xi32>} : () -> tensor<4xi32>
  %0 = "lz.div"(%x, %one) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = "lz.pow"(%x, %one) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %2 = "lz.div"(%i, %ione) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %3 = "lz.pow"(%i, %ione) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  // CHECK-NOT: lz.
  // CHECK: func.return %[[X]], %[[X]], %[[I]], %[[I]] :
  func.return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4xi32>
}

// 1/x and 1**x are not x.
// CHECK-LABEL: func.func @one_over_x_stays
func.func @one_over_x_stays(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %one = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  // CHECK: "lz.constant"
  // CHECK-NEXT: "lz.div"
  // CHECK-NEXT: "lz.pow"
  %0 = "lz.div"(%one, %x) : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.pow"(%one, %x) : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @neg_neg
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @neg_neg(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = "lz.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.neg"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  // three negations are one
  // CHECK-NEXT: %[[N:.+]] = "lz.neg"(%[[X]]) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[X]], %[[N]]
  func.return %1, %2 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @max_min_self
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>, %[[Y:[^:]+]]: tensor<4xf32>)
func.func @max_min_self(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = "lz.max"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.min"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[M:.+]] = "lz.max"(%[[X]], %[[Y]])
  %2 = "lz.max"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[X]], %[[X]], %[[M]]
  func.return %0, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @idempotent_unary
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @idempotent_unary(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = "lz.abs"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.abs"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.abs"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "lz.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %4 = "lz.relu"(%3) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[A:.+]] = "lz.abs"(%[[X]])
  // CHECK-NEXT: %[[R:.+]] = "lz.relu"(%[[X]])
  // CHECK-NEXT: func.return %[[A]], %[[R]]
  func.return %2, %4 : tensor<4xf32>, tensor<4xf32>
}

// abs(neg x) and relu(abs x) are not rules.
// CHECK-LABEL: func.func @mixed_unary_stays
func.func @mixed_unary_stays(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: "lz.neg"
  // CHECK-NEXT: "lz.abs"
  // CHECK-NEXT: "lz.relu"
  // CHECK-NEXT: func.return
  %0 = "lz.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.abs"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.relu"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// Rules chain to a fixed point, and the dead constants go.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @chain(%x: tensor<4xf32>) -> tensor<4xf32> {
  %one = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %zero = "lz.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "lz.mul"(%x, %one) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = "lz.add"(%zero, %0) : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.neg"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "lz.div"(%2, %one) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %4 = "lz.neg"(%3) : (tensor<4xf32>) -> tensor<4xf32>
  %5 = "lz.max"(%4, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[X]] : tensor<4xf32>
  func.return %5 : tensor<4xf32>
}
