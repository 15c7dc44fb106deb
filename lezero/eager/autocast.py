"""The eager side of autocast: ``lz.autocast`` (``lezero.amp``) puts an ``AutocastState`` in
``Mode.autocast``, and the hot path (``lezero.eager.core.apply1``/``apply2``/``apply``) hands every op
the policy names to ``AutocastState.apply``, which casts its inputs as ``AUTOCAST_POLICY`` says
(the table the ``autocast`` pass reads: one table for eager and compiled code) and runs it.

Ops are cast by their eager name, so the composites that exist only here (``linear``,
``nll_loss``, ``group_norm``) get PyTorch's types before they become lz ops: ``F.linear`` under
``autocast("cpu")`` gives bf16, as torch's does, where its lz ops alone (a low matmul, then an add
of the f32 bias) would promote to f32.  The casts are ordinary recorded ops, so ``backward()``
differentiates through them (gradients of f32 parameters come back f32: the master weights stay
f32), and a trace under autocast records them: ``jit.trace`` and ``compile_train_step`` then run
the ``autocast`` pass over the graph, which types every lz op the same way and folds the casts
that cancel.  Outside an autocast region the hot path pays one class-attribute test.
"""
from __future__ import annotations

from lezero.eager import dtypes as _dt
from lezero.eager.core import Mode, Tensor, apply, cast_to
from lezero.passes.autocast import AUTOCAST_POLICY, LOW_TYPES, STATISTICS, operand_types_for

_BY_ELEMENT_TYPE = {d.element_type: d for d in _dt.ALL}


class AutocastState:
    """One autocast region's settings: ``device_type`` (whose tensors and whose lists) and the low
    ``dtype`` (``lz.bfloat16`` or ``lz.float16``)."""

    __slots__ = ("device_type", "dtype", "table")

    def __init__(self, device_type: str, dtype: "_dt.dtype"):
        if device_type not in AUTOCAST_POLICY:
            raise ValueError(f"autocast: device_type must be one of {', '.join(map(repr, AUTOCAST_POLICY))}, "
                             f"got {device_type!r}")
        if dtype.element_type.name not in LOW_TYPES:
            raise ValueError(f"autocast: dtype must be lz.bfloat16 or lz.float16, got {dtype}")
        self.device_type = device_type
        self.dtype = dtype
        self.table = AUTOCAST_POLICY[device_type]

    def apply(self, op, attrs: tuple, inputs: tuple):
        """Run ``op`` on ``inputs`` cast as its policy says (tensors on another device than the
        region's are left alone, as PyTorch's per-device autocast does)."""
        policy = self.table[op.name]
        tensors = [t if isinstance(t, Tensor) and t.dtype.is_floating_point else None for t in inputs]
        first = next((t for t in tensors if t is not None), None)
        Mode.autocast = None  # the op itself, and the casts, run as they are
        try:
            if first is None or first.device.type != self.device_type:
                return apply(op, attrs, *inputs)
            types = [None if t is None else t.dtype.element_type for t in tensors]
            wanted = operand_types_for(policy, types, self.dtype.element_type)
            cast = tuple(x if w is None else cast_to(x, _BY_ELEMENT_TYPE[w]) for x, w in zip(inputs, wanted))
            out = apply(op, attrs, *cast)
            if policy == STATISTICS:  # computed in f32, given in its input's type
                results = out if isinstance(out, tuple) else (out,)
                back = cast_to(results[0], first.dtype)
                out = (back, *results[1:]) if isinstance(out, tuple) else back
            return out
        finally:
            Mode.autocast = self
