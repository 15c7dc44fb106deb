// Structural rules: signatures, terminators, symbols.
// RUN: lezero-opt %s --split-input-file --verify-diagnostics

func.func @return_type(%a: tensor<2xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{'func.return' op type of return operand 0 (tensor<2xf32>) does not match the function's result type (tensor<3xf32>)}}
  func.return %a : tensor<2xf32>
}

// -----

func.func @return_count(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  // expected-error @+1 {{'func.return' op has 1 operands, but the enclosing function (@return_count) returns 2}}
  func.return %a : tensor<2xf32>
}

// -----

// expected-error @+1 {{'func.func' op function body must end with 'func.return'}}
func.func @no_return(%a: tensor<2xf32>) -> tensor<2xf32> {
}

// -----

func.func @dup(%a: tensor<2xf32>) -> tensor<2xf32> {
  func.return %a : tensor<2xf32>
}
// expected-error @+1 {{redefinition of symbol '@dup'}}
func.func @dup(%a: tensor<2xf32>) -> tensor<2xf32> {
  func.return %a : tensor<2xf32>
}

// -----

func.func @early_return(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'func.return' op must be the last operation in its block}}
  func.return %a : tensor<2xf32>
  // expected-error @+1 {{'lz.neg' op function body must end with 'func.return'}}
  %0 = "lz.neg"(%a) : (tensor<2xf32>) -> tensor<2xf32>
}
