// Round trip of the composite ops (the decompose pass expands them; see ../decompose).
// RUN: lezero-opt %s | filecheck %s
// RUN: lezero-opt %s > %t.1 && lezero-opt %t.1 > %t.2 && diff %t.1 %t.2

// CHECK-LABEL: func.func @composites
func.func @composites(%x: tensor<?x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>, %img: tensor<2x8x4x4xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<2x8x4x4xf32>) {
  // CHECK: "lz.softmax"(%{{.*}}) {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %0 = "lz.softmax"(%x) {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "lz.log_softmax"(%{{.*}}) {axis = -1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = "lz.log_softmax"(%x) {axis = -1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "lz.layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %2 = "lz.layer_norm"(%x, %s, %b) {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  // CHECK: "lz.batch_norm"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {epsilon = 0.001 : f32} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x4x4xf32>
  %3 = "lz.batch_norm"(%img, %s, %b, %s, %s) {epsilon = 0.001 : f32} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x4x4xf32>
  func.return %0, %1, %2, %3 : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<2x8x4x4xf32>
}
