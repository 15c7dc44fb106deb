"""Code generators: lz kernels to LLVM IR (CPU) and Triton (GPU)."""
