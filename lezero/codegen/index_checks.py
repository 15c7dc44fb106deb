"""Bounds checks in compiled kernels: which index of which op a kernel checks, and the status
buffer through which it tells the runtime that an index was out of range.

The reference rejects an out-of-range index (``lz.gather``, ``lz.scatter_nd``); a kernel cannot
raise, so it reads a clamped (safe) address, records the bad index, and the runtime raises
``IndexError`` after the launch.  A kernel whose body holds an op of ``INDEX_CHECKED_OPS`` takes
one more buffer after its results (the kernel ABI, docs/architecture.md "Bounds checks"): the
*status*, ``SLOTS_PER_CHECK`` int64 per ``IndexCheck`` of the kernel (``LoweredKernel.index_checks``,
in slot order):

- ``status[2 k]``: 0, or 1 once check ``k`` saw an index out of range;
- ``status[2 k + 1]``: the largest such index (as int64; ``NO_INDEX`` when none).

Work items on any number of threads (or GPU lanes) update the slots with atomic ``or``/``max``,
which commute, so the status after a launch does not depend on the split or the order: the
reported index is the largest bad one, the same on every run.  The runtime sets the status to
``initial_status`` once and again after it reports an error, so a launch that finds nothing
costs the kernel no store and the runtime one read per check.
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.location import Location, UnknownLoc

INDEX_CHECKED_OPS = frozenset({"lz.gather", "lz.scatter_nd"})
SLOTS_PER_CHECK = 2
NO_INDEX = -(1 << 63)  # the value slot before any bad index: every int64 index is larger or equal


def checks_indices(kernel_op) -> bool:
    """Whether ``kernel_op`` (an ``lz.kernel``) takes a status buffer."""
    return any(op.name in INDEX_CHECKED_OPS for op in kernel_op.regions[0].blocks[0].ops)


@dataclass(frozen=True)
class IndexCheck:
    """One index operand of one op: ``dim`` names what it indexes (``axis 0``), ``size`` its
    extent; valid indices are ``[-size, size)`` when ``negative`` (counted from the end), else
    ``[0, size)``.  ``position``: the op's place in its kernel's body, so that a cached kernel's
    checks name the op (and the location) of the kernel that reuses its code (``portable``)."""

    op_name: str
    location: Location
    dim: str
    size: int
    negative: bool
    position: int = -1

    def portable(self) -> tuple:
        """The check without its op: ``(position, dim, size, negative)``, JSON-able."""
        return (self.position, self.dim, self.size, self.negative)

    def message_parts(self) -> tuple[str, str]:
        """The error message around the bad index: ``before + str(index) + after`` (the native
        runtime formats it in C)."""
        where = "" if isinstance(self.location, UnknownLoc) else f"{self.location.describe()}: "
        low = -self.size if self.negative else 0
        valid = f"valid: {low} to {self.size - 1}" if self.size else "no index is valid"
        return (f"{where}{self.op_name}: index ", f" is out of range for {self.dim} of size {self.size} ({valid})")

    def message(self, index: int) -> str:
        before, after = self.message_parts()
        return f"{before}{index}{after}"


class IndexChecks:
    """The checks of one kernel being lowered, numbered in the order the code asks for them (an
    op's index reached twice, e.g. by two passes of a reduction, is one check)."""

    def __init__(self, body_ops=()):
        self.checks: list[IndexCheck] = []
        self._slots: dict = {}
        self._positions = {id(op): i for i, op in enumerate(body_ops)}

    def slot(self, op, dim: str, size: int, negative: bool) -> int:
        key = (id(op), dim)
        if key not in self._slots:
            self._slots[key] = len(self.checks)
            self.checks.append(IndexCheck(op.name, op.location, dim, size, negative, self._positions.get(id(op), -1)))
        return self._slots[key]


def checks_of(kernel_op, portable_checks) -> tuple[IndexCheck, ...]:
    """The checks of ``kernel_op`` (an ``lz.kernel``) whose code is that of a kernel with
    ``portable_checks`` (``IndexCheck.portable``, in slot order): the same checks, naming the ops
    and locations of ``kernel_op``'s body."""
    ops = list(kernel_op.regions[0].blocks[0].ops)
    checks = []
    for position, dim, size, negative in portable_checks:
        if not 0 <= position < len(ops) or ops[position].name not in INDEX_CHECKED_OPS:
            raise ValueError(f"a cached bounds check names op {position} of a kernel whose op there is not checked")
        op = ops[position]
        checks.append(IndexCheck(op.name, op.location, str(dim), int(size), bool(negative), int(position)))
    return tuple(checks)


def initial_status(checks) -> list[int]:
    return [0, NO_INDEX] * max(len(checks), 1)


def status_error(checks, status) -> str | None:
    """The message of the first check (in slot order) that ``status`` says failed, else None."""
    for k, check in enumerate(checks):
        if status[SLOTS_PER_CHECK * k]:
            return check.message(int(status[SLOTS_PER_CHECK * k + 1]))
    return None
