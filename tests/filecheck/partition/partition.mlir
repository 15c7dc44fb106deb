// partition: each op gets lz.group (the kernel it will be), lz.group_kind and lz.stage (the
// topological generation of its group); constants stay outside every group.
// RUN: lezero-opt %s -p partition | filecheck %s

// A layer: the matmul takes its bias and activation as epilogue.
// CHECK-LABEL: func.func @linear_relu
func.func @linear_relu(%x: tensor<64x784xf32>, %w: tensor<784x256xf32>, %b: tensor<256xf32>) -> tensor<64x256xf32> {
  // CHECK: "lz.matmul"{{.*}} {lz.group = 0 : i64, lz.group_kind = "matmul", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.add"{{.*}} {lz.group = 0 : i64, lz.group_kind = "matmul", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.relu"{{.*}} {lz.group = 0 : i64, lz.group_kind = "matmul", lz.stage = 0 : i64}
  %0 = "lz.matmul"(%x, %w) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
  func.return %2 : tensor<64x256xf32>
}

// Softmax, decomposed: both reductions and the broadcast-back epilogue are one reduction kernel.
// CHECK-LABEL: func.func @softmax
func.func @softmax(%x: tensor<64x10xf32>) -> tensor<64x10xf32> {
  // CHECK-COUNT-5: lz.group = 0 : i64, lz.group_kind = "reduction", lz.stage = 0 : i64
  // CHECK-NEXT: func.return
  %0 = "lz.reduce_max"(%x) {axes = array<i64: 1>, keepdims = true} : (tensor<64x10xf32>) -> tensor<64x1xf32>
  %1 = "lz.sub"(%x, %0) : (tensor<64x10xf32>, tensor<64x1xf32>) -> tensor<64x10xf32>
  %2 = "lz.exp"(%1) : (tensor<64x10xf32>) -> tensor<64x10xf32>
  %3 = "lz.reduce_sum"(%2) {axes = array<i64: 1>, keepdims = true} : (tensor<64x10xf32>) -> tensor<64x1xf32>
  %4 = "lz.div"(%2, %3) : (tensor<64x10xf32>, tensor<64x1xf32>) -> tensor<64x10xf32>
  func.return %4 : tensor<64x10xf32>
}

// The transpose folds into the kernel that reads it (index arithmetic on a load); the exp it
// reads is a kernel of its own. The splat constant stays outside, unannotated.
// CHECK-LABEL: func.func @movement
func.func @movement(%x: tensor<3x4xf32>, %y: tensor<4x3xf32>) -> tensor<4x3xf32> {
  // CHECK: "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  // CHECK-NEXT: "lz.exp"{{.*}} {lz.group = 0 : i64, lz.group_kind = "elementwise", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.transpose"(%{{.*}}) {lz.group = 1 : i64, lz.group_kind = "elementwise", lz.stage = 1 : i64
  // CHECK-NEXT: "lz.add"{{.*}} {lz.group = 1 : i64, lz.group_kind = "elementwise", lz.stage = 1 : i64}
  // CHECK-NEXT: "lz.mul"{{.*}} {lz.group = 1 : i64, lz.group_kind = "elementwise", lz.stage = 1 : i64}
  %two = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "lz.exp"(%x) : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %1 = "lz.transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %2 = "lz.add"(%1, %y) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %3 = "lz.mul"(%2, %two) : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  func.return %3 : tensor<4x3xf32>
}

// x @ w.T: the matmul reads its weight through the transpose, which joins its kernel as the
// prologue (the GEMM packs w as it is stored), so w.T is never materialized.
// CHECK-LABEL: func.func @linear_transposed
func.func @linear_transposed(%x: tensor<64x784xf32>, %w: tensor<256x784xf32>, %b: tensor<256xf32>) -> tensor<64x256xf32> {
  // CHECK: "lz.transpose"(%{{.*}}) {lz.group = 0 : i64, lz.group_kind = "matmul", lz.stage = 0 : i64
  // CHECK-NEXT: "lz.matmul"{{.*}} {lz.group = 0 : i64, lz.group_kind = "matmul", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.add"{{.*}} {lz.group = 0 : i64, lz.group_kind = "matmul", lz.stage = 0 : i64}
  // CHECK-NEXT: func.return
  %wt = "lz.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<256x784xf32>) -> tensor<784x256xf32>
  %0 = "lz.matmul"(%x, %wt) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  func.return %1 : tensor<64x256xf32>
}

