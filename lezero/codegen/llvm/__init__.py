"""CPU code generation with llvmlite: LLVM IR built in Python, compiled at O3 for the host CPU."""
