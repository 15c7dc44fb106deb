"""From any lz function with static shapes to kernels: what every compilation runs before code
generation, whatever the target.

``KERNEL_PIPELINE`` is that pipeline (the runtime after binding the dims, ``lezero-opt --emit=...``,
the ONNX compiler): optimize, then partition, fuse and plan memory.  ``schedule(module,
target="cuda")`` partitions with ``target=cuda``: ops the target's backend cannot run are placed on
the CPU, with ``lz.transfer`` kernels between (``lezero.passes.placement``); the backend is asked
for through the registry (``lezero/codegen/targets.py``), never imported here.

``schedule`` verifies the IR once, after the pipeline, not after every pass as ``lezero-opt`` and
``run_pipeline`` do: the verifier between the ten passes was half of the pipeline's time (~0.5 s
of a warm ResNet-50 start).  ``LEZERO_VERIFY_EACH=1`` verifies after each pass again, naming the
pass that left invalid IR; the test suite sets it.
"""
from __future__ import annotations

import os

from lezero.codegen import targets
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import IRError
from lezero.ir.types import TensorType
from lezero.ir.verifier import verify
from lezero.passes import run_pipeline
from lezero.passes.memory_plan import ARENA_SIZE_ATTR

KERNEL_PIPELINE = ("shape-infer,decompose,canonicalize,cse,constant-fold,dce,shape-infer,"
                   "partition,fuse,memory-plan")


def kernel_pipeline(target: str = "cpu") -> str:
    """``KERNEL_PIPELINE`` partitioning for ``target``."""
    targets.check_target(target)
    targets.backend(target)  # registers what it runs with placement, its fusion facts with partition's cost model
    if target == "cpu":
        return KERNEL_PIPELINE
    return KERNEL_PIPELINE.replace("partition,", f"partition{{target={target}}},")


def is_scheduled(module: ModuleOp, target: str = "cpu") -> bool:
    """Whether every function already holds only constants, kernels and its return (for a target
    other than the CPU: placed kernels, each with its ``device``)."""
    ops = [op for f in module.functions for op in f.entry_block.ops]
    return all(op.name in ("lz.constant", "lz.kernel", "func.return") for op in ops) and \
        all(ARENA_SIZE_ATTR in f.attributes for f in module.functions) and \
        (target == "cpu" or all("device" in op.attributes for op in ops if op.name == "lz.kernel"))


def schedule(module: ModuleOp, target: str = "cpu") -> ModuleOp:
    """Run ``kernel_pipeline(target)`` (unless the module is already scheduled for it: kernels
    scheduled for the CPU are placed again, each on the CPU, with transfers); every value must then
    have a static type."""
    if not is_scheduled(module, target):
        verify_each = os.environ.get("LEZERO_VERIFY_EACH", "") == "1"
        module = run_pipeline(module, kernel_pipeline(target), verify_each=verify_each)
        if not verify_each:
            verify(module)
    for f in module.functions:
        for op in f.entry_block.ops:
            for r in op.results:
                if isinstance(r.type, TensorType) and not r.type.is_static:
                    raise IRError(f"'{op.name}' op result {r.type} is dynamic: code generation needs static "
                                  "shapes (bind the dims first)", op.location)
    return module