// Two independent branches share stage 0 (a runtime may run them at once); the reductions
// that join them are one kernel of stage 1.
// CHECK-LABEL: func.func @branches
func.func @branches(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>, %v: tensor<8x8xf32>) -> tensor<8xf32> {
  // CHECK: "lz.matmul"{{.*}} {lz.group = 0 : i64, lz.group_kind = "matmul", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.matmul"{{.*}} {lz.group = 1 : i64, lz.group_kind = "matmul", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.reduce_sum"{{.*}} lz.group = 2 : i64, lz.group_kind = "reduction", lz.stage = 1 : i64
  // CHECK-NEXT: "lz.reduce_sum"{{.*}} lz.group = 2 : i64, lz.group_kind = "reduction", lz.stage = 1 : i64
  // CHECK-NEXT: "lz.add"{{.*}} {lz.group = 2 : i64, lz.group_kind = "reduction", lz.stage = 1 : i64}
  %0 = "lz.matmul"(%x, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = "lz.matmul"(%x, %v) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = "lz.reduce_sum"(%0) {axes = array<i64: 1>} : (tensor<8x8xf32>) -> tensor<8xf32>
  %3 = "lz.reduce_sum"(%1) {axes = array<i64: 1>} : (tensor<8x8xf32>) -> tensor<8xf32>
  %4 = "lz.add"(%2, %3) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return %4 : tensor<8xf32>
}

// Pooling is a kernel of its own (kind single); max-ops caps a group.
// CHECK-LABEL: func.func @single
func.func @single(%x: tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32> {
  // CHECK: "lz.relu"{{.*}} {lz.group = 0 : i64, lz.group_kind = "elementwise", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.max_pool2d"{{.*}} lz.group = 1 : i64, lz.group_kind = "single", lz.stage = 1 : i64
  // CHECK-NEXT: "lz.exp"{{.*}} {lz.group = 2 : i64, lz.group_kind = "elementwise", lz.stage = 2 : i64}
  %0 = "lz.relu"(%x) : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %1 = "lz.max_pool2d"(%0) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32>
  %2 = "lz.exp"(%1) : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  func.return %2 : tensor<1x1x2x2xf32>
}

// Batch norm after a conv, decomposed: the per-channel factor and shift are a kernel of their own
// (1-D), and the conv kernel reads them through their reshapes to C x 1 x 1, index arithmetic on
// the loads in its epilogue, rather than two reshape kernels.
// CHECK-LABEL: func.func @conv_batch_norm_relu
func.func @conv_batch_norm_relu(%x: tensor<2x3x6x6xf32>, %w: tensor<4x3x3x3xf32>, %s: tensor<4xf32>,
                                %b: tensor<4xf32>) -> tensor<2x4x4x4xf32> {
  // CHECK: "lz.conv2d"{{.*}} {lz.group = 1 : i64, lz.group_kind = "conv", lz.stage = 1 : i64}
  // CHECK-NEXT: "lz.exp"{{.*}} {lz.group = 0 : i64, lz.group_kind = "elementwise", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.reshape"{{.*}} {lz.group = 1 : i64, lz.group_kind = "conv", lz.stage = 1 : i64
  // CHECK-NEXT: "lz.reshape"{{.*}} {lz.group = 1 : i64, lz.group_kind = "conv", lz.stage = 1 : i64
  // CHECK-NEXT: "lz.mul"{{.*}} {lz.group = 1 : i64, lz.group_kind = "conv", lz.stage = 1 : i64}
  // CHECK-NEXT: "lz.add"{{.*}} {lz.group = 1 : i64, lz.group_kind = "conv", lz.stage = 1 : i64}
  // CHECK-NEXT: "lz.relu"{{.*}} {lz.group = 1 : i64, lz.group_kind = "conv", lz.stage = 1 : i64}
  // CHECK-NEXT: func.return
  %0 = "lz.conv2d"(%x, %w) : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
  %f = "lz.exp"(%s) : (tensor<4xf32>) -> tensor<4xf32>
  %fc = "lz.reshape"(%f) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
  %bc = "lz.reshape"(%b) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
  %1 = "lz.mul"(%0, %fc) : (tensor<2x4x4x4xf32>, tensor<4x1x1xf32>) -> tensor<2x4x4x4xf32>
  %2 = "lz.add"(%1, %bc) : (tensor<2x4x4x4xf32>, tensor<4x1x1xf32>) -> tensor<2x4x4x4xf32>
  %3 = "lz.relu"(%2) : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  func.return %3 : tensor<2x4x4x4xf32>
}

// The same per-channel reshape joins an elementwise kernel (it need not have the iteration
// space's shape when nothing outside reads it) and a reduction kernel (group norm's reshape of
// its input to N x G x rest, and the scale's), always reading from memory.
// CHECK-LABEL: func.func @moved_operands
func.func @moved_operands(%x: tensor<2x4x3x3xf32>, %s: tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<2x2x18xf32>) {
  // CHECK: "lz.reshape"{{.*}} {lz.group = 0 : i64, lz.group_kind = "reduction", lz.stage = 0 : i64
  // CHECK-NEXT: "lz.reduce_mean"{{.*}} lz.group = 0 : i64, lz.group_kind = "reduction", lz.stage = 0 : i64
  // CHECK-NEXT: "lz.sub"{{.*}} {lz.group = 0 : i64, lz.group_kind = "reduction", lz.stage = 0 : i64}
  // CHECK-NEXT: "lz.reshape"{{.*}} {lz.group = 1 : i64, lz.group_kind = "elementwise", lz.stage = 0 : i64
  // CHECK-NEXT: "lz.mul"{{.*}} {lz.group = 1 : i64, lz.group_kind = "elementwise", lz.stage = 0 : i64}
  %g = "lz.reshape"(%x) {shape = array<i64: 2, 2, 18>} : (tensor<2x4x3x3xf32>) -> tensor<2x2x18xf32>
  %m = "lz.reduce_mean"(%g) {axes = array<i64: 2>, keepdims = true} : (tensor<2x2x18xf32>) -> tensor<2x2x1xf32>
  %c = "lz.sub"(%g, %m) : (tensor<2x2x18xf32>, tensor<2x2x1xf32>) -> tensor<2x2x18xf32>
  %sc = "lz.reshape"(%s) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
  %y = "lz.mul"(%x, %sc) : (tensor<2x4x3x3xf32>, tensor<4x1x1xf32>) -> tensor<2x4x3x3xf32>
  func.return %y, %c : tensor<2x4x3x3xf32>, tensor<2x2x18xf32>
}
