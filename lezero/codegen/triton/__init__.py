"""The GPU code generator: every kind of ``lz.kernel`` rendered as a Triton function.

Layout (one module per concern, as ``lezero/codegen/llvm``):

- ``kernel.py``: ``TritonKernel``/``LaunchConfig``, what lowering returns;
- ``lower_kernel.py``: ``lower_kernel(kernel_op) -> TritonKernel`` by kind; ``unsupported_reason``
  (registered as target ``"cuda"`` in ``lezero.passes.placement``, so ``partition{target=cuda}``
  places the rest on the CPU);
- ``emitter.py``: the source being built, index blocks, and the value-at-index walk emitting Triton;
- ``scalar_builder.py``: the ``ScalarBuilder`` (``lezero/ir/scalar.py``) that writes Triton
  expressions, so each op's ``scalar`` facet lowers here as on the CPU;
- ``elementwise.py``, ``reduction.py``, ``pooling.py``, ``contraction.py``: the kernel kinds;
- ``jit.py``: source -> a launchable ``@triton.jit`` function (``TRITON_INTERPRET=1`` runs it on the
  CPU with torch CPU tensors), and ``triton.compile`` to PTX for ``GPUTarget("cuda", 90, 32)``.

Generating source needs no triton; ``jit.py`` imports it when a kernel is loaded or built.
"""
from lezero.codegen.triton.lower_kernel import unsupported_reason
from lezero.passes.placement import register_target

register_target("cuda", unsupported_reason)
