"""The GPU code generator: every kind of ``lz.kernel`` rendered as a Triton function.

Layout (the same file names as ``lezero/codegen/llvm`` for the same concern):

- ``backend.py``: the backend's contract (``lower_kernel(kernel_op) -> TritonKernel``,
  ``lower_module``, ``kernel_text`` for ``lezero-opt --emit=triton``, ``unsupported_reason``, which
  ``lezero/codegen/targets.py`` registers as target ``"cuda"`` with ``lezero.passes.placement``);
- ``kernel.py``: ``TritonKernel``/``LaunchConfig``, what lowering returns;
- ``context.py``: the source being built and the kernel being lowered;
- ``value_at_index.py``: index blocks and the value-at-index walk emitting Triton;
- ``scalar_builder.py``: the ``ScalarBuilder`` (``lezero/ir/scalar.py``) that writes Triton
  expressions, so each op's ``scalar`` facet lowers here as on the CPU;
- ``elementwise.py``, ``reduction.py``, ``pooling.py``, ``selection.py``, ``contraction.py``: the
  kernel kinds;
- ``jit.py``: source -> a launchable ``@triton.jit`` function (``TRITON_INTERPRET=1`` runs it on the
  CPU with torch CPU tensors), and ``triton.compile`` to PTX for ``GPUTarget("cuda", 90, 32)``.

Generating source needs no triton; ``jit.py`` imports it when a kernel is loaded or built.
"""
