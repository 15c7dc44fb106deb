"""Which ops each compilation target can run: the registry ``partition{target=...}`` reads.

A code generator registers its target with a function that says why it cannot run an op (None
when it can).  ``partition`` places every op the target cannot run on the CPU instead (automatic
fallback), logs the reason on the ``lezero.fusion`` logger, and connects the two sides with
explicit ``lz.transfer`` ops.  Passes sit below code generators, so the dependency goes through
this registry: ``lezero.codegen.triton`` registers ``"cuda"`` when it is imported.
"""
from __future__ import annotations

from typing import Callable

from lezero.ir.core import Operation

HOST = "cpu"

_TARGETS: dict[str, Callable[[Operation], "str | None"]] = {HOST: lambda op: None}


def register_target(name: str, unsupported_reason: Callable[[Operation], "str | None"]) -> None:
    """``unsupported_reason(op)``: None if target ``name`` runs ``op``, else a short reason
    (``"lz.topk has no Triton lowering"``)."""
    _TARGETS[name] = unsupported_reason


def known_targets() -> tuple:
    return tuple(sorted(_TARGETS))


def unsupported_reason(target: str, op: Operation) -> "str | None":
    """Why ``target`` cannot run ``op`` (None: it can). ``KeyError`` for an unregistered target."""
    return _TARGETS[target](op)
