// autodiff errors name the op (or the argument) and point at it.
// RUN: not lezero-opt %s -p autodiff --allow-unregistered-dialect 2>&1 | filecheck %s --strict-whitespace
// CHECK:      {{^}}{{.*}}errors.mlir:[[# @LINE + 8]]:3: error: pass 'autodiff' failed: no gradient rule for test.opaque
// CHECK-NEXT: {{^}}  %0 = "test.opaque"(%x) : (tensor<3xf32>) -> tensor<3xf32>{{$}}
// CHECK-NEXT: {{^}}  ^{{$}}
// CHECK-NOT: Traceback
//
// RUN: not lezero-opt %s -p 'autodiff{wrt=1}' --allow-unregistered-dialect 2>&1 | filecheck %s --check-prefix=WRT
// WRT: error: pass 'autodiff' failed: cannot differentiate @f with respect to argument #1 of type tensor<3xi32>: only float arguments have gradients
func.func @f(%x: tensor<3xf32>, %i: tensor<3xi32>) -> tensor<3xf32> {
  %0 = "test.opaque"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "lz.exp"(%0) : (tensor<3xf32>) -> tensor<3xf32>
  func.return %1 : tensor<3xf32>
}
