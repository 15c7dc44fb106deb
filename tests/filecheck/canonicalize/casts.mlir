// canonicalize, cast rules: a cast to the operand's own type goes; cast(cast(x)) becomes one cast
// when the inner cast is lossless (every source value survives it), and stays otherwise.
// RUN: lezero-opt %s -p canonicalize | filecheck %s

// CHECK-LABEL: func.func @cast_to_own_type
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>, %[[I:[^:]+]]: tensor<4xi8>)
func.func @cast_to_own_type(%x: tensor<4xf32>, %i: tensor<4xi8>) -> (tensor<4xf32>, tensor<4xi8>) {
  %0 = "lz.cast"(%x) {to = f32} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.cast"(%i) {to = i8} : (tensor<4xi8>) -> tensor<4xi8>
  // CHECK-NEXT: func.return %[[X]], %[[I]] :
  func.return %0, %1 : tensor<4xf32>, tensor<4xi8>
}

// Lossless inner casts: widening ints, ints into a float with enough mantissa, widening floats,
// and i1 into anything.
// CHECK-LABEL: func.func @lossless_chains
// CHECK-SAME: (%[[I8:[^:]+]]: tensor<4xi8>, %[[I16:[^:]+]]: tensor<4xi16>, %[[F16:[^:]+]]: tensor<4xf16>, %[[B:[^:]+]]: tensor<4xi1>, %[[U8:[^:]+]]: tensor<4xui8>)
func.func @lossless_chains(%i8: tensor<4xi8>, %i16: tensor<4xi16>, %f16: tensor<4xf16>, %b: tensor<4xi1>, %u8: tensor<4xui8>)
    -> (tensor<4xf32>, tensor<4xf64>, tensor<4xi32>, tensor<4xf16>, tensor<4xi16>) {
  // i8 -> i32 -> f32 is i8 -> f32
  // CHECK-NEXT: %[[A:.+]] = "lz.cast"(%[[I8]]) {to = f32} : (tensor<4xi8>) -> tensor<4xf32>
  %0 = "lz.cast"(%i8) {to = i32} : (tensor<4xi8>) -> tensor<4xi32>
  %1 = "lz.cast"(%0) {to = f32} : (tensor<4xi32>) -> tensor<4xf32>
  // i16 -> f32 -> f64 is i16 -> f64
  // CHECK-NEXT: %[[B64:.+]] = "lz.cast"(%[[I16]]) {to = f64} : (tensor<4xi16>) -> tensor<4xf64>
  %2 = "lz.cast"(%i16) {to = f32} : (tensor<4xi16>) -> tensor<4xf32>
  %3 = "lz.cast"(%2) {to = f64} : (tensor<4xf32>) -> tensor<4xf64>
  // f16 -> f32 -> i32 is f16 -> i32 (the truncation sees the same number)
  // CHECK-NEXT: %[[C:.+]] = "lz.cast"(%[[F16]]) {to = i32} : (tensor<4xf16>) -> tensor<4xi32>
  %4 = "lz.cast"(%f16) {to = f32} : (tensor<4xf16>) -> tensor<4xf32>
  %5 = "lz.cast"(%4) {to = i32} : (tensor<4xf32>) -> tensor<4xi32>
  // i1 -> i8 -> f16 is i1 -> f16
  // CHECK-NEXT: %[[D:.+]] = "lz.cast"(%[[B]]) {to = f16} : (tensor<4xi1>) -> tensor<4xf16>
  %6 = "lz.cast"(%b) {to = i8} : (tensor<4xi1>) -> tensor<4xi8>
  %7 = "lz.cast"(%6) {to = f16} : (tensor<4xi8>) -> tensor<4xf16>
  // ui8 -> i16 -> i16 (a chain of three) is ui8 -> i16
  // CHECK-NEXT: %[[E:.+]] = "lz.cast"(%[[U8]]) {to = i16} : (tensor<4xui8>) -> tensor<4xi16>
  %8 = "lz.cast"(%u8) {to = i16} : (tensor<4xui8>) -> tensor<4xi16>
  %9 = "lz.cast"(%8) {to = i64} : (tensor<4xi16>) -> tensor<4xi64>
  %10 = "lz.cast"(%9) {to = i16} : (tensor<4xi64>) -> tensor<4xi16>
  // CHECK-NEXT: func.return %[[A]], %[[B64]], %[[C]], %[[D]], %[[E]] :
  func.return %1, %3, %5, %7, %10 : tensor<4xf32>, tensor<4xf64>, tensor<4xi32>, tensor<4xf16>, tensor<4xi16>
}

// A widening round trip is no cast at all.
// CHECK-LABEL: func.func @round_trip
// CHECK-SAME: (%[[H:[^:]+]]: tensor<4xf16>, %[[I:[^:]+]]: tensor<4xi32>)
func.func @round_trip(%h: tensor<4xf16>, %i: tensor<4xi32>) -> (tensor<4xf16>, tensor<4xi32>) {
  %0 = "lz.cast"(%h) {to = f32} : (tensor<4xf16>) -> tensor<4xf32>
  %1 = "lz.cast"(%0) {to = f16} : (tensor<4xf32>) -> tensor<4xf16>
  %2 = "lz.cast"(%i) {to = i64} : (tensor<4xi32>) -> tensor<4xi64>
  %3 = "lz.cast"(%2) {to = i32} : (tensor<4xi64>) -> tensor<4xi32>
  // CHECK-NEXT: func.return %[[H]], %[[I]] :
  func.return %1, %3 : tensor<4xf16>, tensor<4xi32>
}

