// lz.for / lz.while / lz.if: each case is one mistake, reported on the op's line.
// RUN: lezero-opt %s --split-input-file --verify-diagnostics

func.func @negative_trip_count(%h0: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{'lz.for' op trip_count must be >= 0, got -2}}
  %h = "lz.for"(%h0) ({
  ^bb0(%i: tensor<i64>, %h_: tensor<3xf32>):
    "lz.yield"(%h_) : (tensor<3xf32>) -> ()
  }) {trip_count = -2 : i64, num_carried = 1 : i64} : (tensor<3xf32>) -> tensor<3xf32>
  func.return %h : tensor<3xf32>
}

// -----

func.func @carried_type_changes(%h0: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{'lz.for' op body region yields tensor<3xf64> as value #0, but the carried values have type tensor<3xf32>}}
  %h = "lz.for"(%h0) ({
  ^bb0(%i: tensor<i64>, %h_: tensor<3xf32>):
    %0 = "lz.cast"(%h_) {to = f64} : (tensor<3xf32>) -> tensor<3xf64>
    "lz.yield"(%0) : (tensor<3xf64>) -> ()
  }) {trip_count = 2 : i64, num_carried = 1 : i64} : (tensor<3xf32>) -> tensor<3xf32>
  func.return %h : tensor<3xf32>
}

// -----

func.func @missing_index(%h0: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{'lz.for' op body region takes 1 arguments, but the operands give 2 (tensor<i64>, tensor<3xf32>)}}
  %h = "lz.for"(%h0) ({
  ^bb0(%h_: tensor<3xf32>):
    "lz.yield"(%h_) : (tensor<3xf32>) -> ()
  }) {trip_count = 2 : i64, num_carried = 1 : i64} : (tensor<3xf32>) -> tensor<3xf32>
  func.return %h : tensor<3xf32>
}

// -----

func.func @float_condition(%n0: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{'lz.while' op condition region yields tensor<f32> as value #0, but conditions have type tensor<i1>}}
  %n = "lz.while"(%n0) ({
  ^bb0(%n_: tensor<f32>):
    "lz.yield"(%n_) : (tensor<f32>) -> ()
  }, {
  ^bb0(%n_: tensor<f32>):
    "lz.yield"(%n_) : (tensor<f32>) -> ()
  }) : (tensor<f32>) -> tensor<f32>
  func.return %n : tensor<f32>
}

// -----

func.func @branches_disagree(%p: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'lz.if' op else region yields tensor<2xi32> as value #0, but the then region's values have type tensor<2xf32>}}
  %r = "lz.if"(%p, %a) ({
  ^bb0(%a_: tensor<2xf32>):
    "lz.yield"(%a_) : (tensor<2xf32>) -> ()
  }, {
  ^bb0(%a_: tensor<2xf32>):
    %0 = "lz.cast"(%a_) {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
    "lz.yield"(%0) : (tensor<2xi32>) -> ()
  }) : (tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  func.return %r : tensor<2xf32>
}
