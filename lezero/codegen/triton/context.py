"""The Triton side of a kernel being lowered: the source being built (``TritonCode``) and the
context every kind's lowering writes with (``lezero/codegen/kernel.py``'s, plus the body's lines,
the scalar builder and the value-at-index walk emitting Triton, ``value_at_index.py``).

``TritonContext`` holds one kernel: its buffers (``b0, b1, ...``: operands then results, then
``status`` for a kernel with bounds checks), the body's lines (``code``), the scalar builder and
the emitter.  A kind's lowering writes the body and returns its launch configurations;
``backend.lower_kernel`` wraps the body into a module with its signature and docstring.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from lezero.codegen import kernel
from lezero.codegen.triton.scalar_builder import TritonScalarBuilder
from lezero.codegen.triton.value_at_index import TritonIndex, TritonValueAtIndex
from lezero.ir.core import Operation

def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for 0): ``tl.arange`` extents must be powers of two."""
    return 1 << max(0, n - 1).bit_length()


class TritonCode:
    """Lines of a kernel body under construction, with fresh names (``x0``, ``t3``, ``idx1``)."""

    def __init__(self, indent: int = 1):
        self.lines: list[str] = []
        self.depth = indent
        self.counters: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        """``prefix`` and a number; a prefix that ends in a digit (a coordinate ``i1``) is itself
        the first time, then ``i1_1``, ``i1_2``."""
        n = self.counters.get(prefix, 0)
        self.counters[prefix] = n + 1
        if prefix[-1].isdigit():
            return prefix if n == 0 else f"{prefix}_{n}"
        return f"{prefix}{n}"

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def assign(self, prefix: str, expr: str) -> str:
        name = self.fresh(prefix)
        self.line(f"{name} = {expr}")
        return name

    @contextmanager
    def block(self, header: str):
        """``header`` (a ``for``/``if`` line) and the lines written inside the ``with``, indented."""
        self.line(header)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def text(self) -> str:
        return "\n".join(self.lines)


class TritonContext(kernel.KernelContext):
    """One kernel being lowered: buffers ``b0..`` (operands then results), the body being written,
    its scalar builder, index materializer and emitter."""

    def __init__(self, kernel_op: Operation, name: str, target: str = "cuda"):
        super().__init__(kernel_op, name, target)
        self.code = TritonCode()
        self.s = TritonScalarBuilder(self.code)
        self.extra_helpers: dict[str, str] = {}  # name -> source of a kernel-specific @triton.jit helper
        self.index = TritonIndex(self.code, self.s)
        self.bind_buffers([f"b{k}" for k in range(len(kernel_op.operands) + len(kernel_op.results))])
        self.emitter = TritonValueAtIndex(self.code, self.s, self.index,
                                          dict(zip(self.body.args, self.operand_buffers)), target=target,
                                          checks=self.checks)

    @property
    def buffer_names(self) -> list[str]:
        """The kernel's pointer parameters: operands, results, then the status buffer if any."""
        return [b.pointer for b in self.operand_buffers + self.result_buffers] + \
            (["status"] if self.checks is not None else [])

    def index_type(self) -> str:
        """``tl.int64`` when some buffer has 2^31 elements or more (offsets overflow int32)."""
        big = any(math.prod(b.type.shape) >= 2 ** 31 for b in self.operand_buffers + self.result_buffers)
        return "tl.int64" if big else "tl.int32"
