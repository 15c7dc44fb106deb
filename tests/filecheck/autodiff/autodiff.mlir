// autodiff: each function gets @<name>_grad(args, cotangents) -> (results, gradients), built from
// the ops' gradient rules, walked in reverse; canonicalize and cse tidy it. The original stays.
// RUN: lezero-opt %s -p 'autodiff{wrt=0,1},canonicalize,cse' | filecheck %s
// RUN: lezero-opt %s -p 'autodiff{wrt=1 func=matmul}' | filecheck %s --check-prefix=ONE

// add: the cotangent goes to both operands; the broadcast bias gets it summed over the batch.
// CHECK-LABEL: func.func @add(
// CHECK-LABEL: func.func @add_grad
// CHECK-SAME: (%[[X:[^:]+]]: tensor<3x4xf32>, %[[B:[^:]+]]: tensor<4xf32>, %[[DY:[^:]+]]: tensor<3x4xf32>)
// CHECK-SAME: -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xf32>)
// CHECK-NEXT: %[[Y:.+]] = "lz.add"(%[[X]], %[[B]])
// CHECK-NEXT: %[[DB:.+]] = "lz.reduce_sum"(%[[DY]]) {axes = array<i64: 0>} : (tensor<3x4xf32>) -> tensor<4xf32>
// CHECK-NEXT: func.return %[[Y]], %[[DY]], %[[DB]] :
func.func @add(%x: tensor<3x4xf32>, %b: tensor<4xf32>) -> tensor<3x4xf32> {
  %0 = "lz.add"(%x, %b) : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  func.return %0 : tensor<3x4xf32>
}

// mul: each operand's gradient is the cotangent times the other operand.
// CHECK-LABEL: func.func @mul_grad
// CHECK-SAME: (%[[X:[^:]+]]: tensor<3x4xf32>, %[[Y:[^:]+]]: tensor<3x4xf32>, %[[DZ:[^:]+]]: tensor<3x4xf32>)
// CHECK-NEXT: %[[Z:.+]] = "lz.mul"(%[[X]], %[[Y]])
// CHECK-NEXT: %[[DX:.+]] = "lz.mul"(%[[DZ]], %[[Y]])
// CHECK-NEXT: %[[DYV:.+]] = "lz.mul"(%[[DZ]], %[[X]])
// CHECK-NEXT: func.return %[[Z]], %[[DX]], %[[DYV]] :
func.func @mul(%x: tensor<3x4xf32>, %y: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "lz.mul"(%x, %y) : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  func.return %0 : tensor<3x4xf32>
}

// matmul: dx = dy @ w^T, dw = x^T @ dy.
// CHECK-LABEL: func.func @matmul_grad
// CHECK-SAME: (%[[X:[^:]+]]: tensor<8x16xf32>, %[[W:[^:]+]]: tensor<16x4xf32>, %[[DY:[^:]+]]: tensor<8x4xf32>)
// CHECK-NEXT: %[[Y:.+]] = "lz.matmul"(%[[X]], %[[W]])
// CHECK-NEXT: %[[WT:.+]] = "lz.transpose"(%[[W]]) {perm = array<i64: 1, 0>} : (tensor<16x4xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[DX:.+]] = "lz.matmul"(%[[DY]], %[[WT]]) : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %[[XT:.+]] = "lz.transpose"(%[[X]]) {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[DW:.+]] = "lz.matmul"(%[[XT]], %[[DY]]) : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
// CHECK-NEXT: func.return %[[Y]], %[[DX]], %[[DW]] :
// With wrt=1 only, the lhs gradient is never built.
// ONE-LABEL: func.func @matmul_grad
// ONE-SAME: -> (tensor<8x4xf32>, tensor<16x4xf32>)
// ONE-NEXT: "lz.matmul"
// ONE-NEXT: "lz.transpose"
// ONE-NEXT: "lz.matmul"
// ONE-NEXT: func.return
// ONE-NOT: func.func @add_grad
func.func @matmul(%x: tensor<8x16xf32>, %w: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}

// relu: the cotangent where the result is positive (PyTorch's choice: 0 at 0); %unused gets zeros.
// CHECK-LABEL: func.func @relu_grad
// CHECK-SAME: (%[[X:[^:]+]]: tensor<5xf32>, %[[U:[^:]+]]: tensor<5xf32>, %[[DY:[^:]+]]: tensor<5xf32>)
// CHECK-NEXT: %[[Y:.+]] = "lz.relu"(%[[X]])
// CHECK-NEXT: %[[ZERO:.+]] = "lz.constant"() {value = dense<0.0> : tensor<f32>}
// CHECK-NEXT: %[[POS:.+]] = "lz.cmp"(%[[Y]], %[[ZERO]]) {predicate = "gt"}
// CHECK-NEXT: %[[DX:.+]] = "lz.select"(%[[POS]], %[[DY]], %[[ZERO]])
// CHECK-NEXT: %[[ZEROS:.+]] = "lz.constant"() {value = dense<0.0> : tensor<5xf32>}
// CHECK-NEXT: func.return %[[Y]], %[[DX]], %[[ZEROS]] :
func.func @relu(%x: tensor<5xf32>, %unused: tensor<5xf32>) -> tensor<5xf32> {
  %0 = "lz.relu"(%x) : (tensor<5xf32>) -> tensor<5xf32>
  func.return %0 : tensor<5xf32>
}
