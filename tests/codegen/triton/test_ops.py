"""Every lz op of ``tests/op_samples.py`` on the cuda path, under ``TRITON_INTERPRET=1``: scheduled
for ``target="cuda"``, each GPU kernel lowered to Triton and run in the interpreter, compared
with the reference interpreter.  An op the Triton code generator cannot run must say so through
``unsupported_reason`` (partition then places it on the CPU): those are listed here with their
reason, and an op that is neither runs nor listed fails."""
from __future__ import annotations

import numpy as np
import pytest

import lezero.codegen.triton  # noqa: F401  (registers the cuda target)
from lezero.codegen.pipeline import schedule
from lezero.codegen.triton.lower_kernel import unsupported_reason

from op_samples import ALL_SAMPLES, SAMPLES
from triton_testing import check_triton

# Ops placed on the CPU by partition{target=cuda}, and the word their reason must contain.
RUN_ON_CPU = {"lz.topk": "selection", "lz.scatter_nd": "scattered"}
# Ops that become no Triton kernel at all: a transfer is a copy the runtime makes.
NO_KERNEL = {"lz.transfer"}


@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=lambda s: s.id)
def test_op_on_the_cuda_path(sample):
    arrays = sample.arrays(np.random.default_rng(0))
    kernels = check_triton(sample.module(arrays), arrays)
    if sample.op in RUN_ON_CPU:
        assert all(sample.op.split(".")[1] not in k.name for k in kernels)
    elif sample.op not in NO_KERNEL:
        assert kernels, "no kernel ran on the GPU"


@pytest.mark.parametrize("op_name", sorted(SAMPLES))
def test_every_op_is_supported_or_placed_on_the_cpu(op_name):
    sample = SAMPLES[op_name][0]
    module = sample.module(sample.arrays(np.random.default_rng(0)))
    (op,) = [op for op in module.functions[0].entry_block.ops if op.name == op_name]
    reason = unsupported_reason(op)
    if op_name in RUN_ON_CPU:
        assert reason is not None and RUN_ON_CPU[op_name] in reason and op_name in reason
        scheduled = schedule(module, target="cuda")
        kernels = [k for k in scheduled.functions[0].entry_block.ops if k.name == "lz.kernel"]
        assert any(k.definition.attrs(k).device == "cpu" for k in kernels)
    else:
        assert reason is None, reason

