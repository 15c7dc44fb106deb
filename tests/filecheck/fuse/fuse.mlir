// fuse: each group becomes one lz.kernel; the body keeps only constants, kernels and the return.
// RUN: lezero-opt %s -p partition,fuse | filecheck %s
// RUN: lezero-opt %s -p fuse | filecheck %s
// RUN: lezero-opt %s -p fuse > %t.1 && lezero-opt %t.1 > %t.2 && diff %t.1 %t.2

// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:[^:]+]]: tensor<64x784xf32>, %[[W1:[^:]+]]: tensor<784x256xf32>, %[[B1:[^:]+]]: tensor<256xf32>, %[[W2:[^:]+]]: tensor<256x10xf32>, %[[B2:[^:]+]]: tensor<10xf32>)
// CHECK-NEXT: %[[H:.+]] = "lz.kernel"(%[[X]], %[[W1]], %[[B1]]) ({
// CHECK-NEXT: ^bb0(%[[A0:[^:]+]]: tensor<64x784xf32>, %[[A1:[^:]+]]: tensor<784x256xf32>, %[[A2:[^:]+]]: tensor<256xf32>):
// CHECK-NEXT:   %[[M:.+]] = "lz.matmul"(%[[A0]], %[[A1]]) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
// CHECK-NEXT:   %[[S:.+]] = "lz.add"(%[[M]], %[[A2]]) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
// CHECK-NEXT:   %[[R:.+]] = "lz.relu"(%[[S]]) : (tensor<64x256xf32>) -> tensor<64x256xf32>
// CHECK-NEXT:   "lz.yield"(%[[R]]) : (tensor<64x256xf32>) -> ()
// CHECK-NEXT: }) {kind = "matmul", lz.stage = 0 : i64, name = "lz_fused_matmul_add_relu_0"} : (tensor<64x784xf32>, tensor<784x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
// CHECK-NEXT: %[[L:.+]] = "lz.kernel"(%[[H]], %[[W2]], %[[B2]]) ({
// CHECK: }) {kind = "matmul", lz.stage = 1 : i64, name = "lz_fused_matmul_add_1"}
// CHECK-NEXT: %[[P:.+]] = "lz.kernel"(%[[L]]) ({
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<64x10xf32>):
// CHECK-NEXT:   "lz.reduce_max"
// CHECK-NEXT:   "lz.sub"
// CHECK-NEXT:   "lz.exp"
// CHECK-NEXT:   "lz.reduce_sum"
// CHECK-NEXT:   "lz.div"
// CHECK-NEXT:   "lz.yield"
// CHECK-NEXT: }) {kind = "reduction", lz.stage = 2 : i64, name = "lz_fused_reduce_max_sub_exp_reduce_sum_div_2"}
// CHECK-NEXT: func.return %[[P]] : tensor<64x10xf32>
func.func @mlp(%x: tensor<64x784xf32>, %w1: tensor<784x256xf32>, %b1: tensor<256xf32>,
               %w2: tensor<256x10xf32>, %b2: tensor<10xf32>) -> tensor<64x10xf32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<64x256xf32>, tensor<256x10xf32>) -> tensor<64x10xf32>
  %4 = "lz.add"(%3, %b2) : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
  %5 = "lz.reduce_max"(%4) {axes = array<i64: 1>, keepdims = true} : (tensor<64x10xf32>) -> tensor<64x1xf32>
  %6 = "lz.sub"(%4, %5) : (tensor<64x10xf32>, tensor<64x1xf32>) -> tensor<64x10xf32>
  %7 = "lz.exp"(%6) : (tensor<64x10xf32>) -> tensor<64x10xf32>
  %8 = "lz.reduce_sum"(%7) {axes = array<i64: 1>, keepdims = true} : (tensor<64x10xf32>) -> tensor<64x1xf32>
  %9 = "lz.div"(%7, %8) : (tensor<64x10xf32>, tensor<64x1xf32>) -> tensor<64x10xf32>
  func.return %9 : tensor<64x10xf32>
}

// A splat constant is cloned into the kernel that reads it; a weight stays outside as an
// operand. A value also used outside the kernel is yielded, in program order.
// CHECK-LABEL: func.func @constants_and_yields
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
// CHECK-NEXT: %[[ROW:.+]] = "lz.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
// CHECK-NOT: dense<0.5
// CHECK-NEXT: %[[K:.+]]:2 = "lz.kernel"(%[[X]], %[[ROW]]) ({
// CHECK-NEXT: ^bb0(%[[A:[^:]+]]: tensor<2x3xf32>, %[[B:[^:]+]]: tensor<3xf32>):
// CHECK-NEXT:   %[[HALF:.+]] = "lz.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
// CHECK-NEXT:   %[[M:.+]] = "lz.mul"(%[[A]], %[[HALF]])
// CHECK-NEXT:   %[[S:.+]] = "lz.add"(%[[M]], %[[B]])
// CHECK-NEXT:   %[[E:.+]] = "lz.exp"(%[[S]])
// CHECK-NEXT:   "lz.yield"(%[[M]], %[[E]]) : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()
// CHECK-NEXT: }) {kind = "elementwise", lz.stage = 0 : i64, name = "lz_fused_mul_add_exp_3"}
// CHECK-NEXT: func.return %[[K]]#1, %[[K]]#0 : tensor<2x3xf32>, tensor<2x3xf32>
func.func @constants_and_yields(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %half = "lz.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %row = "lz.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %0 = "lz.mul"(%x, %half) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %1 = "lz.add"(%0, %row) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = "lz.exp"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %2, %0 : tensor<2x3xf32>, tensor<2x3xf32>
}