// Lossy inner casts stay: narrowing floats, f32 -> int, i32 -> f32 (24-bit mantissa),
// i64 -> f64, signed -> unsigned, unsigned -> same-width signed, bf16 <-> f16, anything -> i1.
// CHECK-LABEL: func.func @lossy_chains_stay
func.func @lossy_chains_stay(%f: tensor<4xf32>, %i32: tensor<4xi32>, %i64: tensor<4xi64>, %i8: tensor<4xi8>,
                             %u8: tensor<4xui8>, %bf: tensor<4xbf16>, %h: tensor<4xf16>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xi64>, tensor<4xi64>, tensor<4xi32>, tensor<4xi32>,
        tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f16} : (tensor<4xf32>) -> tensor<4xf16>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f32} : (tensor<4xf16>) -> tensor<4xf32>
  %0 = "lz.cast"(%f) {to = f16} : (tensor<4xf32>) -> tensor<4xf16>
  %1 = "lz.cast"(%0) {to = f32} : (tensor<4xf16>) -> tensor<4xf32>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = i32} : (tensor<4xf32>) -> tensor<4xi32>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f32} : (tensor<4xi32>) -> tensor<4xf32>
  %2 = "lz.cast"(%f) {to = i32} : (tensor<4xf32>) -> tensor<4xi32>
  %3 = "lz.cast"(%2) {to = f32} : (tensor<4xi32>) -> tensor<4xf32>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f32} : (tensor<4xi32>) -> tensor<4xf32>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = i64} : (tensor<4xf32>) -> tensor<4xi64>
  %4 = "lz.cast"(%i32) {to = f32} : (tensor<4xi32>) -> tensor<4xf32>
  %5 = "lz.cast"(%4) {to = i64} : (tensor<4xf32>) -> tensor<4xi64>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f64} : (tensor<4xi64>) -> tensor<4xf64>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = i64} : (tensor<4xf64>) -> tensor<4xi64>
  %6 = "lz.cast"(%i64) {to = f64} : (tensor<4xi64>) -> tensor<4xf64>
  %7 = "lz.cast"(%6) {to = i64} : (tensor<4xf64>) -> tensor<4xi64>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = ui8} : (tensor<4xi8>) -> tensor<4xui8>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = i32} : (tensor<4xui8>) -> tensor<4xi32>
  %8 = "lz.cast"(%i8) {to = ui8} : (tensor<4xi8>) -> tensor<4xui8>
  %9 = "lz.cast"(%8) {to = i32} : (tensor<4xui8>) -> tensor<4xi32>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = i8} : (tensor<4xui8>) -> tensor<4xi8>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = i32} : (tensor<4xi8>) -> tensor<4xi32>
  %10 = "lz.cast"(%u8) {to = i8} : (tensor<4xui8>) -> tensor<4xi8>
  %11 = "lz.cast"(%10) {to = i32} : (tensor<4xi8>) -> tensor<4xi32>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f16} : (tensor<4xbf16>) -> tensor<4xf16>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f32} : (tensor<4xf16>) -> tensor<4xf32>
  %12 = "lz.cast"(%bf) {to = f16} : (tensor<4xbf16>) -> tensor<4xf16>
  %13 = "lz.cast"(%12) {to = f32} : (tensor<4xf16>) -> tensor<4xf32>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = bf16} : (tensor<4xf16>) -> tensor<4xbf16>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  %14 = "lz.cast"(%h) {to = bf16} : (tensor<4xf16>) -> tensor<4xbf16>
  %15 = "lz.cast"(%14) {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = i1} : (tensor<4xf32>) -> tensor<4xi1>
  // CHECK-NEXT: "lz.cast"(%{{.*}}) {to = f32} : (tensor<4xi1>) -> tensor<4xf32>
  %16 = "lz.cast"(%f) {to = i1} : (tensor<4xf32>) -> tensor<4xi1>
  %17 = "lz.cast"(%16) {to = f32} : (tensor<4xi1>) -> tensor<4xf32>
  // CHECK-NEXT: func.return
  func.return %1, %3, %5, %7, %9, %11, %13, %15, %17 : tensor<4xf32>, tensor<4xf32>, tensor<4xi64>, tensor<4xi64>,
      tensor<4xi32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// The inner cast has another user: the outer cast still reads the source, the inner one stays.
// CHECK-LABEL: func.func @inner_cast_shared
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xi8>)
func.func @inner_cast_shared(%x: tensor<4xi8>) -> (tensor<4xi32>, tensor<4xi64>) {
  // CHECK-DAG: %[[W:.+]] = "lz.cast"(%[[X]]) {to = i32}
  // CHECK-DAG: %[[V:.+]] = "lz.cast"(%[[X]]) {to = i64}
  // CHECK: func.return %[[W]], %[[V]]
  %0 = "lz.cast"(%x) {to = i32} : (tensor<4xi8>) -> tensor<4xi32>
  %1 = "lz.cast"(%0) {to = i64} : (tensor<4xi32>) -> tensor<4xi64>
  func.return %0, %1 : tensor<4xi32>, tensor<4xi64>
}
