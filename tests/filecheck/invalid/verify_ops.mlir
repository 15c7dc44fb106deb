// Each case is one mistake; --verify-diagnostics checks the error lands on the right line.
// RUN: lezero-opt %s --split-input-file --verify-diagnostics

func.func @add_shapes(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'lz.add' op operand shapes 2x3 and 4x3 are not broadcast-compatible}}
  %0 = "lz.add"(%a, %b) : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

func.func @add_dtypes(%a: tensor<2xf32>, %b: tensor<2xi32>) -> tensor<2xf32> {
  // expected-error @+1 {{same element type}}
  %0 = "lz.add"(%a, %b) : (tensor<2xf32>, tensor<2xi32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @wrong_result_shape(%a: tensor<2x3xf32>) -> tensor<3x3xf32> {
  // expected-error @+1 {{'lz.relu' op result type tensor<3x3xf32> has shape 3x3, but the operands give 2x3}}
  %0 = "lz.relu"(%a) : (tensor<2x3xf32>) -> tensor<3x3xf32>
  func.return %0 : tensor<3x3xf32>
}

// -----

func.func @float_only(%a: tensor<2xi32>) -> tensor<2xi32> {
  // expected-error @+1 {{'lz.exp' op operand must have a float element type (f16, bf16, f32, f64), got i32}}
  %0 = "lz.exp"(%a) : (tensor<2xi32>) -> tensor<2xi32>
  func.return %0 : tensor<2xi32>
}

// -----

func.func @matmul_inner(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{'lz.matmul' op contracting dimensions differ: 2x3 has 3 columns, 4x5 has 4 rows}}
  %0 = "lz.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return %0 : tensor<2x5xf32>
}

// -----

func.func @missing_attr(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{'lz.reshape' op requires attribute 'shape'}}
  %0 = "lz.reshape"(%a) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// -----

func.func @bad_perm(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{'lz.transpose' op attribute 'perm' must be a permutation of 0..1, got [0, 0]}}
  %0 = "lz.transpose"(%a) {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// -----

func.func @attr_kind(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{attribute 'axes' expected an integer array attribute}}
  %0 = "lz.reduce_sum"(%a) {axes = "one"} : (tensor<2x3xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @unknown_attr(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{has unknown attribute 'axs'}}
  %0 = "lz.reduce_sum"(%a) {axs = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @reduce_axis(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'lz.reduce_sum' op axes entry 5 is out of range for rank 2 (valid: [-2, 1])}}
  %0 = "lz.reduce_sum"(%a) {axes = array<i64: 5>} : (tensor<2x3xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @bad_reshape(%a: tensor<2x3xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'lz.reshape' op cannot reshape 2x3 (6 elements) to 4x2 (8 elements)}}
  %0 = "lz.reshape"(%a) {shape = array<i64: 4, 2>} : (tensor<2x3xf32>) -> tensor<4x2xf32>
  func.return %0 : tensor<4x2xf32>
}

// -----

func.func @bad_predicate(%a: tensor<2xf32>) -> tensor<2xi1> {
  // expected-error @+1 {{attribute 'predicate' must be one of}}
  %0 = "lz.cmp"(%a, %a) {predicate = "less"} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
  func.return %0 : tensor<2xi1>
}

// -----

func.func @conv_channels(%x: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error @+1 {{'lz.conv2d' op input has 3 channels but weights 4x2x3x3 with groups = 1 expect 2}}
  %0 = "lz.conv2d"(%x, %w) : (tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>
  func.return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @operand_count(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'lz.add' op expects 2 operands, got 1}}
  %0 = "lz.add"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @unregistered(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'lz.frobnicate' op is unregistered}}
  %0 = "lz.frobnicate"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
