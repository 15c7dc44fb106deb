// MLIR tools read what lezero-opt writes: xDSL's xdsl-opt parses and verifies the output (custom
// and generic form, with locations), and lezero-opt reads back what xdsl-opt prints.
// RUN: lezero-opt %s -p decompose | xdsl-opt --allow-unregistered-dialect | filecheck %s
// RUN: lezero-opt %s -p decompose --print-op-generic | xdsl-opt --allow-unregistered-dialect | filecheck %s
// RUN: lezero-opt %s -p decompose --print-debuginfo | xdsl-opt --allow-unregistered-dialect | filecheck %s
// RUN: lezero-opt %s -p decompose | xdsl-opt --allow-unregistered-dialect | lezero-opt > %t.back
// RUN: lezero-opt %s -p decompose > %t.direct && diff %t.direct %t.back

// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @block(%[[X:[^:]+]]: tensor<2x8xf32>, %[[W:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>, %[[M:[^:]+]]: tensor<2x8xi1>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
// CHECK-NEXT:     %[[MAX:.+]] = "lz.reduce_max"(%[[X]]) {axes = array<i64: -1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
// CHECK-NEXT:     %[[SH:.+]] = "lz.sub"(%[[X]], %[[MAX]]) : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:     %[[E:.+]] = "lz.exp"(%[[SH]]) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:     %[[S:.+]] = "lz.reduce_sum"(%[[E]]) {axes = array<i64: -1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
// CHECK-NEXT:     %[[P:.+]] = "lz.div"(%[[E]], %[[S]]) : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:     %[[ZERO:.+]] = "lz.constant"() {value = dense<0.000000e+00> : tensor<f32>} : () -> tensor<f32>
// CHECK-NEXT:     %[[SEL:.+]] = "lz.select"(%[[M]], %[[P]], %[[ZERO]]) : (tensor<2x8xi1>, tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
// CHECK:          "lz.constant"() {value = dense<2.500000e-01> : tensor<f32>} : () -> tensor<f32>
// CHECK:          %[[K:.+]] = "lz.kernel"(%[[SEL]]) ({
// CHECK-NEXT:     ^bb0(%[[A:.+]]: tensor<2x8xf32>):
// CHECK-NEXT:       %[[C:.+]] = "lz.constant"() {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
// CHECK-NEXT:       %[[T:.+]] = "lz.transpose"(%[[A]]) {perm = array<i64: 1, 0>} : (tensor<2x8xf32>) -> tensor<8x2xf32>
// CHECK-NEXT:       %[[R:.+]] = "lz.select"(%[[C]], %[[T]], %[[T]]) : (tensor<2xi1>, tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
// CHECK-NEXT:       %[[Y:.+]] = "lz.transpose"(%[[R]]) {perm = array<i64: 1, 0>} : (tensor<8x2xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:       "lz.yield"(%[[Y]]) : (tensor<2x8xf32>) -> ()
// CHECK-NEXT:     }) {kind = "elementwise", name = "lz_fused_0"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:     func.return %[[K]], %{{.*}} : tensor<2x8xf32>, tensor<2x8xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   func.func private @helper(%{{.*}}: tensor<4xi64>) -> tensor<4xi64> {
// CHECK-NEXT:     "lz.constant"() {value = dense<[1, -2, 3, -4]> : tensor<4xi64>} : () -> tensor<4xi64>
// CHECK-NEXT:     "lz.add"
// CHECK-NEXT:     func.return
// CHECK-NEXT:   }
// CHECK-NEXT: }

func.func @block(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>, %m: tensor<2x8xi1>)
    -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %0 = "lz.softmax"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32> loc("model.py":12:3)
  %zero = "lz.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %1 = "lz.select"(%m, %0, %zero) : (tensor<2x8xi1>, tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %2 = "lz.layer_norm"(%1, %w, %b) {epsilon = 0.25 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32> loc("encoder.ln"("model.py":13:5))
  %3 = "lz.kernel"(%1) ({
  ^bb0(%a: tensor<2x8xf32>):
    %c = "lz.constant"() {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
    %t = "lz.transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<2x8xf32>) -> tensor<8x2xf32>
    %r = "lz.select"(%c, %t, %t) : (tensor<2xi1>, tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %y = "lz.transpose"(%r) {perm = array<i64: 1, 0>} : (tensor<8x2xf32>) -> tensor<2x8xf32>
    "lz.yield"(%y) : (tensor<2x8xf32>) -> ()
  }) {kind = "elementwise", name = "lz_fused_0"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %3, %2 : tensor<2x8xf32>, tensor<2x8xf32>
}

func.func private @helper(%i: tensor<4xi64>) -> tensor<4xi64> {
  %c = "lz.constant"() {value = dense<[1, -2, 3, -4]> : tensor<4xi64>} : () -> tensor<4xi64>
  %0 = "lz.add"(%i, %c) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  func.return %0 : tensor<4xi64>
}
