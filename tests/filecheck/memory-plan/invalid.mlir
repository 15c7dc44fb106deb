// memory-plan needs static shapes, and kernels (it runs after fuse).
// RUN: lezero-opt %s -p fuse,memory-plan --split-input-file --verify-diagnostics

func.func @dynamic(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{memory-plan needs static shapes; run shape-infer after binding the dims ('lz_fused_exp_0' gives tensor<?x4xf32>)}}
  %0 = "lz.exp"(%x) : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %1 = "lz.neg"(%0) : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %1 : tensor<?x4xf32>
}
