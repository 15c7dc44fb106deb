"""Tests of the code generators, mirroring lezero/codegen: the neutral core here, each backend in
its folder (llvm/, triton/) by the same file names; ``kernel_testing`` builds kernels for both."""
