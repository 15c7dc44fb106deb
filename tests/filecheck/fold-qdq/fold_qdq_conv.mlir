// fold-qdq (issue 12): a float conv2d of a dequantized 8-bit input (per tensor) and weight (per
// output channel) is lz.conv_integer with the conv's window, scaled once by sx * sw along the
// channels; a weight dequantized along another axis stays a float convolution.
// RUN: lezero-opt %s -p fold-qdq,dce | filecheck %s

// CHECK-LABEL: func.func @per_channel
// CHECK-SAME: (%[[X:[^:]+]]: tensor<1x2x5x5xui8>, %[[W:[^:]+]]: tensor<3x2x3x3xi8>
func.func @per_channel(%x: tensor<1x2x5x5xui8>, %w: tensor<3x2x3x3xi8>, %sx: tensor<f32>, %zx: tensor<ui8>, %sw: tensor<3xf32>, %zw: tensor<3xi8>) -> tensor<1x3x3x3xf32> {
  // CHECK-NEXT: %[[C:.+]] = "lz.conv_integer"(%[[X]], %[[W]], %{{.+}}, %{{.+}}) {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x5x5xui8>, tensor<3x2x3x3xi8>, tensor<ui8>, tensor<3xi8>) -> tensor<1x3x3x3xi32>
  // CHECK-NEXT: %[[S:.+]] = "lz.mul"(%{{.+}}, %{{.+}}) : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  // CHECK-NEXT: %[[R:.+]] = "lz.reshape"(%[[S]]) {shape = array<i64: 1, 3, 1, 1>}
  // CHECK-NEXT: %[[F:.+]] = "lz.cast"(%[[C]]) {to = f32}
  // CHECK-NEXT: %[[Y:.+]] = "lz.mul"(%[[F]], %[[R]]) : (tensor<1x3x3x3xf32>, tensor<1x3x1x1xf32>) -> tensor<1x3x3x3xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %0 = "lz.dequantize"(%x, %sx, %zx) {axis = 1 : i64} : (tensor<1x2x5x5xui8>, tensor<f32>, tensor<ui8>) -> tensor<1x2x5x5xf32>
  %1 = "lz.dequantize"(%w, %sw, %zw) {axis = 0 : i64} : (tensor<3x2x3x3xi8>, tensor<3xf32>, tensor<3xi8>) -> tensor<3x2x3x3xf32>
  %2 = "lz.conv2d"(%0, %1) {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32>
  func.return %2 : tensor<1x3x3x3xf32>
}

// CHECK-LABEL: func.func @weight_scaled_per_input_channel_stays
func.func @weight_scaled_per_input_channel_stays(%x: tensor<1x2x5x5xui8>, %w: tensor<3x2x3x3xi8>, %sx: tensor<f32>, %zx: tensor<ui8>, %sw: tensor<2xf32>, %zw: tensor<2xi8>) -> tensor<1x3x3x3xf32> {
  // CHECK-NOT: lz.conv_integer
  // CHECK: "lz.conv2d"
  %0 = "lz.dequantize"(%x, %sx, %zx) {axis = 1 : i64} : (tensor<1x2x5x5xui8>, tensor<f32>, tensor<ui8>) -> tensor<1x2x5x5xf32>
  %1 = "lz.dequantize"(%w, %sw, %zw) {axis = 1 : i64} : (tensor<3x2x3x3xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2x3x3xf32>
  %2 = "lz.conv2d"(%0, %1) {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32>
  func.return %2 : tensor<1x3x3x3xf32>
}
