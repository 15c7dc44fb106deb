"""The LLVM backend's tests (lezero/codegen/llvm), by the same names as its modules."""
