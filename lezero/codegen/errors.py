"""The error every code generator raises for an op it cannot lower, naming the op, its element
type, the target and the reason: ``failed to lower lz.foo with f16 for cpu: <why>``."""
from __future__ import annotations

from lezero.ir.diagnostics import IRError


class LoweringError(IRError):
    """A kernel (or an op in it) the code generator cannot lower; carries the op's location."""


class TargetError(ValueError):
    """A CPU or triple that is unknown, or code for a CPU this machine cannot execute."""
