// decompose: each composite becomes exactly the primitives of its definition, in order, each
// carrying the composite's location; decompose{ops=...} touches only the ops named.
// RUN: lezero-opt %s -p decompose | filecheck %s
// RUN: lezero-opt %s -p 'decompose{ops=lz.softmax}' | filecheck %s --check-prefix=ONLY
// RUN: lezero-opt %s -p 'decompose{ops=lz.layer_norm,lz.batch_norm}' | filecheck %s --check-prefix=NORMS
// RUN: lezero-opt %s -p decompose --print-debuginfo | filecheck %s --check-prefix=LOC

// CHECK-LABEL: func.func @softmax
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x8xf32>)
// CHECK-NEXT: %[[MAX:.+]] = "lz.reduce_max"(%[[X]]) {axes = array<i64: 1>, keepdims = true} : (tensor<?x8xf32>) -> tensor<?x1xf32>
// CHECK-NEXT: %[[SH:.+]] = "lz.sub"(%[[X]], %[[MAX]]) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[E:.+]] = "lz.exp"(%[[SH]]) : (tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[S:.+]] = "lz.reduce_sum"(%[[E]]) {axes = array<i64: 1>, keepdims = true} : (tensor<?x8xf32>) -> tensor<?x1xf32>
// CHECK-NEXT: %[[R:.+]] = "lz.div"(%[[E]], %[[S]]) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: func.return %[[R]] : tensor<?x8xf32>
// ONLY-LABEL: func.func @softmax
// ONLY-NEXT: "lz.reduce_max"
// ONLY-NEXT: "lz.sub"
// ONLY-NEXT: "lz.exp"
// ONLY-NEXT: "lz.reduce_sum"
// ONLY-NEXT: "lz.div"
// ONLY-NEXT: func.return
// NORMS-LABEL: func.func @softmax
// NORMS-NEXT: "lz.softmax"
// LOC-LABEL: func.func @softmax
// LOC-COUNT-5: : (tensor<{{.*}}> loc("model.py":12:3){{$}}
// LOC-NEXT: func.return
func.func @softmax(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "lz.softmax"(%x) {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32> loc("model.py":12:3)
  func.return %0 : tensor<?x8xf32>
}

// The default axis is -1, and stays -1 in the reductions.
// CHECK-LABEL: func.func @log_softmax
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[MAX:.+]] = "lz.reduce_max"(%[[X]]) {axes = array<i64: -1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
// CHECK-NEXT: %[[SH:.+]] = "lz.sub"(%[[X]], %[[MAX]]) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[E:.+]] = "lz.exp"(%[[SH]]) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[S:.+]] = "lz.reduce_sum"(%[[E]]) {axes = array<i64: -1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
// CHECK-NEXT: %[[L:.+]] = "lz.log"(%[[S]]) : (tensor<4x1xf32>) -> tensor<4x1xf32>
// CHECK-NEXT: %[[R:.+]] = "lz.sub"(%[[SH]], %[[L]]) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: func.return %[[R]] : tensor<4x8xf32>
// ONLY-LABEL: func.func @log_softmax
// ONLY-NEXT: "lz.log_softmax"
// ONLY-NEXT: func.return
// LOC-LABEL: func.func @log_softmax
// LOC-COUNT-6: : (tensor<{{.*}}> loc("{{.*}}decompose.mlir":[[# @LINE + 3]]:3){{$}}
// LOC-NEXT: func.return
func.func @log_softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "lz.log_softmax"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// Normalizes over dims axis..rank-1 (here 1 and 2), biased variance, then * scale + bias.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x4xf32>, %[[W:[^:]+]]: tensor<3x4xf32>, %[[B:[^:]+]]: tensor<4xf32>)
// CHECK-NEXT: %[[MEAN:.+]] = "lz.reduce_mean"(%[[X]]) {axes = array<i64: 1, 2>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
// CHECK-NEXT: %[[C:.+]] = "lz.sub"(%[[X]], %[[MEAN]]) : (tensor<2x3x4xf32>, tensor<2x1x1xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[SQ:.+]] = "lz.mul"(%[[C]], %[[C]]) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[VAR:.+]] = "lz.reduce_mean"(%[[SQ]]) {axes = array<i64: 1, 2>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
// CHECK-NEXT: %[[EPS:.+]] = "lz.constant"() {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
// CHECK-NEXT: %[[VE:.+]] = "lz.add"(%[[VAR]], %[[EPS]]) : (tensor<2x1x1xf32>, tensor<f32>) -> tensor<2x1x1xf32>
// CHECK-NEXT: %[[INV:.+]] = "lz.rsqrt"(%[[VE]]) : (tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
// CHECK-NEXT: %[[N:.+]] = "lz.mul"(%[[C]], %[[INV]]) : (tensor<2x3x4xf32>, tensor<2x1x1xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[NW:.+]] = "lz.mul"(%[[N]], %[[W]]) : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[R:.+]] = "lz.add"(%[[NW]], %[[B]]) : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: func.return %[[R]] : tensor<2x3x4xf32>
// ONLY-LABEL: func.func @layer_norm
// ONLY-NEXT: "lz.layer_norm"
// ONLY-NEXT: func.return
// NORMS-LABEL: func.func @layer_norm
// NORMS-NOT: lz.layer_norm
// NORMS: func.return
// LOC-LABEL: func.func @layer_norm
// LOC-COUNT-10: : ({{.*}}) -> tensor<{{.*}}> loc("encoder.ln1"("model.py":40:7)){{$}}
// LOC-NEXT: func.return
func.func @layer_norm(%x: tensor<2x3x4xf32>, %w: tensor<3x4xf32>, %b: tensor<4xf32>) -> tensor<2x3x4xf32> {
  %0 = "lz.layer_norm"(%x, %w, %b) {axis = 1 : i64, epsilon = 0.25 : f32} : (tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32> loc("encoder.ln1"("model.py":40:7))
  func.return %0 : tensor<2x3x4xf32>
}

// Inference form: the per-channel factor scale * rsqrt(var + eps) and shift bias - mean * factor
// are computed on the C-vectors, reshaped to C x 1 x 1, and applied to x (channels are dim 1).
// CHECK-LABEL: func.func @batch_norm
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x8x4x4xf32>, %[[W:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>, %[[M:[^:]+]]: tensor<8xf32>, %[[V:[^:]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[EPS:.+]] = "lz.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
// CHECK-NEXT: %[[VE:.+]] = "lz.add"(%[[V]], %[[EPS]]) : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK-NEXT: %[[INV:.+]] = "lz.rsqrt"(%[[VE]]) : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[F:.+]] = "lz.mul"(%[[W]], %[[INV]]) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[MF:.+]] = "lz.mul"(%[[M]], %[[F]]) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[SH:.+]] = "lz.sub"(%[[B]], %[[MF]]) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[F3:.+]] = "lz.reshape"(%[[F]]) {shape = array<i64: -1, 1, 1>} : (tensor<8xf32>) -> tensor<8x1x1xf32>
// CHECK-NEXT: %[[SH3:.+]] = "lz.reshape"(%[[SH]]) {shape = array<i64: -1, 1, 1>} : (tensor<8xf32>) -> tensor<8x1x1xf32>
// CHECK-NEXT: %[[XF:.+]] = "lz.mul"(%[[X]], %[[F3]]) : (tensor<2x8x4x4xf32>, tensor<8x1x1xf32>) -> tensor<2x8x4x4xf32>
// CHECK-NEXT: %[[R:.+]] = "lz.add"(%[[XF]], %[[SH3]]) : (tensor<2x8x4x4xf32>, tensor<8x1x1xf32>) -> tensor<2x8x4x4xf32>
// CHECK-NEXT: func.return %[[R]] : tensor<2x8x4x4xf32>
// ONLY-LABEL: func.func @batch_norm
// ONLY-NEXT: "lz.batch_norm"
// ONLY-NEXT: func.return
// NORMS-LABEL: func.func @batch_norm
// NORMS-NOT: lz.batch_norm
// NORMS: func.return
// LOC-LABEL: func.func @batch_norm
// LOC-COUNT-10: ({{.*}}) -> tensor<{{.*}}> loc("{{.*}}decompose.mlir":[[# @LINE + 3]]:3){{$}}
// LOC-NEXT: func.return
func.func @batch_norm(%x: tensor<2x8x4x4xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>) -> tensor<2x8x4x4xf32> {
  %0 = "lz.batch_norm"(%x, %w, %b, %m, %v) {epsilon = 0.5 : f32} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x4x4xf32>
  func.return %0 : tensor<2x8x4x4xf32>
}

// Composites nested in a region are decomposed too; the users of a composite read its last
// primitive, and non-composite ops are untouched.
// CHECK-LABEL: func.func @in_kernel
// CHECK: "lz.kernel"
// CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<3xf32>):
// CHECK-NEXT: %[[MAX:.+]] = "lz.reduce_max"(%[[A]])
// CHECK-NEXT: %[[SH:.+]] = "lz.sub"(%[[A]], %[[MAX]])
// CHECK-NEXT: %[[E:.+]] = "lz.exp"(%[[SH]])
// CHECK-NEXT: %[[S:.+]] = "lz.reduce_sum"(%[[E]])
// CHECK-NEXT: %[[D:.+]] = "lz.div"(%[[E]], %[[S]])
// CHECK-NEXT: %[[T:.+]] = "lz.tanh"(%[[D]])
// CHECK-NEXT: "lz.yield"(%[[T]])
// CHECK-NOT: lz.softmax
func.func @in_kernel(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "lz.kernel"(%x) ({
  ^bb0(%a: tensor<3xf32>):
    %1 = "lz.softmax"(%a) : (tensor<3xf32>) -> tensor<3xf32>
    %2 = "lz.tanh"(%1) : (tensor<3xf32>) -> tensor<3xf32>
    "lz.yield"(%2) : (tensor<3xf32>) -> ()
  }) : (tensor<3xf32>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// A composite declared with a less refined result keeps that type on its last primitive, so
// its users (func.return here) still see exactly what they did.
// CHECK-LABEL: func.func @declared_type_kept
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xf32>) -> tensor<?x8xf32>
// CHECK: %[[E:.+]] = "lz.exp"({{.*}}) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[S:.+]] = "lz.reduce_sum"(%[[E]]) {{.*}} -> tensor<4x1xf32>
// CHECK-NEXT: %[[R:.+]] = "lz.div"(%[[E]], %[[S]]) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: func.return %[[R]] : tensor<?x8xf32>
func.func @declared_type_kept(%x: tensor<4x8xf32>) -> tensor<?x8xf32> {
  %0 = "lz.softmax"(%x) : (tensor<4x8xf32>) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}
