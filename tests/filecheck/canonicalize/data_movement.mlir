// canonicalize, data movement rules: identity transpose, transpose(transpose x) (perms composed),
// identity reshape, reshape(reshape x), identity broadcast_to, broadcast_to(broadcast_to x), whole
// slice, concat of one operand, zero pad, transpose(matmul(transpose a, b)), gather of 0..n-1 (a reshape);
// and the cases that must stay.
// RUN: lezero-opt %s -p canonicalize --split-input-file | filecheck %s

// CHECK-LABEL: func.func @identity_transpose
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x4xf32>, %[[V:[^:]+]]: tensor<5xf32>)
func.func @identity_transpose(%x: tensor<2x3x4xf32>, %v: tensor<5xf32>) -> (tensor<2x3x4xf32>, tensor<5xf32>) {
  %0 = "lz.transpose"(%x) {perm = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // no perm reverses the dims, which for rank 1 is the identity
  %1 = "lz.transpose"(%v) : (tensor<5xf32>) -> tensor<5xf32>
  // CHECK-NEXT: func.return %[[X]], %[[V]] :
  func.return %0, %1 : tensor<2x3x4xf32>, tensor<5xf32>
}

// A perm that moves dims of equal size keeps the type but is not the identity.
// CHECK-LABEL: func.func @square_transpose_stays
// CHECK-SAME: (%[[X:[^:]+]]: tensor<3x3xf32>)
func.func @square_transpose_stays(%x: tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3x3xf32>) {
  // CHECK-NEXT: %[[A:.+]] = "lz.transpose"(%[[X]]) {perm = array<i64: 1, 0>} : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %0 = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<3x3xf32>) -> tensor<3x3xf32>
  // CHECK-NEXT: %[[B:.+]] = "lz.transpose"(%[[X]]) : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %1 = "lz.transpose"(%x) : (tensor<3x3xf32>) -> tensor<3x3xf32>
  // CHECK-NEXT: func.return %[[A]], %[[B]]
  func.return %0, %1 : tensor<3x3xf32>, tensor<3x3xf32>
}

// -----

// Result dim i of the pair is source dim inner[outer[i]].
// CHECK-LABEL: func.func @transpose_transpose
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x4xf32>)
func.func @transpose_transpose(%x: tensor<2x3x4xf32>) -> tensor<3x2x4xf32> {
  // inner: 2x3x4 -> 4x2x3; outer [2, 1, 0]: 4x2x3 -> 3x2x4; composed [1, 0, 2]
  %0 = "lz.transpose"(%x) {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = "lz.transpose"(%0) {perm = array<i64: 2, 1, 0>} : (tensor<4x2x3xf32>) -> tensor<3x2x4xf32>
  // CHECK-NEXT: %[[T:.+]] = "lz.transpose"(%[[X]]) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  // CHECK-NEXT: func.return %[[T]] : tensor<3x2x4xf32>
  func.return %1 : tensor<3x2x4xf32>
}

// A perm and its inverse compose to the identity, which then goes too; default perms compose.
// CHECK-LABEL: func.func @transpose_inverse
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x4xf32>, %[[Y:[^:]+]]: tensor<2x3xf32>)
func.func @transpose_inverse(%x: tensor<2x3x4xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3x4xf32>, tensor<2x3xf32>) {
  %0 = "lz.transpose"(%x) {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = "lz.transpose"(%0) {perm = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  %2 = "lz.transpose"(%y) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %3 = "lz.transpose"(%2) : (tensor<3x2xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: func.return %[[X]], %[[Y]] :
  func.return %1, %3 : tensor<2x3x4xf32>, tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @identity_reshape
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>, %[[D:[^:]+]]: tensor<?x4xf32>, %[[V:[^:]+]]: tensor<6xf32>)
func.func @identity_reshape(%x: tensor<2x3xf32>, %d: tensor<?x4xf32>, %v: tensor<6xf32>)
    -> (tensor<2x3xf32>, tensor<?x4xf32>, tensor<6xf32>) {
  %0 = "lz.reshape"(%x) {shape = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // one dynamic dim, reshaped to -1 in its place
  %1 = "lz.reshape"(%d) {shape = array<i64: -1, 4>} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // static: -1 that works out to the same shape
  %2 = "lz.reshape"(%v) {shape = array<i64: -1>} : (tensor<6xf32>) -> tensor<6xf32>
  // CHECK-NEXT: func.return %[[X]], %[[D]], %[[V]] :
  func.return %0, %1, %2 : tensor<2x3xf32>, tensor<?x4xf32>, tensor<6xf32>
}

// With two dynamic dims, a reshape declared to the source type is not known to be the identity:
// [-1, 5] makes the second dim 5 whatever it was.
// CHECK-LABEL: func.func @dynamic_reshape_stays
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x?xf32>)
func.func @dynamic_reshape_stays(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  // CHECK-NEXT: %[[R:.+]] = "lz.reshape"(%[[X]]) {shape = array<i64: -1, 5>} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %0 = "lz.reshape"(%x) {shape = array<i64: -1, 5>} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  // CHECK-NEXT: func.return %[[R]]
  func.return %0 : tensor<?x?xf32>
}

// CHECK-LABEL: func.func @reshape_reshape
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x4xf32>)
func.func @reshape_reshape(%x: tensor<2x3x4xf32>) -> (tensor<4x6xf32>, tensor<2x3x4xf32>) {
  %0 = "lz.reshape"(%x) {shape = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = "lz.reshape"(%0) {shape = array<i64: 24>} : (tensor<6x4xf32>) -> tensor<24xf32>
  %2 = "lz.reshape"(%1) {shape = array<i64: 4, -1>} : (tensor<24xf32>) -> tensor<4x6xf32>
  // back to the source shape: no reshape at all
  %3 = "lz.reshape"(%1) {shape = array<i64: 2, 3, 4>} : (tensor<24xf32>) -> tensor<2x3x4xf32>
  // CHECK-NEXT: %[[R:.+]] = "lz.reshape"(%[[X]]) {shape = array<i64: 4, -1>} : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
  // CHECK-NEXT: func.return %[[R]], %[[X]] :
  func.return %2, %3 : tensor<4x6xf32>, tensor<2x3x4xf32>
}

// -----

// CHECK-LABEL: func.func @broadcast_to
// CHECK-SAME: (%[[X:[^:]+]]: tensor<3xf32>, %[[Y:[^:]+]]: tensor<2x3xf32>)
func.func @broadcast_to(%x: tensor<3xf32>, %y: tensor<2x3xf32>) -> (tensor<4x2x3xf32>, tensor<2x3xf32>) {
  %0 = "lz.broadcast_to"(%x) {shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  %1 = "lz.broadcast_to"(%0) {shape = array<i64: 4, 2, 3>} : (tensor<2x3xf32>) -> tensor<4x2x3xf32>
  %2 = "lz.broadcast_to"(%y) {shape = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: %[[B:.+]] = "lz.broadcast_to"(%[[X]]) {shape = array<i64: 4, 2, 3>} : (tensor<3xf32>) -> tensor<4x2x3xf32>
  // CHECK-NEXT: func.return %[[B]], %[[Y]] :
  func.return %1, %2 : tensor<4x2x3xf32>, tensor<2x3xf32>
}

// A real broadcast stays.
// CHECK-LABEL: func.func @broadcast_stays
func.func @broadcast_stays(%x: tensor<1x3xf32>) -> tensor<2x3xf32> {
  // CHECK-NEXT: "lz.broadcast_to"(%{{.*}}) {shape = array<i64: 2, 3>} : (tensor<1x3xf32>) -> tensor<2x3xf32>
  %0 = "lz.broadcast_to"(%x) {shape = array<i64: 2, 3>} : (tensor<1x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @whole_slice
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x5xf32>, %[[D:[^:]+]]: tensor<?x5xf32>, %[[ONE:[^:]+]]: tensor<4x1xf32>)
func.func @whole_slice(%x: tensor<4x5xf32>, %d: tensor<?x5xf32>, %one: tensor<4x1xf32>)
    -> (tensor<4x5xf32>, tensor<4x5xf32>, tensor<?x5xf32>, tensor<?x5xf32>, tensor<4x1xf32>, tensor<4x1xf32>) {
  %0 = "lz.slice"(%x) {starts = array<i64: 0>, ends = array<i64: 4>} : (tensor<4x5xf32>) -> tensor<4x5xf32>
  // out-of-range ends clamp, and -5 is the start of a dim of 5
  %1 = "lz.slice"(%x) {starts = array<i64: 0, -5>, ends = array<i64: 100, 5>, axes = array<i64: 0, 1>, steps = array<i64: 1, 1>} : (tensor<4x5xf32>) -> tensor<4x5xf32>
  // a dynamic dim sliced 0 to INT_MAX or INT64_MAX (ONNX's "to the end")
  %2 = "lz.slice"(%d) {starts = array<i64: 0>, ends = array<i64: 2147483647>} : (tensor<?x5xf32>) -> tensor<?x5xf32>
  %3 = "lz.slice"(%d) {starts = array<i64: 0>, ends = array<i64: 9223372036854775807>} : (tensor<?x5xf32>) -> tensor<?x5xf32>
  // a dim of one element: any step that takes it is the whole dim, even a negative one
  %4 = "lz.slice"(%one) {starts = array<i64: 0>, ends = array<i64: 1>, axes = array<i64: 1>, steps = array<i64: 2>} : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = "lz.slice"(%one) {starts = array<i64: 0>, ends = array<i64: -2>, axes = array<i64: 1>, steps = array<i64: -1>} : (tensor<4x1xf32>) -> tensor<4x1xf32>
  // CHECK-NEXT: func.return %[[X]], %[[X]], %[[D]], %[[D]], %[[ONE]], %[[ONE]] :
  func.return %0, %1, %2, %3, %4, %5 : tensor<4x5xf32>, tensor<4x5xf32>, tensor<?x5xf32>, tensor<?x5xf32>, tensor<4x1xf32>, tensor<4x1xf32>
}

// A reversed slice has the same type but not the same elements; so has a dynamic dim sliced to
// a fixed end (it may be cut), or sliced with step -1.
// CHECK-LABEL: func.func @slices_stay
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x5xf32>, %[[D:[^:]+]]: tensor<?x5xf32>)
func.func @slices_stay(%x: tensor<4x5xf32>, %d: tensor<?x5xf32>) -> (tensor<4x5xf32>, tensor<?x5xf32>, tensor<?x5xf32>) {
  // CHECK-NEXT: %[[R:.+]] = "lz.slice"(%[[X]]) {axes = array<i64: 1>, ends = array<i64: -6>, starts = array<i64: 4>, steps = array<i64: -1>} : (tensor<4x5xf32>) -> tensor<4x5xf32>
  %0 = "lz.slice"(%x) {starts = array<i64: 4>, ends = array<i64: -6>, axes = array<i64: 1>, steps = array<i64: -1>} : (tensor<4x5xf32>) -> tensor<4x5xf32>
  // CHECK-NEXT: %[[C:.+]] = "lz.slice"(%[[D]]) {ends = array<i64: 8>, starts = array<i64: 0>} : (tensor<?x5xf32>) -> tensor<?x5xf32>
  %1 = "lz.slice"(%d) {starts = array<i64: 0>, ends = array<i64: 8>} : (tensor<?x5xf32>) -> tensor<?x5xf32>
  // CHECK-NEXT: %[[V:.+]] = "lz.slice"(%[[D]]) {ends = array<i64: -9223372036854775807>, starts = array<i64: -1>, steps = array<i64: -1>} : (tensor<?x5xf32>) -> tensor<?x5xf32>
  %2 = "lz.slice"(%d) {starts = array<i64: -1>, ends = array<i64: -9223372036854775807>, steps = array<i64: -1>} : (tensor<?x5xf32>) -> tensor<?x5xf32>
  // CHECK-NEXT: func.return %[[R]], %[[C]], %[[V]] :
  func.return %0, %1, %2 : tensor<4x5xf32>, tensor<?x5xf32>, tensor<?x5xf32>
}

// -----

// CHECK-LABEL: func.func @concat_one
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
func.func @concat_one(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<4x3xf32>) {
  %0 = "lz.concat"(%x) {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: %[[C:.+]] = "lz.concat"(%[[X]], %[[X]]) {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %1 = "lz.concat"(%x, %x) {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  // CHECK-NEXT: func.return %[[X]], %[[C]] :
  func.return %0, %1 : tensor<2x3xf32>, tensor<4x3xf32>
}

// CHECK-LABEL: func.func @zero_pad
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
func.func @zero_pad(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = "lz.pad"(%x) {pads = array<i64: 0, 0, 0, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // the pad value does not matter when nothing is padded
  %1 = "lz.pad"(%x) {pads = array<i64: 0, 0, 0, 0>, value = 7.0 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // padding one end and cropping the other keeps the type, not the elements
  // CHECK-NEXT: %[[P:.+]] = "lz.pad"(%[[X]]) {pads = array<i64: 0, 1, 0, -1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "lz.pad"(%x) {pads = array<i64: 0, 1, 0, -1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: func.return %[[X]], %[[X]], %[[P]] :
  func.return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// (a^T b)^T -> b^T a: one transpose of b instead of a's and the product's (autodiff writes the
// weight gradient of x @ w^T this way).  A product something else reads stays.
// CHECK-LABEL: func.func @transpose_of_product
// CHECK-SAME: (%[[X:[^:]+]]: tensor<64x784xf32>, %[[DY:[^:]+]]: tensor<64x256xf32>)
func.func @transpose_of_product(%x: tensor<64x784xf32>, %dy: tensor<64x256xf32>) -> tensor<256x784xf32> {
  %0 = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<64x784xf32>) -> tensor<784x64xf32>
  %1 = "lz.matmul"(%0, %dy) : (tensor<784x64xf32>, tensor<64x256xf32>) -> tensor<784x256xf32>
  %2 = "lz.transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<784x256xf32>) -> tensor<256x784xf32>
  // CHECK-NEXT: %[[T:.+]] = "lz.transpose"(%[[DY]]) {perm = array<i64: 1, 0>} : (tensor<64x256xf32>) -> tensor<256x64xf32>
  // CHECK-NEXT: %[[P:.+]] = "lz.matmul"(%[[T]], %[[X]]) : (tensor<256x64xf32>, tensor<64x784xf32>) -> tensor<256x784xf32>
  // CHECK-NEXT: func.return %[[P]]
  func.return %2 : tensor<256x784xf32>
}

// CHECK-LABEL: func.func @transpose_of_shared_product_stays
func.func @transpose_of_shared_product_stays(%a: tensor<3x2xf32>, %b: tensor<3x4xf32>) -> (tensor<4x2xf32>, tensor<2x4xf32>) {
  %0 = "lz.transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %1 = "lz.matmul"(%0, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  // CHECK: "lz.matmul"
  // CHECK-NEXT: "lz.transpose"
  %2 = "lz.transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  func.return %2, %1 : tensor<4x2xf32>, tensor<2x4xf32>
}

// -----

// A gather of 0, 1, ..., n-1 along an axis of size n is a reshape (transformers' masks index
// mask[batch_idx, kv_idx] so), on any axis; other orders, and indices that do not cover the
// axis, stay gathers.
// CHECK-LABEL: func.func @gather_in_order
// CHECK-SAME: (%[[M:[^:]+]]: tensor<6x1xi1>, %[[X:[^:]+]]: tensor<2x6xf32>)
func.func @gather_in_order(%m: tensor<6x1xi1>, %x: tensor<2x6xf32>) -> (tensor<2x1x3x1xi1>, tensor<2x2x3xf32>, tensor<2x1x3x1xi1>, tensor<5x1xi1>) {
  %i = "lz.constant"() {value = dense<[[[0, 1, 2]], [[3, 4, 5]]]> : tensor<2x1x3xi64>} : () -> tensor<2x1x3xi64>
  %j = "lz.constant"() {value = dense<[[0, 1, 2], [3, 4, 5]]> : tensor<2x3xi64>} : () -> tensor<2x3xi64>
  %k = "lz.constant"() {value = dense<[[[0, 1, 2]], [[3, 5, 4]]]> : tensor<2x1x3xi64>} : () -> tensor<2x1x3xi64>
  %l = "lz.constant"() {value = dense<[0, 1, 2, 3, 4]> : tensor<5xi64>} : () -> tensor<5xi64>
  // CHECK: %[[R:.+]] = "lz.reshape"(%[[M]]) {shape = array<i64: 2, 1, 3, 1>} : (tensor<6x1xi1>) -> tensor<2x1x3x1xi1>
  %0 = "lz.gather"(%m, %i) {axis = 0 : i64} : (tensor<6x1xi1>, tensor<2x1x3xi64>) -> tensor<2x1x3x1xi1>
  // CHECK: %[[S:.+]] = "lz.reshape"(%[[X]]) {shape = array<i64: 2, 2, 3>} : (tensor<2x6xf32>) -> tensor<2x2x3xf32>
  %1 = "lz.gather"(%x, %j) {axis = -1 : i64} : (tensor<2x6xf32>, tensor<2x3xi64>) -> tensor<2x2x3xf32>
  // CHECK: %[[G:.+]] = "lz.gather"(%[[M]], %{{.+}}) {axis = 0 : i64} : (tensor<6x1xi1>, tensor<2x1x3xi64>)
  %2 = "lz.gather"(%m, %k) {axis = 0 : i64} : (tensor<6x1xi1>, tensor<2x1x3xi64>) -> tensor<2x1x3x1xi1>
  // CHECK: %[[H:.+]] = "lz.gather"(%[[M]], %{{.+}}) {axis = 0 : i64} : (tensor<6x1xi1>, tensor<5xi64>)
  %3 = "lz.gather"(%m, %l) {axis = 0 : i64} : (tensor<6x1xi1>, tensor<5xi64>) -> tensor<5x1xi1>
  // CHECK: func.return %[[R]], %[[S]], %[[G]], %[[H]] :
  func.return %0, %1, %2, %3 : tensor<2x1x3x1xi1>, tensor<2x2x3xf32>, tensor<2x1x3x1xi1>, tensor<5x1xi1>
}
