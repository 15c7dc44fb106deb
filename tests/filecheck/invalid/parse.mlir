// Malformed text: each error points at the offending token.
// RUN: lezero-opt %s --split-input-file --verify-diagnostics

func.func @undefined(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{use of undeclared SSA value name '%b'}}
  %0 = "lz.neg"(%b) : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @redefined(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "lz.neg"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  // expected-error @+1 {{redefinition of SSA value '%0'}}
  %0 = "lz.neg"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @type_mismatch(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{use of value '%a' expects different type than prior uses: 'tensor<3xf32>' vs 'tensor<2xf32>'}}
  %0 = "lz.neg"(%a) : (tensor<3xf32>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

func.func @bad_type(%a: tensor<2xf31>) -> tensor<2xf32> {
  // expected-error @-1 {{unknown type 'f31'}}
  func.return %a : tensor<2xf32>
}

// -----

func.func @missing_paren(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{expected ')' to end operand list}}
  %0 = "lz.neg"(%a : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @bad_string(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{unterminated string}}
  %0 = "lz.neg(%a) : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
