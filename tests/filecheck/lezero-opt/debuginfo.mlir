// --print-debuginfo prints every location (file:line:col, named, unknown, fused), on ops, block
// arguments, functions and the module; printed locations parse back to the same text.  Without
// the flag, no location is printed.
// RUN: lezero-opt %s --print-debuginfo | filecheck %s
// RUN: lezero-opt %s --print-debuginfo > %t.1 && lezero-opt %t.1 --print-debuginfo > %t.2 && diff %t.1 %t.2
// RUN: lezero-opt %s --print-debuginfo --print-op-generic | lezero-opt --print-debuginfo | filecheck %s
// RUN: lezero-opt %s | filecheck %s --check-prefix=NOLOC
// RUN: lezero-opt %s -p canonicalize --print-debuginfo | filecheck %s --check-prefix=CANON

// CHECK:      module {
// CHECK-NEXT:   func.func @f(%arg0: tensor<4xf32> loc("model.py":3:9), %arg1: tensor<4xi32> loc("model.py":3:25)) -> (tensor<4xf32>, tensor<4xi32>) {
// CHECK-NEXT:     %0 = "lz.exp"(%arg0) : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":12:3)
// CHECK-NEXT:     %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32> loc("encoder.layer0.act"("model.py":13:5))
// CHECK-NEXT:     %2 = "lz.relu"(%1) : (tensor<4xf32>) -> tensor<4xf32> loc("fused_act")
// CHECK-NEXT:     %3 = "lz.tanh"(%2) : (tensor<4xf32>) -> tensor<4xf32> loc(unknown)
// CHECK-NEXT:     %4 = "lz.cos"(%3) : (tensor<4xf32>) -> tensor<4xf32> loc(fused["a.py":1:2, "b.py":3:4])
// CHECK-NEXT:     %5 = "lz.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32> loc("model.py":20:3)
// CHECK-NEXT:     %6 = "lz.mul"(%arg1, %5) : (tensor<4xi32>, tensor<i32>) -> tensor<4xi32> loc("model.py":21:3)
// CHECK-NEXT:     func.return %4, %6 : tensor<4xf32>, tensor<4xi32> loc("model.py":22:3)
// CHECK-NEXT:   } loc("model.py":1:1)
// the module is implicit: it is located at the start of the file
// CHECK-NEXT: } loc("{{.*}}debuginfo.mlir":1:1)

// NOLOC-NOT: loc(

// A rewrite's new ops take the location of the op they replace: x*0 becomes a zero constant at
// the multiplication's location.
// CANON:      func.func @f(%arg0: tensor<4xf32> loc("model.py":3:9), %arg1: tensor<4xi32> loc("model.py":3:25))
// CANON-NEXT:   %0 = "lz.exp"(%arg0) {{.*}} loc("model.py":12:3)
// CANON-NEXT:   %1 = "lz.neg"(%0) {{.*}} loc("encoder.layer0.act"("model.py":13:5))
// CANON-NEXT:   %2 = "lz.relu"(%1) {{.*}} loc("fused_act")
// CANON-NEXT:   %3 = "lz.tanh"(%2) {{.*}} loc(unknown)
// CANON-NEXT:   %4 = "lz.cos"(%3) {{.*}} loc(fused["a.py":1:2, "b.py":3:4])
// CANON-NEXT:   %5 = "lz.constant"() {value = dense<0> : tensor<4xi32>} : () -> tensor<4xi32> loc("model.py":21:3)
// CANON-NEXT:   func.return %4, %5 : tensor<4xf32>, tensor<4xi32> loc("model.py":22:3)

func.func @f(%x: tensor<4xf32> loc("model.py":3:9), %i: tensor<4xi32> loc("model.py":3:25)) -> (tensor<4xf32>, tensor<4xi32>) {
  %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":12:3)
  %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32> loc("encoder.layer0.act"("model.py":13:5))
  %2 = "lz.relu"(%1) : (tensor<4xf32>) -> tensor<4xf32> loc("fused_act")
  %3 = "lz.tanh"(%2) : (tensor<4xf32>) -> tensor<4xf32> loc(unknown)
  %4 = "lz.cos"(%3) : (tensor<4xf32>) -> tensor<4xf32> loc(fused["a.py":1:2, "b.py":3:4])
  %z = "lz.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32> loc("model.py":20:3)
  %5 = "lz.mul"(%i, %z) : (tensor<4xi32>, tensor<i32>) -> tensor<4xi32> loc("model.py":21:3)
  func.return %4, %5 : tensor<4xf32>, tensor<4xi32> loc("model.py":22:3)
} loc("model.py":1:1)
