// Round trip of lz.transfer (partition{target=cuda} inserts it; see ../partition/placement.mlir),
// and of an lz.kernel with a device and the kind "transfer".
// RUN: lezero-opt %s | filecheck %s
// RUN: lezero-opt %s > %t.1 && lezero-opt %t.1 > %t.2 && diff %t.1 %t.2
// RUN: lezero-opt %s --print-op-generic > %t.3 && lezero-opt %t.3 --print-op-generic | diff %t.3 -

// CHECK-LABEL: func.func @transfers
func.func @transfers(%x: tensor<?x8xf32>, %i: tensor<3xi1>) -> (tensor<?x8xf32>, tensor<3xi1>, tensor<4xf32>) {
  // CHECK: %[[C:.*]] = "lz.transfer"(%{{.*}}) {device = "cpu"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %0 = "lz.transfer"(%x) {device = "cpu"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "lz.transfer"(%[[C]]) {device = "cuda"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = "lz.transfer"(%0) {device = "cuda"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "lz.transfer"(%{{.*}}) {device = "cuda"} : (tensor<3xi1>) -> tensor<3xi1>
  %2 = "lz.transfer"(%i) {device = "cuda"} : (tensor<3xi1>) -> tensor<3xi1>
  %c = "lz.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
  // CHECK: "lz.kernel"(%{{.*}}) ({
  // CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4xf32>):
  // CHECK-NEXT: %[[T:.*]] = "lz.transfer"(%[[A]]) {device = "cuda"} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: "lz.yield"(%[[T]]) : (tensor<4xf32>) -> ()
  // CHECK-NEXT: }) {device = "cuda", kind = "transfer", name = "lz_transfer_0"} : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "lz.kernel"(%c) ({
  ^bb0(%a: tensor<4xf32>):
    %t = "lz.transfer"(%a) {device = "cuda"} : (tensor<4xf32>) -> tensor<4xf32>
    "lz.yield"(%t) : (tensor<4xf32>) -> ()
  }) {device = "cuda", kind = "transfer", name = "lz_transfer_0"} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1, %2, %3 : tensor<?x8xf32>, tensor<3xi1>, tensor<4xf32>
}
