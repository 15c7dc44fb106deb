// Round trip of the elementwise family: print, parse, print gives the same text.
// RUN: lezero-opt %s | filecheck %s
// RUN: lezero-opt %s > %t.1 && lezero-opt %t.1 > %t.2 && diff %t.1 %t.2
// RUN: lezero-opt %s --print-op-generic | lezero-opt | filecheck %s

// CHECK-LABEL: func.func @unary
// CHECK-SAME: (%[[X:.+]]: tensor<2x?xf32>)
func.func @unary(%x: tensor<2x?xf32>) -> tensor<2x?xf32> {
  // CHECK: %[[A:.+]] = "lz.neg"(%[[X]]) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  %0 = "lz.neg"(%x) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.abs"(%[[A]])
  %1 = "lz.abs"(%0) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.exp"
  %2 = "lz.exp"(%1) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.log"
  %3 = "lz.log"(%2) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.sqrt"
  %4 = "lz.sqrt"(%3) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.rsqrt"
  %5 = "lz.rsqrt"(%4) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.tanh"
  %6 = "lz.tanh"(%5) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.sigmoid"
  %7 = "lz.sigmoid"(%6) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.relu"
  %8 = "lz.relu"(%7) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.erf"
  %9 = "lz.erf"(%8) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.sin"
  %10 = "lz.sin"(%9) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.cos"
  %11 = "lz.cos"(%10) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.floor"
  %12 = "lz.floor"(%11) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.ceil"
  %13 = "lz.ceil"(%12) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.sign"
  %14 = "lz.sign"(%13) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.reciprocal"
  %15 = "lz.reciprocal"(%14) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.gelu"(%{{.*}}) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  %16 = "lz.gelu"(%15) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: "lz.gelu"(%{{.*}}) {approximate = "tanh"} : (tensor<2x?xf32>) -> tensor<2x?xf32>
  %17 = "lz.gelu"(%16) {approximate = "tanh"} : (tensor<2x?xf32>) -> tensor<2x?xf32>
  // CHECK-NEXT: func.return
  func.return %17 : tensor<2x?xf32>
}

// CHECK-LABEL: func.func @casts_and_logic
func.func @casts_and_logic(%x: tensor<4xf32>, %b: tensor<4xi1>) -> (tensor<4xf16>, tensor<4xi1>, tensor<4xbf16>) {
  // CHECK: "lz.cast"(%{{.*}}) {to = f16} : (tensor<4xf32>) -> tensor<4xf16>
  %0 = "lz.cast"(%x) {to = f16} : (tensor<4xf32>) -> tensor<4xf16>
  // CHECK: "lz.cast"(%{{.*}}) {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  %1 = "lz.cast"(%x) {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  // CHECK: "lz.not"(%{{.*}}) : (tensor<4xi1>) -> tensor<4xi1>
  %2 = "lz.not"(%b) : (tensor<4xi1>) -> tensor<4xi1>
  // CHECK: func.return %{{.*}}, %{{.*}}, %{{.*}} : tensor<4xf16>, tensor<4xi1>, tensor<4xbf16>
  func.return %0, %2, %1 : tensor<4xf16>, tensor<4xi1>, tensor<4xbf16>
}

// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<2x1xf32>, %i: tensor<2x3xi32>,
                  %p: tensor<2x3xi1>, %q: tensor<3xi1>) -> tensor<2x3xf32> {
  // CHECK: "lz.add"(%{{.*}}, %{{.*}}) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = "lz.add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: "lz.sub"(%{{.*}}, %{{.*}}) : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  %1 = "lz.sub"(%0, %c) : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  // CHECK: "lz.mul"
  %2 = "lz.mul"(%1, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: "lz.div"
  %3 = "lz.div"(%2, %c) : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  // CHECK: "lz.pow"
  %4 = "lz.pow"(%3, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: "lz.max"
  %5 = "lz.max"(%4, %a) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: "lz.min"
  %6 = "lz.min"(%5, %c) : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  // CHECK: "lz.add"(%{{.*}}, %{{.*}}) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  %7 = "lz.add"(%i, %i) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  // CHECK: "lz.and"(%{{.*}}, %{{.*}}) : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  %8 = "lz.and"(%p, %q) : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  // CHECK: "lz.or"
  %9 = "lz.or"(%8, %p) : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: "lz.cmp"(%{{.*}}, %{{.*}}) {predicate = "lt"} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %10 = "lz.cmp"(%6, %b) {predicate = "lt"} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: "lz.select"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  %11 = "lz.select"(%10, %6, %c) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  func.return %11 : tensor<2x3xf32>
}
