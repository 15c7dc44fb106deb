// fold-qdq: a float matmul of two dequantized 8-bit tensors is the exact integer GEMM scaled once
// by the product of the scales; a weight read through a transpose is transposed as 8 bits; a
// weight dequantized per row (not per column of the product) stays a float matmul.
// RUN: lezero-opt %s -p fold-qdq,dce | filecheck %s

// CHECK-LABEL: func.func @per_column
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xui8>, %[[W:[^:]+]]: tensor<8x3xi8>
func.func @per_column(%x: tensor<4x8xui8>, %w: tensor<8x3xi8>, %sx: tensor<f32>, %zx: tensor<ui8>, %sw: tensor<3xf32>, %zw: tensor<3xi8>) -> tensor<4x3xf32> {
  // CHECK-NEXT: %[[P:.+]] = "lz.matmul_integer"(%[[X]], %[[W]], %{{.+}}, %{{.+}}) : (tensor<4x8xui8>, tensor<8x3xi8>, tensor<ui8>, tensor<3xi8>) -> tensor<4x3xi32>
  // CHECK-NEXT: %[[F:.+]] = "lz.cast"(%[[P]]) {to = f32}
  // CHECK-NEXT: %[[S:.+]] = "lz.mul"(%{{.+}}, %{{.+}}) : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  // CHECK-NEXT: %[[Y:.+]] = "lz.mul"(%[[F]], %[[S]]) : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %0 = "lz.dequantize"(%x, %sx, %zx) {axis = 1 : i64} : (tensor<4x8xui8>, tensor<f32>, tensor<ui8>) -> tensor<4x8xf32>
  %1 = "lz.dequantize"(%w, %sw, %zw) {axis = 1 : i64} : (tensor<8x3xi8>, tensor<3xf32>, tensor<3xi8>) -> tensor<8x3xf32>
  %2 = "lz.matmul"(%0, %1) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  func.return %2 : tensor<4x3xf32>
}

// ONNX Gemm's transB: the weight (out x in) dequantized per output channel (axis 0).
// CHECK-LABEL: func.func @transposed_weight
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xui8>, %[[W:[^:]+]]: tensor<3x8xi8>
func.func @transposed_weight(%x: tensor<4x8xui8>, %w: tensor<3x8xi8>, %sx: tensor<f32>, %zx: tensor<ui8>, %sw: tensor<3xf32>, %zw: tensor<3xi8>) -> tensor<4x3xf32> {
  // CHECK-NEXT: %[[T:.+]] = "lz.transpose"(%[[W]]) {perm = array<i64: 1, 0>} : (tensor<3x8xi8>) -> tensor<8x3xi8>
  // CHECK-NEXT: "lz.matmul_integer"(%[[X]], %[[T]], %{{.+}}, %{{.+}})
  %0 = "lz.dequantize"(%x, %sx, %zx) {axis = 1 : i64} : (tensor<4x8xui8>, tensor<f32>, tensor<ui8>) -> tensor<4x8xf32>
  %1 = "lz.dequantize"(%w, %sw, %zw) {axis = 0 : i64} : (tensor<3x8xi8>, tensor<3xf32>, tensor<3xi8>) -> tensor<3x8xf32>
  %2 = "lz.transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<3x8xf32>) -> tensor<8x3xf32>
  %3 = "lz.matmul"(%0, %2) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  func.return %3 : tensor<4x3xf32>
}

// CHECK-LABEL: func.func @per_row_weight_stays
func.func @per_row_weight_stays(%x: tensor<4x8xui8>, %w: tensor<8x3xi8>, %sx: tensor<f32>, %zx: tensor<ui8>, %sw: tensor<8xf32>, %zw: tensor<8xi8>) -> tensor<4x3xf32> {
  // CHECK-NOT: lz.matmul_integer
  // CHECK: "lz.matmul"
  %0 = "lz.dequantize"(%x, %sx, %zx) {axis = 1 : i64} : (tensor<4x8xui8>, tensor<f32>, tensor<ui8>) -> tensor<4x8xf32>
  %1 = "lz.dequantize"(%w, %sw, %zw) {axis = 0 : i64} : (tensor<8x3xi8>, tensor<8xf32>, tensor<8xi8>) -> tensor<8x3xf32>
  %2 = "lz.matmul"(%0, %1) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  func.return %2 : tensor<4x3xf32>
}
