// --emit=asm: each kernel's machine code after O3 for the CPU --cpu names (LLVM's names) and,
// with --triple, another architecture, whatever the host is. The float32 GEMM's micro-kernel is
// 24 NEON fmla on 4-float vectors for AArch64 (8x3 vectors of the 32 registers), and AVX2 FMA on
// ymm for x86-64-v3, which has no AVX-512: never a zmm register.
// RUN: lezero-opt %s --emit=asm --triple=aarch64-linux-gnu --cpu=cortex-a72 | filecheck %s --check-prefix=A72
// RUN: lezero-opt %s --emit=asm --cpu=x86-64-v3 | filecheck %s --check-prefix=V3

module {
  func.func @mm(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %0 = "lz.matmul"(%a, %b) : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    func.return %0 : tensor<64x64xf32>
  }
}

// A72-LABEL: gemm_micro_kernel:
// A72-COUNT-24: fmla v{{[0-9]+}}.4s, v{{[0-9]+}}.4s, v{{[0-9]+}}
// A72: ret

// V3-NOT: zmm
// V3-LABEL: gemm_micro_kernel:
// V3: vfmadd{{[0-9]+}}ps {{.*}}%ymm{{[0-9]+}}
// V3-NOT: zmm
