// Round trip of the reductions.
// RUN: lezero-opt %s | filecheck %s
// RUN: lezero-opt %s > %t.1 && lezero-opt %t.1 > %t.2 && diff %t.1 %t.2

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<?x3x4xf32>) -> (tensor<?x1x4xf32>, tensor<4xf32>, tensor<?xf32>, tensor<?x3xf32>, tensor<f32>, tensor<?x4xi64>) {
  // CHECK: "lz.reduce_sum"(%{{.*}}) {axes = array<i64: 1>, keepdims = true} : (tensor<?x3x4xf32>) -> tensor<?x1x4xf32>
  %0 = "lz.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = true} : (tensor<?x3x4xf32>) -> tensor<?x1x4xf32>
  // CHECK: "lz.reduce_max"(%{{.*}}) {axes = array<i64: 0, 1>} : (tensor<?x3x4xf32>) -> tensor<4xf32>
  %1 = "lz.reduce_max"(%x) {axes = array<i64: 0, 1>} : (tensor<?x3x4xf32>) -> tensor<4xf32>
  // CHECK: "lz.reduce_min"(%{{.*}}) {axes = array<i64: -1, -2>, keepdims = false} : (tensor<?x3x4xf32>) -> tensor<?xf32>
  %2 = "lz.reduce_min"(%x) {axes = array<i64: -1, -2>, keepdims = false} : (tensor<?x3x4xf32>) -> tensor<?xf32>
  // CHECK: "lz.reduce_mean"(%{{.*}}) {axes = array<i64: 2>} : (tensor<?x3x4xf32>) -> tensor<?x3xf32>
  %3 = "lz.reduce_mean"(%x) {axes = array<i64: 2>} : (tensor<?x3x4xf32>) -> tensor<?x3xf32>
  // CHECK: "lz.reduce_prod"(%{{.*}}) : (tensor<?x3x4xf32>) -> tensor<f32>
  %4 = "lz.reduce_prod"(%x) : (tensor<?x3x4xf32>) -> tensor<f32>
  // CHECK: "lz.argmax"(%{{.*}}) {axis = 1 : i64} : (tensor<?x3x4xf32>) -> tensor<?x4xi64>
  %5 = "lz.argmax"(%x) {axis = 1 : i64} : (tensor<?x3x4xf32>) -> tensor<?x4xi64>
  func.return %0, %1, %2, %3, %4, %5 : tensor<?x1x4xf32>, tensor<4xf32>, tensor<?xf32>, tensor<?x3xf32>, tensor<f32>, tensor<?x4xi64>
}
