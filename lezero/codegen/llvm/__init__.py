"""CPU code generation with llvmlite: LLVM IR built in Python, compiled at O3 for a CPU target.

Layout (the same file names as ``lezero/codegen/triton`` for the same concern): ``backend.py``
(the backend's contract: ``lower_kernel``, ``lower_module``, ``kernel_text``,
``unsupported_reason``), ``context.py``, ``value_at_index.py``, ``scalar_builder.py``, the kernel
kinds ``elementwise.py``, ``reduction.py``, ``pooling.py``, ``selection.py``, ``contraction.py``,
and ``jit.py``; backend-only: ``target.py`` (CPUs), ``cache_model.py`` and ``gemm.py`` (the
float32 GEMM, driven by ``contraction_gemm.py``), ``scalar_math.py``, ``loops.py``.
"""
