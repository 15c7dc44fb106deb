// Round trip of lz.for (scanned inputs, stacked outputs, reverse), lz.while and lz.if, their
// regions ending in lz.yield.
// RUN: lezero-opt %s | filecheck %s
// RUN: lezero-opt %s > %t.1 && lezero-opt %t.1 > %t.2 && diff %t.1 %t.2
// RUN: lezero-opt %s --print-op-generic > %t.3 && lezero-opt %t.3 --print-op-generic | diff %t.3 -

// CHECK-LABEL: func.func @scan
func.func @scan(%w: tensor<3x3xf32>, %h0: tensor<1x3xf32>, %xs: tensor<5x1x3xf32>) -> (tensor<1x3xf32>, tensor<5x1x3xf32>) {
  // CHECK: %[[R:.+]]:2 = "lz.for"(%{{.+}}, %{{.+}}, %{{.+}}) ({
  // CHECK-NEXT: ^bb0(%{{.+}}: tensor<i64>, %[[W:[^:]+]]: tensor<3x3xf32>, %[[H:[^:]+]]: tensor<1x3xf32>, %[[X:[^:]+]]: tensor<1x3xf32>):
  // CHECK-NEXT: %[[M:.+]] = "lz.matmul"(%[[H]], %[[W]])
  // CHECK-NEXT: %[[A:.+]] = "lz.add"(%[[M]], %[[X]])
  // CHECK-NEXT: "lz.yield"(%[[A]], %[[M]]) : (tensor<1x3xf32>, tensor<1x3xf32>) -> ()
  // CHECK-NEXT: }) {num_carried = 1 : i64, num_invariant = 1 : i64, reverse = true, trip_count = 5 : i64} : (tensor<3x3xf32>, tensor<1x3xf32>, tensor<5x1x3xf32>) -> (tensor<1x3xf32>, tensor<5x1x3xf32>)
  %h, %ys = "lz.for"(%w, %h0, %xs) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<3x3xf32>, %h_: tensor<1x3xf32>, %x: tensor<1x3xf32>):
    %0 = "lz.matmul"(%h_, %w_) : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
    %1 = "lz.add"(%0, %x) : (tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<1x3xf32>
    "lz.yield"(%1, %0) : (tensor<1x3xf32>, tensor<1x3xf32>) -> ()
  }) {trip_count = 5 : i64, num_invariant = 1 : i64, num_carried = 1 : i64, reverse = true}
     : (tensor<3x3xf32>, tensor<1x3xf32>, tensor<5x1x3xf32>) -> (tensor<1x3xf32>, tensor<5x1x3xf32>)
  // CHECK: func.return %[[R]]#0, %[[R]]#1
  func.return %h, %ys : tensor<1x3xf32>, tensor<5x1x3xf32>
}

// CHECK-LABEL: func.func @count_then_pick
func.func @count_then_pick(%n0: tensor<i64>, %limit: tensor<i64>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // CHECK: "lz.while"(%{{.+}}, %{{.+}}) ({
  // CHECK: "lz.yield"(%{{.+}}) : (tensor<i1>) -> ()
  // CHECK-NEXT: }, {
  // CHECK: }) {num_invariant = 1 : i64} : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %n = "lz.while"(%limit, %n0) ({
  ^bb0(%l: tensor<i64>, %k: tensor<i64>):
    %go = "lz.cmp"(%k, %l) {predicate = "lt"} : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "lz.yield"(%go) : (tensor<i1>) -> ()
  }, {
  ^bb0(%l: tensor<i64>, %k: tensor<i64>):
    %one = "lz.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %k1 = "lz.add"(%k, %one) : (tensor<i64>, tensor<i64>) -> tensor<i64>
    "lz.yield"(%k1) : (tensor<i64>) -> ()
  }) {num_invariant = 1 : i64} : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %zero = "lz.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %odd = "lz.cmp"(%n, %zero) {predicate = "gt"} : (tensor<i64>, tensor<i64>) -> tensor<i1>
  // CHECK: "lz.if"(%{{.+}}, %{{.+}}) ({
  // CHECK: "lz.exp"
  // CHECK: }, {
  // CHECK: "lz.neg"
  // CHECK: }) : (tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  %r = "lz.if"(%odd, %a) ({
  ^bb0(%a_: tensor<2xf32>):
    %0 = "lz.exp"(%a_) : (tensor<2xf32>) -> tensor<2xf32>
    "lz.yield"(%0) : (tensor<2xf32>) -> ()
  }, {
  ^bb0(%a_: tensor<2xf32>):
    %0 = "lz.neg"(%a_) : (tensor<2xf32>) -> tensor<2xf32>
    "lz.yield"(%0) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  func.return %r : tensor<2xf32>
}
