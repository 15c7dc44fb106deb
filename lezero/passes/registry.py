"""Every pass, by the name pipelines call it.

The passes lezero ships are ``BUILTIN_PASSES``, listed here one per line, so reading this file
tells what exists; ``register_pass`` adds one defined elsewhere (a test's toy pass, a user's own)
under its ``name``.  The pass modules are imported here, not on first lookup: the compiler's own
pipeline runs most of them, so loading them lazily would save nothing.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from lezero.passes.attention import FuseAttention
from lezero.passes.autodiff import Autodiff
from lezero.passes.canonicalize import Canonicalize
from lezero.passes.constant_fold import ConstantFold
from lezero.passes.cse import CommonSubexpressionElimination
from lezero.passes.dce import DeadCodeElimination
from lezero.passes.decompose import Decompose
from lezero.passes.fuse import Fuse
from lezero.passes.licm import LoopInvariantCodeMotion
from lezero.passes.memory_plan import MemoryPlan
from lezero.passes.partition import Partition
from lezero.passes.pass_base import Pass, PassInfo, PipelineError, format_option_value
from lezero.passes.shape_infer import ShapeInfer
from lezero.passes.autocast import Autocast  # issue 13: mixed precision
from lezero.passes.loop_sums import LoopSums  # issue 17: an RNN's weight gradient as one GEMM
from lezero.passes.fold_qdq import FoldQdq  # issue 12: QDQ matmuls as the int8 GEMM
from lezero.passes.bucket_all_reduce import BucketAllReduce  # issue 14: DDP's buckets as start/wait pairs
from lezero.passes.layout import BlockedLayout  # issue 11: convs over channel-blocked activations

# name -> pass class, for every pass lezero ships
BUILTIN_PASSES: dict[str, type[Pass]] = {
    "autodiff": Autodiff,
    "canonicalize": Canonicalize,
    "constant-fold": ConstantFold,
    "cse": CommonSubexpressionElimination,
    "dce": DeadCodeElimination,
    "decompose": Decompose,
    "fuse": Fuse,
    "fuse-attention": FuseAttention,
    "licm": LoopInvariantCodeMotion,
    "memory-plan": MemoryPlan,
    "partition": Partition,
    "shape-infer": ShapeInfer,
    "autocast": Autocast,  # issue 13: mixed precision
    "loop-sums": LoopSums,  # issue 17: an RNN's weight gradient as one GEMM
    "fold-qdq": FoldQdq,  # issue 12: QDQ matmuls as the int8 GEMM
    "bucket-all-reduce": BucketAllReduce,  # issue 14: DDP's buckets as start/wait pairs
    "blocked-layout": BlockedLayout,  # issue 11: convs over channel-blocked activations
}

_PASSES: dict[str, type[Pass]] = {}


def register_pass(cls):
    """Class decorator: make ``cls`` (made a dataclass if it is not one) known by ``cls.name``."""
    if not cls.name:
        raise ValueError(f"pass class {cls.__name__} has no name")
    if "__dataclass_fields__" not in cls.__dict__:
        cls = dataclass(cls)
    existing = _PASSES.get(cls.name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise ValueError(f"pass '{cls.name}' is registered twice ({existing.__qualname__}, {cls.__qualname__})")
    cls.options()  # fail at declaration, not at first use, for a bad option type
    _PASSES[cls.name] = cls
    return cls


for _builtin in BUILTIN_PASSES.values():
    register_pass(_builtin)


def get_pass(name: str) -> type[Pass]:
    """The pass class registered as ``name``; ``PipelineError`` with the closest name if none."""
    try:
        return _PASSES[name]
    except KeyError:
        raise PipelineError(unknown_pass_message(name)) from None


def unknown_pass_message(name: str) -> str:
    close = difflib.get_close_matches(name, list(_PASSES), n=1, cutoff=0.5)
    if close:
        return f"unknown pass '{name}'; did you mean '{close[0]}'?"
    return f"unknown pass '{name}' (registered passes: {', '.join(sorted(_PASSES))})"


def pass_names() -> list[str]:
    return sorted(_PASSES)


def list_passes() -> list[PassInfo]:
    """Every registered pass, sorted by name, with its options."""
    return [PassInfo(c.name, c.summary, c.options(), c) for _, c in sorted(_PASSES.items())]


def format_pass_list() -> str:
    """The text of ``lezero-opt --list-passes``."""
    lines = ["Available passes:"]
    for info in list_passes():
        lines.append(f"  {info.name:<20} {info.summary}")
        for o in info.options:
            default = format_option_value(o.default) or "(none)"
            help_ = f"  {o.help}" if o.help else ""
            lines.append(f"      {o.name}: {o.type_name} = {default}{help_}")
    return "\n".join(lines) + "\n"
