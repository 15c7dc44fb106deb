"""Native executables and shared libraries that run without Python, from any lz module: the
ahead-of-time executor of an execution plan.  ``program`` (shapes bound, the plan as C-ready
data), ``build`` (LLVM objects, the C driver, the toolchain), ``driver`` (the generated C
tables) around ``runtime.c`` (the fixed C run loop, thread pool, C API and ``main``).
``lezero-compile`` is the command (``lezero/cli/compile.py``); ``lezero.onnx.native`` puts an
ONNX model in front."""
from lezero.runtime.native.build import BuildResult, build_native, compile_module_native, native_target  # noqa: F401
from lezero.runtime.native.program import NativeCompileError, ShapeBindingError  # noqa: F401
