// --emit=dot: one Graphviz digraph per function; arguments are ellipses, ops boxes (constants
// with their type), the return a doubleoctagon; an edge per operand, labelled with its type.
// RUN: lezero-opt %s --emit=dot | filecheck %s
// RUN: lezero-opt %s -p canonicalize --emit=dot | filecheck %s --check-prefix=CANON

// CHECK-LABEL: digraph "mlp" {
// CHECK-NEXT:   rankdir=TB;
// CHECK-NEXT:   node [fontname="monospace", fontsize=10];
// CHECK-NEXT:   edge [fontname="monospace", fontsize=8];
// CHECK-NEXT:   arg0 [shape=ellipse, label="%arg0: tensor<2x3xf32>"];
// CHECK-NEXT:   arg1 [shape=ellipse, label="%arg1: tensor<3x4xf32>"];
// CHECK-NEXT:   op0 [shape=box, label="lz.matmul"];
// CHECK-NEXT:   arg0 -> op0 [label="tensor<2x3xf32>"];
// CHECK-NEXT:   arg1 -> op0 [label="tensor<3x4xf32>"];
// CHECK-NEXT:   op1 [shape=box, label="lz.constant\ntensor<f32>"];
// CHECK-NEXT:   op2 [shape=box, label="lz.mul"];
// CHECK-NEXT:   op0 -> op2 [label="tensor<2x4xf32>"];
// CHECK-NEXT:   op1 -> op2 [label="tensor<f32>"];
// CHECK-NEXT:   op3 [shape=box, label="lz.relu"];
// CHECK-NEXT:   op2 -> op3 [label="tensor<2x4xf32>"];
// CHECK-NEXT:   op4 [shape=doubleoctagon, label="return"];
// CHECK-NEXT:   op3 -> op4 [label="tensor<2x4xf32>"];
// CHECK-NEXT: }
// The picture is of the IR after the pipeline: x*1 is gone.
// CANON-LABEL: digraph "mlp" {
// CANON-NOT: lz.mul
// CANON-NOT: lz.constant
// CANON: op0 [shape=box, label="lz.matmul"];
// CANON: op1 [shape=box, label="lz.relu"];
// CANON-NEXT: op0 -> op1 [label="tensor<2x4xf32>"];
// CANON-NEXT: op2 [shape=doubleoctagon, label="return"];
// CANON-NEXT: op1 -> op2 [label="tensor<2x4xf32>"];
// CANON-NEXT: }
func.func @mlp(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %one = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %1 = "lz.mul"(%0, %one) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %2 = "lz.relu"(%1) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %2 : tensor<2x4xf32>
}

// A value used twice gives two edges; a second function is a second digraph.
// CHECK-LABEL: digraph "square" {
// CHECK:        arg0 [shape=ellipse, label="%arg0: tensor<4xf32>"];
// CHECK-NEXT:   op0 [shape=box, label="lz.mul"];
// CHECK-NEXT:   arg0 -> op0 [label="tensor<4xf32>"];
// CHECK-NEXT:   arg0 -> op0 [label="tensor<4xf32>"];
// CHECK-NEXT:   op1 [shape=doubleoctagon, label="return"];
// CHECK-NEXT:   op0 -> op1 [label="tensor<4xf32>"];
// CHECK-NEXT: }
// CHECK-NOT: {{.}}
func.func @square(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "lz.mul"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
