// Round trip of the data movement ops and constants.
// RUN: lezero-opt %s | filecheck %s
// RUN: lezero-opt %s > %t.1 && lezero-opt %t.1 > %t.2 && diff %t.1 %t.2
// RUN: lezero-opt %s --print-op-generic | lezero-opt | filecheck %s

// CHECK-LABEL: func.func @movement
func.func @movement(%x: tensor<2x3x4xf32>, %y: tensor<2x5x4xf32>, %i: tensor<6xi64>) -> tensor<6x3x4xf32> {
  // CHECK: "lz.reshape"(%{{.*}}) {shape = array<i64: 6, -1>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %0 = "lz.reshape"(%x) {shape = array<i64: 6, -1>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // CHECK: "lz.transpose"(%{{.*}}) {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = "lz.transpose"(%x) {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  // CHECK: "lz.broadcast_to"(%{{.*}}) {shape = array<i64: 5, 2, 3, 4>} : (tensor<2x3x4xf32>) -> tensor<5x2x3x4xf32>
  %2 = "lz.broadcast_to"(%x) {shape = array<i64: 5, 2, 3, 4>} : (tensor<2x3x4xf32>) -> tensor<5x2x3x4xf32>
  // CHECK: "lz.slice"(%{{.*}}) {axes = array<i64: 1, 2>, ends = array<i64: 3, -1>, starts = array<i64: 1, 0>, steps = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x2x2xf32>
  %3 = "lz.slice"(%x) {starts = array<i64: 1, 0>, ends = array<i64: 3, -1>, axes = array<i64: 1, 2>, steps = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x2x2xf32>
  // CHECK: "lz.concat"(%{{.*}}, %{{.*}}, %{{.*}}) {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>, tensor<2x3x4xf32>) -> tensor<2x11x4xf32>
  %4 = "lz.concat"(%x, %y, %x) {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>, tensor<2x3x4xf32>) -> tensor<2x11x4xf32>
  // CHECK: "lz.pad"(%{{.*}}) {pads = array<i64: 0, 1, 2, 0, 1, 0>, value = -1.5 : f32} : (tensor<2x3x4xf32>) -> tensor<2x5x6xf32>
  %5 = "lz.pad"(%x) {pads = array<i64: 0, 1, 2, 0, 1, 0>, value = -1.5 : f32} : (tensor<2x3x4xf32>) -> tensor<2x5x6xf32>
  // CHECK: "lz.gather"(%{{.*}}, %{{.*}}) {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<6xi64>) -> tensor<6x3x4xf32>
  %6 = "lz.gather"(%x, %i) {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<6xi64>) -> tensor<6x3x4xf32>
  func.return %6 : tensor<6x3x4xf32>
}

// CHECK-LABEL: func.func @constants
func.func @constants() -> (tensor<2x2xi32>, tensor<3xf32>, tensor<f64>, tensor<2xi1>) {
  // CHECK: "lz.constant"() {value = dense<{{\[}}[1, 2], [3, 4]]> : tensor<2x2xi32>} : () -> tensor<2x2xi32>
  %0 = "lz.constant"() {value = dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>} : () -> tensor<2x2xi32>
  // CHECK: "lz.constant"() {value = dense<1.5> : tensor<3xf32>} : () -> tensor<3xf32>
  %1 = "lz.constant"() {value = dense<1.5> : tensor<3xf32>} : () -> tensor<3xf32>
  // CHECK: "lz.constant"() {value = dense<0x7FF0000000000000> : tensor<f64>} : () -> tensor<f64>
  %2 = "lz.constant"() {value = dense<0x7FF0000000000000> : tensor<f64>} : () -> tensor<f64>
  // CHECK: "lz.constant"() {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
  %3 = "lz.constant"() {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
  func.return %0, %1, %2, %3 : tensor<2x2xi32>, tensor<3xf32>, tensor<f64>, tensor<2xi1>
}
