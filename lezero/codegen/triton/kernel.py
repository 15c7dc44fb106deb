"""What the Triton code generator hands to the runtime and to the tools: a ``TritonKernel``.

One ``lz.kernel`` (static shapes) becomes one Triton function in a Python module of its own
(``source``), plus how to launch it.  The function takes one pointer per buffer, operands then
results (``b0, b1, ...``, as the CPU ABI), then its ``tl.constexpr`` block sizes; every shape and
stride is baked into the source as a literal (the runtime specializes per shape, as on the CPU).
Buffers are contiguous, row-major, in the reference's storage, but for ``bf16``: 16 bits
(torch.bfloat16: the cuda runtime converts the host's float32 holding bf16 values, exactly);
``i1`` is one byte (torch.bool).

``configs[0]`` is the heuristic launch (what the interpreter and a first call use); on a real
GPU the runtime may time every config once and keep the fastest (autotuning).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LaunchConfig:
    """constexprs: the block sizes passed as keyword arguments; grid: the launch grid for them."""

    constexprs: dict
    grid: tuple
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class TritonKernel:
    """name: the ``@triton.jit`` function in ``source`` (the kernel's name made an identifier);
    source: a whole Python module (imports, helpers, the kernel) that reads like hand-written
    Triton; signature: argument name -> Triton type for ``triton.compile`` (``"*fp32"``, ``"i32"``,
    ``"constexpr"``); operand_types, result_types: the buffers' ``TensorType`` in ABI order;
    index_checks: None, or the bounds checks (``lezero/codegen/index_checks.py``) of a kernel that
    takes a ``status`` buffer (int64) after its results."""

    name: str
    source: str
    kind: str
    signature: dict
    configs: tuple
    operand_types: tuple
    result_types: tuple
    flops: int = 0
    bytes_accessed: int = 0
    notes: tuple = field(default=())
    index_checks: tuple | None = None
