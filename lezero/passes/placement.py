"""Which ops each compilation target can run, and where each op of a function runs.

**The registry** ``partition{target=...}`` reads: each target with a function that says why it
cannot run an op (None when it can).  Passes sit below code generators, so the code generation
layer fills it: its backend registry (``lezero/codegen/targets.py``) registers a target when it
loads the target's backend, which ``schedule(module, target)`` and ``lezero-opt`` do; the CPU,
which runs every op, is always here.

**Placement** (``place_function``, run by ``partition`` for a target other than the CPU): every
op runs on the target unless the target cannot run it; then it runs on the CPU instead
(automatic fallback), and the reason is logged on the ``fusion`` debug channel
(``lezero-opt --debug=fusion``).  Where values live:

- function arguments and results: on the target (the runtime moves the caller's data in and out);
- an op's results: on its device; an ``lz.kernel``'s: on its ``device`` attribute's;
- a control-flow op (``lz.for``, ``lz.while``, ``lz.if``): on the CPU, its regions too (the
  runtime's host step, shared by every executor);
- ``lz.constant`` values: wherever they are read (the runtime keeps a copy on each device that
  reads one), so they never need a transfer.

Every edge between devices gets an explicit ``lz.transfer {device = D}`` (one per value and
destination, placed before its first reader; the returned values' before ``func.return``),
which partition then makes a kernel of kind ``transfer`` of its own.  An ``lz.transfer`` already
in the function reads its operand wherever it lives and places its result on its ``device``.
"""
from __future__ import annotations

import logging
from typing import Callable

from lezero.ir.attributes import StringAttr
from lezero.ir.core import FuncOp, Operation, Value
from lezero.ir.diagnostics import IRError
from lezero.passes.pass_base import debug_channel

HOST = "cpu"
TRANSFER = "lz.transfer"
# Ops the runtime runs on the host around their regions' kernels (lezero/runtime/plan.py): kept as
# they are, like an lz.kernel, between the kernels of the function; placed on the CPU, their
# regions scheduled for it (lezero/codegen/schedule.py).
CONTROL_FLOW_OPS = frozenset({"lz.for", "lz.while", "lz.if"})

FUSION_LOG = debug_channel("fusion")

_TARGETS: dict[str, Callable[[Operation], "str | None"]] = {HOST: lambda op: None}


def register_target(name: str, unsupported_reason: Callable[[Operation], "str | None"]) -> None:
    """``unsupported_reason(op)``: None if target ``name`` runs ``op``, else a short reason
    (``"lz.topk over an axis of 5000 > 4096 elements runs on the CPU"``)."""
    _TARGETS[name] = unsupported_reason


def known_targets() -> tuple:
    return tuple(sorted(_TARGETS))


def unsupported_reason(target: str, op: Operation) -> "str | None":
    """Why ``target`` cannot run ``op`` (None: it can). ``KeyError`` for an unregistered target."""
    return _TARGETS[target](op)


def check_target(target: str, location=None) -> None:
    """``IRError`` unless ``target`` is registered, saying what registers it."""
    if target in _TARGETS:
        return
    raise IRError(f"target '{target}' is not registered (targets: {', '.join(known_targets())}): "
                  "lezero.codegen.targets.backend(target) loads a backend and registers its target", location)


def _describe(op: Operation) -> str:
    flc = op.location.file_line_col()
    return f"'{op.name}' (line {flc.line})" if flc is not None else f"'{op.name}'"


def place_function(func: FuncOp, target: str) -> dict[int, str]:
    """Place every op of ``func`` for ``target`` and insert the transfers (see the module
    docstring); returns the device of each op that is not a constant or the return, by ``id``."""
    check_target(target, func.location)
    body = func.entry_block
    log = FUSION_LOG.isEnabledFor(logging.DEBUG)
    where = f"@{func.sym_name}: "
    device: dict[int, str] = {}
    for op in body.ops:
        if op.name in ("lz.constant", "func.return"):
            continue
        if op.name == "lz.kernel":
            device[id(op)] = op.definition.attrs(op).device
        elif op.name == TRANSFER:
            device[id(op)] = op.definition.attrs(op).device
        elif op.name in CONTROL_FLOW_OPS:
            device[id(op)] = HOST
            if log:
                FUSION_LOG.debug("%splaced %s on %s: control flow runs on the host", where, _describe(op), HOST)
        elif op.definition is None:
            device[id(op)] = target  # partition refuses it, naming it
        else:
            reason = unsupported_reason(target, op)
            device[id(op)] = HOST if reason is not None else target
            if reason is not None and log:
                FUSION_LOG.debug("%splaced %s on %s: %s", where, _describe(op), HOST, reason)

    def home(v: Value) -> "str | None":
        owner = v.owner
        if not isinstance(owner, Operation):
            return target  # a function argument
        return None if owner.name == "lz.constant" else device[id(owner)]

    transfers: dict[tuple, Operation] = {}

    def transfer(v: Value, to: str, before: Operation) -> Value:
        t = transfers.get((id(v), to))
        if t is None:
            t = Operation(TRANSFER, [v], [v.type], {"device": StringAttr(to)}, location=before.location)
            body.insert_before(before, t)
            device[id(t)] = to
            transfers[(id(v), to)] = t
            if log:
                FUSION_LOG.debug("%stransfer %s from %s to %s for %s", where, v.type, home(v), to,
                                 "the return" if before.name == "func.return" else _describe(before))
        return t.result

    for op in list(body.ops):
        if op.name == "func.return":
            for i, v in enumerate(op.operands):
                if home(v) not in (None, target):
                    op.set_operand(i, transfer(v, target, op))
        elif id(op) in device and op.name != TRANSFER:
            for i, v in enumerate(op.operands):
                if home(v) not in (None, device[id(op)]):
                    op.set_operand(i, transfer(v, device[id(op)], op))
    return device
