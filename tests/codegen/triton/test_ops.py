"""Every lz op of ``tests/support/op_samples.py`` on the cuda path, under ``TRITON_INTERPRET=1``: scheduled
for ``target="cuda"``, each GPU kernel lowered to Triton and run in the interpreter, compared
with the reference interpreter.  Every op's samples run on the GPU: ``unsupported_reason`` keeps
only instances past a lowering's limits on the CPU (a topk over a longer axis than one block,
tested in ``test_kernels.py``), and the samples are small."""
from __future__ import annotations

import numpy as np
import pytest

from lezero.codegen.triton.backend import unsupported_reason

from support.op_samples import ALL_SAMPLES, SAMPLES
from codegen.triton.triton_testing import check_triton

# Ops that become no Triton kernel at all: a transfer is a copy the runtime makes.
NO_KERNEL = {"lz.transfer"}


@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=lambda s: s.id)
def test_op_on_the_cuda_path(sample):
    arrays = sample.arrays(np.random.default_rng(0))
    kernels = check_triton(sample.module(arrays), arrays)
    if sample.op not in NO_KERNEL:
        assert kernels, "no kernel ran on the GPU"


@pytest.mark.parametrize("op_name", sorted(SAMPLES))
def test_every_op_runs_on_the_gpu(op_name):
    for sample in SAMPLES[op_name]:
        module = sample.module(sample.arrays(np.random.default_rng(0)))
        (op,) = [op for op in module.functions[0].entry_block.ops if op.name == op_name]
        assert unsupported_reason(op) is None, unsupported_reason(op)
