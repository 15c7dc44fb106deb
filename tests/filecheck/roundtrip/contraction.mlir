// Round trip of matmul, convolution and pooling.
// RUN: lezero-opt %s | filecheck %s
// RUN: lezero-opt %s > %t.1 && lezero-opt %t.1 > %t.2 && diff %t.1 %t.2
// RUN: lezero-opt %s --print-op-generic | lezero-opt | filecheck %s

// CHECK-LABEL: func.func @matmuls
func.func @matmuls(%a: tensor<?x64xf32>, %b: tensor<64x32xf32>, %c: tensor<5x1x4x6xf32>,
                   %d: tensor<3x6x2xf32>, %v: tensor<64xf32>) -> (tensor<?x32xf32>, tensor<5x3x4x2xf32>, tensor<?xf32>) {
  // CHECK: "lz.matmul"(%{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<64x32xf32>) -> tensor<?x32xf32>
  %0 = "lz.matmul"(%a, %b) : (tensor<?x64xf32>, tensor<64x32xf32>) -> tensor<?x32xf32>
  // CHECK: "lz.matmul"(%{{.*}}, %{{.*}}) : (tensor<5x1x4x6xf32>, tensor<3x6x2xf32>) -> tensor<5x3x4x2xf32>
  %1 = "lz.matmul"(%c, %d) : (tensor<5x1x4x6xf32>, tensor<3x6x2xf32>) -> tensor<5x3x4x2xf32>
  // CHECK: "lz.matmul"(%{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?xf32>
  %2 = "lz.matmul"(%a, %v) : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?xf32>
  func.return %0, %1, %2 : tensor<?x32xf32>, tensor<5x3x4x2xf32>, tensor<?xf32>
}

// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<1x4x9x9xf32>, %w: tensor<8x2x3x3xf32>) -> tensor<1x8x5x5xf32> {
  // CHECK: "lz.conv2d"(%{{.*}}, %{{.*}}) {dilations = array<i64: 1, 1>, groups = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x4x9x9xf32>, tensor<8x2x3x3xf32>) -> tensor<1x8x5x5xf32>
  %0 = "lz.conv2d"(%x, %w) {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 2 : i64} : (tensor<1x4x9x9xf32>, tensor<8x2x3x3xf32>) -> tensor<1x8x5x5xf32>
  func.return %0 : tensor<1x8x5x5xf32>
}

// CHECK-LABEL: func.func @pools
func.func @pools(%x: tensor<2x3x8x8xf32>) -> (tensor<2x3x4x4xf32>, tensor<2x3x8x8xf32>) {
  // CHECK: "lz.max_pool2d"(%{{.*}}) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32>
  %0 = "lz.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32>
  // CHECK: "lz.avg_pool2d"(%{{.*}}) {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x8x8xf32>
  %1 = "lz.avg_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x8x8xf32>
  func.return %0, %1 : tensor<2x3x4x4xf32>, tensor<2x3x8x8xf32>
}
