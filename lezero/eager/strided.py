"""Kernels on non-contiguous views (``lezero.eager.core.apply_strided``): how a one-op function
reads a view's memory in place instead of copying it.

A view's array (numpy's own view of its base's memory) is passed to the kernel as it is: the
launcher reads only its data pointer, its first element.  The function's argument is then the
memory the view spans, and the op reads it through the view's index map: ``lz.transpose`` of the
block when the view is a permutation of contiguous memory (``t()``, ``permute``; a matmul takes
it as its prologue, an elementwise kernel tiles it), else ``lz.as_strided`` (slices with steps,
diagonals, windows, stride-0 dims).  Both are data movement, which the op's kernel folds into its
loads, so no copy kernel runs.  An elementwise op whose strided inputs are all one permutation of
contiguous memory (``x.t() * 2``) runs on the memory in its own order and returns its result in
that layout, as PyTorch's does (strided results: the caller marks them).
"""
from __future__ import annotations

import numpy as np

from lezero.eager import device_arrays as _dev
from lezero.eager.dispatch import EagerOp, run_op, runner_for
from lezero.ir.opdef import ELEMENTWISE, lookup


def strided_runner(op: EagerOp, attrs: tuple, arrays: list, layouts: tuple):
    """``run(arrays) -> (result arrays, whether they are strided)`` for ``op`` on numpy arrays of
    these ``layouts`` (None: C-contiguous)."""
    readers = tuple(None if layout is None else strided_reader(a.shape, _dev.element_strides(a))
                    for a, layout in zip(arrays, layouts))
    permuted = {r[2] for r in readers if r is not None and r[0] == "transpose"}
    definition = lookup("lz." + op.name)
    if definition is not None and ELEMENTWISE in definition.traits and len(permuted) == 1 and \
            all(r is not None and r[0] == "transpose" or a.size == 1 for a, r in zip(arrays, readers)):
        (perm,) = permuted
        order = tuple(perm.index(d) for d in range(len(perm)))  # the view's dims in memory order

        def in_memory_order(arrays):
            blocks = [a.transpose(order) if a.size != 1 else a for a in arrays]
            return [r.transpose(perm) for r in run_op(op, attrs, blocks)], True
        return in_memory_order
    stand_ins = [a if r is None else np.empty(r[1], a.dtype) for a, r in zip(arrays, readers)]
    through = reading_through(op, readers)
    run = runner_for((through, attrs, *[x for a in stand_ins for x in (a.shape, a.dtype)]), through, attrs, stand_ins)
    return lambda arrays: (run(arrays), False)


def strided_reader(shape: tuple, strides: tuple) -> tuple:
    """How a kernel reads a view of ``shape`` and element ``strides`` from its first element:
    ``("transpose", block shape, perm)`` when its elements are one contiguous block in another
    dim order, else ``("as_strided", (extent,), shape, strides)``."""
    order = _dev.dense_order(shape, strides)
    if order is None:
        extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides))
        return ("as_strided", (extent,), tuple(shape), tuple(strides))
    return ("transpose", tuple(shape[d] for d in order), tuple(order.index(i) for i in range(len(shape))))


_READING: dict = {}


def reading_through(op: EagerOp, readers: tuple) -> EagerOp:
    """``op`` with its inputs read through ``readers`` (``strided_reader``; None: as it is)."""
    through = _READING.get((op, readers))
    if through is None:
        def emit(b, attrs, *values):
            read = []
            for v, r in zip(values, readers):
                if r is not None and r[0] == "transpose":
                    v = b.op("lz.transpose", v, perm=list(r[2]))
                elif r is not None:
                    v = b.op("lz.as_strided", v, shape=list(r[2]), strides=list(r[3]), offset=0)
                read.append(v)
            return op.emit(b, attrs, *read)
        through = _READING[(op, readers)] = EagerOp(op.name, emit, op.num_results)
    return through
