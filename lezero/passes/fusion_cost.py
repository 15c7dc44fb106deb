"""fusion_cost: what a kernel would cost, so that partition fuses two groups only when the fused
kernel is no slower than its parts (issue 11).

Legality (``partition.classify``) says which ops *can* be one kernel; this model says whether
they *should*.  A candidate kernel (``Candidate``: its ops, kind, the values it reads from memory
and those it stores) is estimated as

    seconds = LAUNCH_SECONDS + max(bytes / BANDWIDTH, flops / rate)

with ``bytes`` the memory traffic (every operand read once, every stored value written once)
and ``flops`` each computed op's elements times its ``OP_COST`` times the number of times the
kernel evaluates it; ``rate`` is the vector rate, or a contraction kernel's.  Partition merges
groups ``a`` and ``b`` only when ``estimate(a + b) <= estimate(a) + estimate(b)`` (a tie fuses:
one launch fewer).  Fusion saves the intermediate's store and load and a launch; what can make a
fused kernel slower than its parts, each measured by ``benchmarks/fusion.py`` on this machine
(2 Zen 4 cores; ratios fused / parts):

- **a strided read in an elementwise kernel**: an ``lz.transpose`` that moves its operand's
  contiguous dim away from the innermost loop walks memory at a stride along the vectorized loop
  (tiled, but read as gathers); alone in its kernel it is a register-blocked transpose instead.
  transpose + add at 1024^2: 4.7x, 1000^2 1.3x, 64x4096 1.8x, 12x197x64 with perm [0, 2, 1] 3.0x;
  a transpose keeping the contiguous dim innermost ([1, 0, 2]) is a plain read (fused: 0.5x).
  Such a read costs ``STRIDED_READ_COST`` times its bytes.
- **recomputation in a reduction kernel**: every reduction is one pass over the row, and an
  elementwise op at the input's shape is computed in every pass that reads it (softmax's
  ``exp(x - max)``: for the sum and again for the division) unless the backend keeps the row a
  reduction accumulated for the later passes (``BackendFacts.reduction_row_cache``); a row
  longer than ``ROW_CACHE_BYTES`` is read from memory again by every pass.
- **a contraction's operand read through a transpose**: only the code generator knows whether its
  kernel keeps the packed GEMM (``BackendFacts.contraction_kernel``): a loop kernel runs at a
  tenth of the GEMM's rate, and B is read again by every GEMM of a batch (197 GEMMs of one row
  read ViT's 768 x 2304 weight 197 times: 25 ms, one GEMM of 197 rows 4.4 ms).

**The code generator's answers** come through a hook, as placement's do: passes sit below code
generation, so a backend module exposes ``fusion_facts`` (a ``BackendFacts``) and the backend
registry registers them when it loads the backend (``lezero/codegen/targets.py``; the compile
pipeline, ``lezero/codegen/schedule.py``, loads the target's backend before it partitions, and
``lezero-opt`` loads every backend).  Without facts for the target (partition run with no code
generator loaded) a contraction counts as the packed GEMM of its batches and a reduction keeps no
row, and the estimate says "kernel not asked".  The machine numbers are round figures for the
CPUs lezero is measured on; only their ratios decide.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from lezero.ir.core import Operation, Value
from lezero.ir.dialect.data_movement import TransposeOp
from lezero.ir.dialect.reduction import REDUCTION_OPS
from lezero.ir.types import TensorType

LAUNCH_SECONDS = 5e-6  # a kernel's hand-off to the thread pool and back
BANDWIDTH = 20e9  # bytes/s, two cores streaming
VECTOR_RATE = 100e9  # elementwise ops/s: two cores, 16 float lanes each
CONTRACTION_RATE = {"gemm": 150e9, "dots": 150e9, "loops": 15e9}  # flop/s of each matmul kernel
CONV_RATE = 100e9  # a conv's GEMM and loop kernels alike (legality fixes which; fusion does not)
STRIDED_READ_COST = 8  # a read strided along the vectorized loop costs this many times its bytes
STRIDED_READ = 16  # elements: a stride at least this long along the innermost loop is strided
ROW_CACHE_BYTES = 256 * 1024  # a reduction's row up to this size is read again from cache
SHARED_CACHE_BYTES = 1024 * 1024  # a GEMM operand re-read per batch up to this size stays cached

# Cost of one element of an op, in vector ops (default 1; data movement is index arithmetic: 0).
OP_COST = {**{name: 20 for name in ("lz.exp", "lz.log", "lz.tanh", "lz.sigmoid", "lz.erf", "lz.gelu", "lz.sin",
                                    "lz.cos", "lz.tan", "lz.atan", "lz.asin", "lz.acos", "lz.sinh", "lz.cosh",
                                    "lz.asinh", "lz.acosh", "lz.atanh")},
           "lz.pow": 100,  # a libm call per element
           **{name: 4 for name in ("lz.div", "lz.sqrt", "lz.rsqrt", "lz.reciprocal", "lz.rem")}}


@dataclass(frozen=True)
class Candidate:
    """A would-be kernel: its ops (program order), kind (partition's), the values it reads from
    memory (operands from outside, each once) and the values it stores (read outside it or
    returned); ``moved``: the ids of its data-movement ops; ``target``: where it runs."""

    ops: tuple
    kind: str
    inputs: tuple
    outputs: tuple
    moved: frozenset
    target: str = "cpu"


@dataclass(frozen=True)
class Estimate:
    seconds: float
    bytes: int
    flops: int
    notes: tuple = field(default=())  # what shaped it beyond bytes and flops

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(self.seconds + other.seconds, self.bytes + other.bytes, self.flops + other.flops,
                        self.notes + other.notes)

    def __str__(self) -> str:
        notes = f"; {', '.join(self.notes)}" if self.notes else ""
        return f"{self.seconds * 1e6:.1f} us ({self.bytes / 1e6:.3g} MB, {self.flops / 1e6:.3g} Mflop{notes})"


# The ops a contraction kernel is built around (issue 12: the int8 GEMM is one too).
CONTRACTIONS = ("lz.matmul", "lz.conv2d", "lz.matmul_integer", "lz.conv_integer")


# --- what the model asks a backend -----------------------------------------------------------------

@dataclass(frozen=True)
class BackendFacts:
    """A backend's answers (its ``fusion_facts``).

    contraction_kernel(anchor, strides) -> (kernel, gemms): the kernel the ``lz.matmul`` ``anchor``
        runs when its operands are read with ``strides`` (per operand, elements per step along each
        of its dims; None for row-major): ``"gemm"``, ``"dots"`` or ``"loops"`` (CONTRACTION_RATE's
        keys), as ``gemms`` GEMMs (each reading all of B).
    reduction_row_cache: the longest row (elements) whose accumulated values a row reduction keeps
        for the later passes that read them again (0: it computes them again).
    """

    contraction_kernel: Callable[[Operation, tuple], tuple[str, int]]
    reduction_row_cache: int = 0


_BACKEND_FACTS: dict[str, BackendFacts] = {}


def register_backend_facts(target: str, facts: BackendFacts) -> None:
    _BACKEND_FACTS[target] = facts


def backend_facts(target: str) -> BackendFacts | None:
    """The facts registered for ``target``, or None when no code generator registered them."""
    return _BACKEND_FACTS.get(target)


def row_major(shape) -> tuple:
    """Elements per step along each dim of a row-major array of ``shape`` (every buffer's layout)."""
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def read_strides(v: Value, members: set) -> tuple | None:
    """The element strides ``v`` is read with from memory: None (row-major) when it is read as it
    is stored, the permuted strides of its source when it is a transpose inside the kernel (a
    cast inside it, a bf16 matmul's operand prologue, reads its input as it is stored)."""
    op = v.owner
    while isinstance(op, Operation) and id(op) in members and op.name == "lz.cast":
        op = op.operands[0].owner
    if not (isinstance(op, Operation) and id(op) in members and op.name == "lz.transpose"):
        return None
    (source,) = op.operands
    perm = TransposeOp.permutation(op.definition.attrs(op), source.type.rank)
    stored = row_major(source.type.shape)
    return tuple(stored[p] for p in perm)


# --- the model -------------------------------------------------------------------------------------

def _bytes(v: Value) -> int:
    t = v.type
    return t.nbytes if isinstance(t, TensorType) and t.is_static else 0


def _elements(v: Value) -> int:
    t = v.type
    return math.prod(t.shape) if isinstance(t, TensorType) and t.is_static else 0


def estimate(c: Candidate) -> Estimate:
    """The seconds, bytes and flops of kernel ``c`` (see the module docstring)."""
    members = {id(op) for op in c.ops}
    moved_bytes = sum(_bytes(v) for v in c.outputs)
    notes: list[str] = []
    for v in c.inputs:
        factor = _strided_read_factor(v, c) if c.kind == "elementwise" else 1
        if factor > 1:
            notes.append(f"strided read of {_name(v)} x{factor}")
        moved_bytes += _bytes(v) * factor
    computed = [op for op in c.ops if id(op) not in c.moved]
    if c.kind == "reduction":
        flops, extra_bytes, reduction_notes = _reduction_work(c, computed, members)
        moved_bytes += extra_bytes
        notes += reduction_notes
    else:
        flops = sum(OP_COST.get(op.name, 1) * _elements(op.results[0]) for op in computed
                    if op.name not in CONTRACTIONS)
    anchor = next((op for op in computed if op.name in CONTRACTIONS), None)
    compute_seconds = flops / VECTOR_RATE
    if anchor is not None:
        work, extra_bytes, rate, contraction_notes = _contraction_work(c, anchor, members)
        moved_bytes += extra_bytes
        notes += contraction_notes
        compute_seconds += work / rate
        flops += work
    seconds = max(moved_bytes / BANDWIDTH, compute_seconds)
    return Estimate(LAUNCH_SECONDS + seconds, moved_bytes, flops, tuple(notes))


def _name(v: Value) -> str:
    owner = v.owner
    return f"'{owner.name}'" if isinstance(owner, Operation) else "an argument"


def _strided_read_factor(v: Value, c: Candidate) -> int:
    """STRIDED_READ_COST when an op of elementwise kernel ``c`` reads ``v`` through a transpose
    that strides along the innermost loop, unless that transpose is the whole kernel (the
    register-blocked transpose); else 1."""
    readers = [op for op in c.ops if any(o is v for o in op.operands)]
    transposes = [op for op in readers if op.name == "lz.transpose"]
    if not transposes or len(c.ops) == 1:
        return 1
    for op in transposes:
        perm = TransposeOp.permutation(op.definition.attrs(op), v.type.rank)
        shape = op.result.type.shape
        if shape and shape[-1] > 1 and row_major(v.type.shape)[perm[-1]] >= STRIDED_READ:
            return STRIDED_READ_COST
    return 1


def _reduction_work(c: Candidate, computed, members) -> tuple[int, int, list]:
    """Flops of a reduction kernel with each input-shape op counted once per pass that evaluates
    it, and the bytes of its inputs read again by later passes when a row does not stay in cache."""
    producer = {id(r): op for op in c.ops for r in op.results}
    reductions = [op for op in c.ops if op.name in REDUCTION_OPS]
    full = reductions[0].operands[0].type.shape
    rows = math.prod(reductions[0].results[0].type.shape) or 1
    row_bytes = _bytes(reductions[0].operands[0]) // rows

    def tree(roots, kept) -> tuple[set, set]:
        """Ops at the input's shape evaluated for ``roots`` (stopping at reductions, whose
        results wait in registers, and at the ``kept`` rows), and the kernel inputs they read."""
        ops, leaves, stack = set(), set(), list(roots)
        while stack:
            v = stack.pop()
            op = producer.get(id(v))
            if id(v) in kept:
                continue
            if op is None:
                leaves.add(id(v))
            elif op.name not in REDUCTION_OPS and id(op) not in ops:
                if op.results[0].type.shape == full:
                    ops.add(id(op))
                stack.extend(op.operands)
        return ops, leaves

    facts = backend_facts(c.target)
    keeps_rows = facts is not None and math.prod(full) // rows <= facts.reduction_row_cache
    passes, kept = [], set()
    for r in reductions:
        passes.append(tree(r.operands, kept))
        if keeps_rows:  # the later passes read the row it accumulated instead of computing it
            kept.add(id(r.operands[0]))
    yielded_full = [v for v in c.outputs if v.type.shape == full]
    if yielded_full:
        passes.append(tree(yielded_full, kept))
    evaluations = {id(op): sum(id(op) in ops for ops, _ in passes) for op in computed}
    flops = sum(OP_COST.get(op.name, 1) * _elements(op.results[0]) * max(1, evaluations[id(op)])
                for op in computed if op.name not in REDUCTION_OPS)
    flops += sum(_elements(r.operands[0]) for r in reductions)
    notes = [f"{op.name} computed {evaluations[id(op)]} times" for op in computed
             if evaluations[id(op)] > 1 and OP_COST.get(op.name, 1) > 1]
    extra = 0
    if row_bytes > ROW_CACHE_BYTES:
        reads = {}
        for _, leaves in passes:
            for leaf in leaves:
                reads[leaf] = reads.get(leaf, 0) + 1
        inputs = {id(v): v for v in c.inputs}
        extra = sum(_bytes(inputs[i]) * (n - 1) for i, n in reads.items() if i in inputs and n > 1)
        if extra:
            notes.append(f"rows of {row_bytes} bytes read again per pass")
    return flops, extra, notes


def _contraction_work(c: Candidate, anchor: Operation, members) -> tuple[int, int, float, list]:
    """A contraction's flops, the bytes of B read again by each GEMM of a batch, the rate of its
    kernel and what the code generator said."""
    if anchor.name in ("lz.conv2d", "lz.conv_integer"):
        from_shape = 2 * _elements(anchor.result) * math.prod(anchor.operands[1].type.shape[1:])
        return from_shape, 0, CONV_RATE, []
    a, b = anchor.operands[:2]  # lz.matmul_integer's zero points follow
    k = a.type.shape[-1]
    flops = 2 * _elements(anchor.result) * k
    strides = tuple(read_strides(v, members) for v in anchor.operands)
    facts = backend_facts(c.target)
    answer = facts.contraction_kernel(anchor, strides) if facts is not None else None
    if answer is None:
        batch = anchor.result.type.shape[:-2] if a.type.rank > 1 and b.type.rank > 1 else ()
        kernel, gemms, notes = "gemm", math.prod(batch), ["kernel not asked"]
    else:
        kernel, gemms = answer
        notes = [f"{kernel} x{gemms}" if gemms > 1 else kernel]
    b_shared = all(d == 1 for d in b.type.shape[:-2])
    extra = 0
    if gemms > 1 and b_shared and _bytes(b) > SHARED_CACHE_BYTES:
        extra = (gemms - 1) * _bytes(b)
        notes.append(f"B read by each of {gemms} GEMMs")
    return flops, extra, CONTRACTION_RATE[kernel], notes