// Data movement sits in the kernel that reads it; the kernel's inputs come in first-use order.
// CHECK-LABEL: func.func @movement
// CHECK-SAME: (%[[X:[^:]+]]: tensor<3x4xf32>, %[[Y:[^:]+]]: tensor<4x3xf32>)
// CHECK-NEXT: %[[E:.+]] = "lz.kernel"(%[[X]]) ({
// CHECK: }) {kind = "elementwise", lz.stage = 0 : i64, name = "lz_fused_exp_4"}
// CHECK-NEXT: %[[T:.+]] = "lz.kernel"(%[[Y]], %[[E]]) ({
// CHECK-NEXT: ^bb0(%[[A:[^:]+]]: tensor<4x3xf32>, %[[B:[^:]+]]: tensor<3x4xf32>):
// CHECK-NEXT:   %[[N:.+]] = "lz.neg"(%[[A]])
// CHECK-NEXT:   %[[TR:.+]] = "lz.transpose"(%[[B]]) {perm = array<i64: 1, 0>}
// CHECK-NEXT:   "lz.add"(%[[TR]], %[[N]])
// CHECK: }) {kind = "elementwise", lz.stage = 1 : i64, name = "lz_fused_neg_transpose_add_5"}
func.func @movement(%x: tensor<3x4xf32>, %y: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %0 = "lz.exp"(%x) : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %1 = "lz.neg"(%y) : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %2 = "lz.transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %3 = "lz.add"(%2, %1) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  func.return %3 : tensor<4x3xf32>
}

// A conv reads batch norm's per-channel vectors through their reshapes to C x 1 x 1 in its
// epilogue: the reshapes are inside the conv kernel, whose inputs are the 1-D vectors.
// CHECK-LABEL: func.func @conv_batch_norm_relu
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x6x6xf32>, %[[W:[^:]+]]: tensor<4x3x3x3xf32>, %[[S:[^:]+]]: tensor<4xf32>, %[[B:[^:]+]]: tensor<4xf32>)
// CHECK-NEXT: %[[F:.+]] = "lz.kernel"(%[[S]]) ({
// CHECK: }) {kind = "elementwise", lz.stage = 0 : i64, name = "lz_fused_exp_6"}
// CHECK-NEXT: "lz.kernel"(%[[X]], %[[W]], %[[F]], %[[B]]) ({
// CHECK-NEXT: ^bb0(%[[XA:[^:]+]]: tensor<2x3x6x6xf32>, %[[WA:[^:]+]]: tensor<4x3x3x3xf32>, %[[FA:[^:]+]]: tensor<4xf32>, %[[BA:[^:]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[C:.+]] = "lz.conv2d"(%[[XA]], %[[WA]])
// CHECK-NEXT:   %[[FC:.+]] = "lz.reshape"(%[[FA]]) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
// CHECK-NEXT:   %[[BC:.+]] = "lz.reshape"(%[[BA]]) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
// CHECK-NEXT:   %[[M:.+]] = "lz.mul"(%[[C]], %[[FC]])
// CHECK-NEXT:   %[[A:.+]] = "lz.add"(%[[M]], %[[BC]])
// CHECK-NEXT:   %[[R:.+]] = "lz.relu"(%[[A]])
// CHECK-NEXT:   "lz.yield"(%[[R]])
// CHECK-NEXT: }) {kind = "conv", lz.stage = 1 : i64, name = "lz_fused_conv2d_reshape_mul_add_relu_7"}
func.func @conv_batch_norm_relu(%x: tensor<2x3x6x6xf32>, %w: tensor<4x3x3x3xf32>, %s: tensor<4xf32>,
                                %b: tensor<4xf32>) -> tensor<2x4x4x4xf32> {
  %0 = "lz.conv2d"(%x, %w) : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
  %f = "lz.exp"(%s) : (tensor<4xf32>) -> tensor<4xf32>
  %fc = "lz.reshape"(%f) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
  %bc = "lz.reshape"(%b) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
  %1 = "lz.mul"(%0, %fc) : (tensor<2x4x4x4xf32>, tensor<4x1x1xf32>) -> tensor<2x4x4x4xf32>
  %2 = "lz.add"(%1, %bc) : (tensor<2x4x4x4xf32>, tensor<4x1x1xf32>) -> tensor<2x4x4x4xf32>
  %3 = "lz.relu"(%2) : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  func.return %3 : tensor<2x4x4x4xf32>
}
