"""The Triton backend's tests (lezero/codegen/triton), run in Triton's interpreter."""
