"""The backend registry: which compilation targets exist and which code generator each one is.

    "cpu"  -> lezero.codegen.llvm.backend    (LLVM IR through llvmlite)
    "cuda" -> lezero.codegen.triton.backend  (Triton; TRITON_INTERPRET=1 runs it on the CPU)

A backend module is imported the first time ``backend(target)`` asks for it, and nowhere else:
the scheduler, the runtime and the tools ask here, so code generators are never imported to make
a target exist.  Loading a backend registers its ``unsupported_reason`` with
``lezero.passes.placement`` (the pass layer sits below code generation), so that
``partition{target=...}`` can place what the target cannot run on the CPU, and its
``fusion_facts`` (where it has them) with ``lezero.passes.fusion_cost``, so that partition's cost
model knows which of the backend's kernels a fusion would pick.

Every backend module exposes the same contract:

- ``lower_kernel(kernel_op, target)``: one scheduled ``lz.kernel`` as the backend's kernel (the
  CPU's ``LoweredKernel``, the GPU's ``TritonKernel``), through ``lezero/codegen/kernel.py``;
- ``lower_module(module)``: every kernel of ``module`` scheduled for the target, lowered;
- ``kernel_text(module)``: the generated code, for ``lezero-opt --emit=...``;
- ``unsupported_reason(op)``: None when the target runs ``op``, else a short reason;
- optionally ``fusion_facts``: a ``fusion_cost.BackendFacts``, what partition's cost model asks
  (which kernel a matmul runs with its operands' strides, the rows a reduction keeps for its
  later passes): a backend whose kernels a fusion can make slower has them.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from lezero.passes import fusion_cost, placement

BACKENDS = {
    "cpu": "lezero.codegen.llvm.backend",
    "cuda": "lezero.codegen.triton.backend",
}
TARGETS = tuple(BACKENDS)


def check_target(target: str) -> None:
    """``ValueError`` unless ``target`` is one of ``TARGETS``."""
    if target not in BACKENDS:
        raise ValueError(f"unknown target {target!r} (targets: {', '.join(map(repr, TARGETS))})")


def backend(target: str) -> ModuleType:
    """The backend module of ``target``, imported on first use and registered with placement
    (and with the fusion cost model, where it has ``fusion_facts``)."""
    check_target(target)
    module = importlib.import_module(BACKENDS[target])
    placement.register_target(target, module.unsupported_reason)
    facts = getattr(module, "fusion_facts", None)
    if facts is not None:
        fusion_cost.register_backend_facts(target, facts)
    return module


def register_all() -> None:
    """Load every backend, so that a pass pipeline may name any target (``lezero-opt``)."""
    for target in TARGETS:
        backend(target)
