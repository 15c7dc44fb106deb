// --print-op-generic prints every op, func.func and builtin.module too, in the generic form;
// that text parses again, and prints back to the same custom form and the same generic form.
// RUN: lezero-opt %s --print-op-generic | filecheck %s
// RUN: lezero-opt %s --print-op-generic | lezero-opt | filecheck %s --check-prefix=CUSTOM
// RUN: lezero-opt %s > %t.custom && lezero-opt %s --print-op-generic | lezero-opt > %t.again && diff %t.custom %t.again
// RUN: lezero-opt %s --print-op-generic > %t.g1 && lezero-opt %t.g1 --print-op-generic > %t.g2 && diff %t.g1 %t.g2

// CHECK:      "builtin.module"() ({
// CHECK-NEXT:   "func.func"() <{function_type = (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x2xf32>, sym_name = "f"}> ({
// CHECK-NEXT:   ^bb0(%[[X:[^:]+]]: tensor<2x3xf32>, %[[B:[^:]+]]: tensor<3xf32>):
// CHECK-NEXT:     %[[C:.+]] = "lz.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
// CHECK-NEXT:     %[[A:.+]] = "lz.add"(%[[X]], %[[B]]) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:     %[[M:.+]] = "lz.mul"(%[[A]], %[[C]]) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:     %[[T:.+]] = "lz.transpose"(%[[M]]) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:     %[[R:.+]] = "func.call"(%[[T]]) {callee = @g} : (tensor<3x2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:     "func.return"(%[[R]]) : (tensor<3x2xf32>) -> ()
// CHECK-NEXT:   }) : () -> ()
// CHECK-NEXT:   "func.func"() <{function_type = (tensor<3x2xf32>) -> tensor<3x2xf32>, sym_name = "g", sym_visibility = "private"}> ({
// CHECK-NEXT:   ^bb0(%[[Y:[^:]+]]: tensor<3x2xf32>):
// CHECK-NEXT:     %[[S:.+]] = "lz.softmax"(%[[Y]]) {axis = 0 : i64} : (tensor<3x2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:     "func.return"(%[[S]]) : (tensor<3x2xf32>) -> ()
// CHECK-NEXT:   }) : () -> ()
// CHECK-NEXT: }) : () -> ()
// CHECK-NOT: func.func @

// CUSTOM:      module {
// CUSTOM-NEXT:   func.func @f(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>) -> tensor<3x2xf32> {
// CUSTOM-NEXT:     %0 = "lz.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
// CUSTOM-NEXT:     %1 = "lz.add"(%arg0, %arg1)
// CUSTOM-NEXT:     %2 = "lz.mul"(%1, %0)
// CUSTOM-NEXT:     %3 = "lz.transpose"(%2) {perm = array<i64: 1, 0>}
// CUSTOM-NEXT:     %4 = "func.call"(%3) {callee = @g}
// CUSTOM-NEXT:     func.return %4 : tensor<3x2xf32>
// CUSTOM-NEXT:   }
// CUSTOM-NEXT:   func.func private @g(%arg0: tensor<3x2xf32>) -> tensor<3x2xf32> {
// CUSTOM-NEXT:     %0 = "lz.softmax"(%arg0) {axis = 0 : i64}
// CUSTOM-NEXT:     func.return %0 : tensor<3x2xf32>
// CUSTOM-NEXT:   }
// CUSTOM-NEXT: }

func.func @f(%x: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<3x2xf32> {
  %c = "lz.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %0 = "lz.add"(%x, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = "lz.mul"(%0, %c) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = "lz.transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %3 = "func.call"(%2) {callee = @g} : (tensor<3x2xf32>) -> tensor<3x2xf32>
  func.return %3 : tensor<3x2xf32>
}

func.func private @g(%y: tensor<3x2xf32>) -> tensor<3x2xf32> {
  %0 = "lz.softmax"(%y) {axis = 0 : i64} : (tensor<3x2xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}
