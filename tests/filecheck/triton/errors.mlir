// --emit picks the code, and the code its target: a --target that contradicts it is one error line,
// exit status 1, no output.
// RUN: not lezero-opt %s --target=cpu --emit=triton 2>&1 | filecheck %s --check-prefix=CPU-TRITON
// CPU-TRITON:      {{^}}lezero-opt: error: --emit=triton is code for cuda, not --target=cpu (use --emit=llvm or --emit=asm){{$}}
// CPU-TRITON-NOT: {{.}}
// RUN: not lezero-opt %s --target=cuda --emit=llvm 2>&1 | filecheck %s --check-prefix=CUDA-LLVM
// CUDA-LLVM: lezero-opt: error: --emit=llvm is code for cpu, not --target=cuda (use --emit=triton or --emit=ptx)
// RUN: not lezero-opt %s --target=cuda 2>&1 | filecheck %s --check-prefix=NO-EMIT
// NO-EMIT: lezero-opt: error: --target=cuda needs code to emit: --emit=llvm (cpu), --emit=triton or --emit=ptx (cuda)
//
// Code generation needs static shapes: the error points at the op, as the verifier's do.
// RUN: not lezero-opt %s --emit=triton 2>&1 | filecheck %s --check-prefix=DYNAMIC --strict-whitespace
// RUN: not lezero-opt %s --emit=ptx 2>&1 | filecheck %s --check-prefix=DYNAMIC --strict-whitespace
// DYNAMIC:      {{^}}{{.*}}errors.mlir:[[# @LINE + 5]]:3: error: pass 'memory-plan' failed: memory-plan needs static shapes; {{.*}}('lz_fused_exp_0' gives tensor<?x8xf32>)
// DYNAMIC-NEXT: {{^}}  %0 = "lz.exp"(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>{{$}}
// DYNAMIC-NEXT: {{^}}  ^{{$}}
// DYNAMIC-NOT:  {{.}}
func.func @dynamic(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "lz.exp"(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}
