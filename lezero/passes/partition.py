"""partition: decide which ops are compiled together, one kernel per group (issue 3).

Every op of a function except ``lz.constant`` (weights stay outside, as kernel operands),
``lz.kernel`` (already made) and the control-flow ops (``CONTROL_FLOW_OPS``: ``lz.for``,
``lz.while``, ``lz.if``, which stay at the top level as host steps, groups of their own that
never merge; ``lezero.codegen.schedule`` schedules their regions as functions) lands in exactly
one group; ``fuse`` then turns each group into an
``lz.kernel``.  The decision is written on the ops as discardable attributes, so
``lezero-opt -p partition`` shows it and ``fuse`` reads it::

    lz.group = 3 : i64             the group; numbered in the order fuse emits the kernels
    lz.group_kind = "matmul"       the kernel kind (KERNEL_KINDS in lezero/ir/dialect/kernel.py)
    lz.stage = 1 : i64             the group's topological generation in the group graph: the
                                   groups of one stage need nothing from each other, so a runtime
                                   may run them at the same time
    lz.device = "cuda"             where the group runs (only with a target other than the CPU)

How groups form: each op starts alone.  Producer -> consumer pairs of groups are merged
greedily, the most profitable first, where profit is the memory traffic saved by not
materializing the values passed between them (2 x their bytes, a write and a read, when nothing
else reads them; 1 x, the read, when something still does).  A pair is merged only when
``can_fuse`` allows it (legality): the merged group must stay under ``max-ops``, must not close a
cycle in the group graph (a path from one group to the other through a third), and must still
be one kernel a code generator accepts (``classify``); and when the cost model
(``lezero/passes/fusion_cost.py``; ``cost-model=false`` turns it off) estimates the fused kernel
no slower than its two parts (profit).  Every decision, taken or refused with its reason (and the
estimates behind it), is logged on the ``lezero.fusion`` logger (``lezero-opt --debug=fusion``).

What a group of each kind may hold (the contract in docs/architecture.md):

- **Data movement** (``MOVEMENT_OPS``) is index arithmetic on a load, in any kind of group: it
  reads its inputs from memory (kernel operands), never from a computed op of the same group, so
  it folds into the kernel that reads it, not into the one that produces its input.  In an
  elementwise kernel it may read other movement of memory that only the kernel reads (a chain,
  one composed index: a DDP bucket's ``concat`` of ``reshape``s of gradients, the ``reshape`` of
  its ``slice`` back) rather than a copy of it.  A moved value that
  only its group reads (a *moved operand*) is computed at the index of each op reading it and
  stored nowhere, so it may have any shape those ops broadcast from (BatchNorm's per-channel
  vector reshaped to C x 1 x 1 and read by a conv's epilogue); one that something outside the
  group reads too is a result of the kernel, so it must have the iteration space's shape, which
  only an elementwise kernel allows.  A contraction's epilogue or a reduction reads no
  ``lz.transpose``: its strided reads would run along the kernel's vectorized loop, which only
  the elementwise kernels tile for (``_check_moved_operand``).
- ``elementwise``: elementwise ops whose results all have one shape, the iteration space, and
  data movement.
- ``reduction``: ``reduce_*``/``argmax`` ops that all reduce the same axes of inputs of one
  shape, plus elementwise ops at that full shape (prologue, and epilogue broadcast back: softmax's
  ``x - max(x)``) or at the reduced shape (kept or dropped dims), and moved operands (group norm's
  input reshaped to N x G x rest).  A reduced value may feed a full-shape op only if broadcasting
  puts it back along the reduced axes (``keepdims``, or reduced axes that lead).
- ``matmul`` / ``conv``: one ``lz.matmul`` (or ``lz.matmul_integer``) / ``lz.conv2d`` whose operands come from memory,
  elementwise ops over its result shape (bias, activation, residual add: the epilogue), and the
  moved operands the epilogue reads.  The one prologue (``operand_prologue``): a matmul may read
  an operand through an ``lz.transpose`` of memory (``x @ w.T``, ONNX Gemm's ``transB``), when the
  transpose keeps the operand's contiguous dim among the two matrix dims (the GEMM packs rows or
  columns with other strides), and a bf16 or f16 matmul through an ``lz.cast`` from f32 (autocast's: the
  kernel rounds each value to its type where it reads it), either under the other, when nothing
  outside the kernel reads them.  A cast only such matmuls read is first copied for each of them
  (``clone_operand_casts``: a layer's input feeds the forward and the weight gradient's matmul),
  so no cast is a kernel of its own.
- ``single``: one op of any other kind (pooling, composites, ...), never fused.

Shapes must be static for ops to share a kernel (an op with a ``?`` dim stays alone): equal
``?`` dims need not be equal sizes.

**Devices** (``partition{target=cuda}``; the default ``target=cpu`` does none of this):
``lezero.passes.placement.place_function`` first places each op on the target or, when the
target cannot run it, on the CPU, inserting an ``lz.transfer`` on every edge between the two
(see there).  Each transfer is a group of its own, of kind ``transfer``; groups never merge
across a transfer, so no group mixes devices.  Every op of a group also gets
``lz.device = "cuda"`` (or ``"cpu"``), which ``fuse`` makes the kernel's ``device``.  On the CPU
target an ``lz.transfer`` is an elementwise copy like any other.
"""
from __future__ import annotations

import heapq
import itertools
import logging
from dataclasses import dataclass

import networkx as nx

import lezero.passes.fusion_cost as fusion_cost
from lezero.ir.attributes import IntegerAttr, StringAttr
from lezero.ir.core import FuncOp, ModuleOp, Operation, Value
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.data_movement import TransposeOp
from lezero.ir.dialect.reduction import REDUCTION_OPS, reduced_axes
from lezero.ir.opdef import ELEMENTWISE
from lezero.ir.types import BF16, F16, F32, I64, TensorType, format_shape
from lezero.passes.pass_base import Pass, option
from lezero.passes.placement import CONTROL_FLOW_OPS, FUSION_LOG, HOST, TRANSFER, place_function

# The discardable attributes partition writes (and fuse reads).
GROUP_ATTR = "lz.group"
KIND_ATTR = "lz.group_kind"
STAGE_ATTR = "lz.stage"
DEVICE_ATTR = "lz.device"  # only with a target other than the CPU
PARTITION_ATTRS = (GROUP_ATTR, KIND_ATTR, STAGE_ATTR, DEVICE_ATTR)
TRANSFER_KIND = "transfer"

MOVEMENT_OPS = frozenset({"lz.reshape", "lz.transpose", "lz.broadcast_to", "lz.slice", "lz.as_strided", "lz.pad",
                          "lz.concat", "lz.gather"})
CONTRACTION_OPS = {"lz.matmul": "matmul", "lz.conv2d": "conv",
                   # issue 12: the int8 GEMM (the CPU keeps it whole) takes its dequantize or
                   # requantize epilogue like any matmul, so no i32 tensor is stored
                   "lz.matmul_integer": "matmul", "lz.conv_integer": "conv"}

# Longest kernel name: this many distinct op names, then "etc".
MAX_NAME_PARTS = 5


class Refusal(Exception):
    """Why a set of ops cannot be one kernel (or two groups cannot merge)."""

    @property
    def reason(self) -> str:
        return self.args[0]


# --- what each op is, to a kernel -----------------------------------------------------------------

def op_role(op: Operation) -> str:
    """``elementwise``, ``movement``, ``reduction``, ``matmul``, ``conv`` or ``single``."""
    if op.name in CONTRACTION_OPS:
        return CONTRACTION_OPS[op.name]
    if op.name in REDUCTION_OPS:
        return "reduction"
    if op.name in MOVEMENT_OPS:
        return "movement"
    definition = op.definition
    if definition is not None and definition.has_trait(ELEMENTWISE):
        return "elementwise"
    return "single"


_KIND_OF_ROLE = {"elementwise": "elementwise", "movement": "elementwise", "reduction": "reduction",
                 "matmul": "matmul", "conv": "conv", "single": "single"}



def _shape(v: Value) -> tuple:
    return v.type.shape


def _fmt(shape) -> str:
    return format_shape(shape) if shape else "scalar"


def value_bytes(v: Value) -> int:
    """Bytes of a static tensor value; 0 when its size is not known."""
    t = v.type
    return t.nbytes if isinstance(t, TensorType) and t.is_static else 0


# --- legality: which sets of ops make one kernel ----------------------------------------------------

def classify(ops: list[Operation]) -> str:
    """The kind of kernel ``ops`` (a group, in program order) make; ``Refusal`` with the reason
    when they make none."""
    if len(ops) == 1:
        return _KIND_OF_ROLE[op_role(ops[0])]
    producer = {id(r): op for op in ops for r in op.results}
    roles = [(op, op_role(op)) for op in ops]
    for op, role in roles:
        if role == "single":
            raise Refusal(f"'{op.name}' is compiled on its own (a single kernel)")
        for r in op.results:
            if not (isinstance(r.type, TensorType) and r.type.is_static):
                raise Refusal(f"'{op.name}' gives {r.type}: shapes must be static to fuse (bind the dims first)")
    anchors = [op for op, role in roles if role in ("matmul", "conv")]
    reductions = [op for op, role in roles if role == "reduction"]
    if len(anchors) > 1:
        raise Refusal(f"a kernel holds one contraction: '{anchors[0].name}' and '{anchors[1].name}'")
    if anchors and reductions:
        raise Refusal(f"a {CONTRACTION_OPS[anchors[0].name]} kernel holds no reduction ('{reductions[0].name}')")
    members = {id(op) for op in ops}
    prologue = operand_prologue(anchors[0], producer) if anchors else []
    for op, role in roles:
        if role == "movement" and op not in prologue:  # a prologue's chain is checked with its contraction
            _check_movement(op, producer, members, chained=not anchors and not reductions)
    if anchors:
        _check_contraction(anchors[0], ops, producer, members, prologue)
        return CONTRACTION_OPS[anchors[0].name]
    if reductions:
        _check_reduction(reductions, ops, producer, members)
        return "reduction"
    _check_elementwise(ops, members)
    return "elementwise"


def read_outside(op: Operation, members) -> bool:
    """Whether anything outside the group (the ops whose ids are ``members``) reads ``op``'s result."""
    return any(id(u) not in members for r in op.results for u in r.users)


def is_moved_operand(op: Operation, members) -> bool:
    """Whether ``op`` is data movement that only its group reads: index arithmetic on the load
    of its input, computed at the index of each op reading it and stored nowhere, so it may have
    any shape those ops broadcast from."""
    return op.name in MOVEMENT_OPS and not read_outside(op, members)


def _check_movement(op, producer, members, chained: bool) -> None:
    """Data movement is index arithmetic on a load: it reads its inputs from memory, or (``chained``:
    in an elementwise kernel) from data movement of memory that only the kernel reads."""
    for v in op.operands:
        source = producer.get(id(v))
        if source is not None and not (chained and is_moved_operand(source, members)):
            raise Refusal(f"'{op.name}' must read its input from memory, not from '{producer[id(v)].name}' in the "
                          "same kernel")


def _check_elementwise(ops, members) -> None:
    stored = [op for op in ops if not is_moved_operand(op, members)]  # what the kernel computes per index
    computed = [op for op in stored if op.name not in MOVEMENT_OPS]
    space = _shape((computed or stored or ops)[0].result)
    for op in stored:
        shape = _shape(op.result)
        if shape != space:
            raise Refusal(f"iteration space {_fmt(shape)} differs from {_fmt(space)}")


LOW_PRECISION = (BF16, F16)  # the types a matmul reads a float32 operand through a cast to (autocast's)


def is_operand_cast(op: Operation, anchor: Operation) -> bool:
    """Whether ``op`` is an ``lz.cast`` from f32 to bf16 or f16 that ``anchor``, an ``lz.matmul`` of that
    type, may read an operand through (directly or under a transpose): the kernel rounds each value to
    the type where it reads it (packing), so autocast's casts of a matmul's operands are no kernels of
    their own."""
    low = anchor.result.type.element_type
    return (op.name == "lz.cast" and anchor.name == "lz.matmul" and low in LOW_PRECISION
            and op.result.type.element_type == low and op.operands[0].type.element_type == F32)


def operand_prologue(anchor: Operation, producer: dict) -> list[Operation]:
    """The ops of a group (``producer``: id of a value -> the group's op making it) that contraction
    ``anchor`` reads its operands through, from an operand towards memory: a matmul's transposes
    and casts to bf16 or f16 (``is_operand_cast``), in any order, each at most once per operand."""
    chain = []
    for v in anchor.operands:
        op, seen = producer.get(id(v)), set()
        while op is not None and op.name not in seen and (is_operand_cast(op, anchor) or (
                op.name == "lz.transpose" and anchor.name == "lz.matmul")):
            chain.append(op)
            seen.add(op.name)
            op = producer.get(id(op.operands[0]))
    return chain


def is_reshaped_integer_operand(op: Operation, anchor: Operation) -> bool:
    """Whether ``op`` is an ``lz.reshape`` that ``anchor``, an ``lz.matmul_integer``, reads as an
    operand: the int8 GEMM reads row-major operands, and a reshape of one is the same bytes
    (ONNX's Flatten before a quantized Gemm was a copy kernel of its own).  Only the two matrices:
    a zero point's shape says whether it is per tensor or per row/column, so a reshaped one
    (ONNX's ``[1]`` to ``[]``) stays its own kernel."""
    return (op.name == "lz.reshape" and anchor.name == "lz.matmul_integer"
            and any(v is op.result for v in anchor.operands[:2]))


def _check_prologue(op, members) -> None:
    """A matmul reads an operand through a transpose or a cast of memory only when nothing outside
    the kernel reads it, and a transpose keeps the operand's contiguous dim (the stored last one)
    among the two matrix dims."""
    if read_outside(op, members):
        raise Refusal(f"'{op.name}' feeding the matmul is also read outside the kernel")
    if op.name == "lz.cast":
        return
    (x,) = op.operands
    rank = x.type.rank
    perm = TransposeOp.permutation(op.definition.attrs(op), rank)
    if rank > 1 and rank - 1 not in perm[-2:]:
        raise Refusal(f"'{op.name}' with perm {list(perm)} makes the contiguous dim a batch dim of the matmul")


def _check_contraction(anchor, ops, producer, members, prologue) -> None:
    kind = CONTRACTION_OPS[anchor.name]
    in_prologue = {id(op) for op in prologue}
    for v in list(anchor.operands) + [op.operands[0] for op in prologue]:
        owner = producer.get(id(v))
        if owner is not None and id(owner) not in in_prologue and not is_reshaped_integer_operand(owner, anchor):
            low = anchor.result.type.element_type
            casts = f" or a cast to {low.name}" if low in LOW_PRECISION else ""
            but = f" but a transpose{casts} of memory" if kind == "matmul" else ""
            raise Refusal(f"a {kind} kernel takes no prologue{but}: '{owner.name}' feeds the {kind}")
    space = _shape(anchor.result)
    for op in ops:
        if op is anchor:
            continue
        if id(op) in in_prologue:
            _check_prologue(op, members)
        elif op.name in MOVEMENT_OPS:
            _check_moved_operand(op, f"the {kind} epilogue", members)
        elif _shape(op.result) != space:
            raise Refusal(f"{kind} epilogue must have the {kind}'s shape: '{op.name}' gives "
                          f"{_fmt(_shape(op.result))}, the {kind} {_fmt(space)}")


def _check_moved_operand(op, reader: str, members) -> None:
    """A contraction's epilogue or a reduction reads data movement only as a moved operand, and
    never a transpose: its reads stride through memory along the kernel's vectorized loop, which
    (unlike an elementwise kernel's) is not tiled for it, so a transpose kernel of its own (blocks
    transposed in registers) then a contiguous read is faster (measured: a 512^3 matmul's
    transposed residual 10-16% slower read in place, row sums of a transposed 1024^2 10x)."""
    if op.name == "lz.transpose":
        raise Refusal(f"'{op.name}' read by {reader} would stride through memory along its vectorized loop "
                      "(a transpose kernel of its own is faster)")
    if read_outside(op, members):  # it would be a result of another shape than the kernel's
        raise Refusal(f"'{op.name}' read by {reader} is also read outside the kernel")


def _check_reduction(reductions, ops, producer, members) -> None:
    first = reductions[0]
    full = _shape(first.operands[0])
    axes = reduced_axes(first)
    for r in reductions[1:]:
        if reduced_axes(r) != axes:
            raise Refusal(f"a reduction already in the group reduces other axes: '{r.name}' reduces "
                          f"{list(reduced_axes(r))}, '{first.name}' {list(axes)}")
        if _shape(r.operands[0]) != full:
            raise Refusal(f"'{r.name}' reduces a {_fmt(_shape(r.operands[0]))} input, the group's "
                          f"reductions a {_fmt(full)} one")
    kept = tuple(1 if i in axes else d for i, d in enumerate(full))
    dropped = tuple(d for i, d in enumerate(full) if i not in axes)
    # a dropped-dims value broadcasts back along the reduced axes only when those lead
    dropped_broadcasts_back = (1,) * (len(full) - len(dropped)) + dropped == kept

    def layout(shape):
        return "full" if shape == full else "kept" if shape == kept else "dropped" if shape == dropped else None

    for op in ops:
        if op.name in REDUCTION_OPS:
            continue  # its input has the full shape (checked above), its result a reduced one
        if op.name in MOVEMENT_OPS:
            _check_moved_operand(op, "the reduction", members)
            continue  # read from memory (checked above): any broadcast of it is index arithmetic
        at = layout(_shape(op.result))
        if at is None:
            raise Refusal(f"iteration space {_fmt(_shape(op.result))} differs from {_fmt(full)} "
                          f"(reduced: {_fmt(kept)})")
        for v in op.operands:
            if id(v) not in producer or producer[id(v)].name in MOVEMENT_OPS:
                continue  # read from memory, or through data movement of memory: any broadcast is index arithmetic
            reads = layout(_shape(v))
            same_index = (reads == at or (reads == "kept" and at == "full")
                          or (reads == "dropped" and at in ("full", "kept") and dropped_broadcasts_back))
            if not same_index:
                raise Refusal(f"'{op.name}' reads '{producer[id(v)].name}' (shape {_fmt(_shape(v))}) broadcast "
                              f"along other axes than the reduced {list(axes)} (keep the reduced dims)")


# --- names ---------------------------------------------------------------------------------------

def kernel_base_name(ops: list[Operation]) -> str:
    """``lz_fused_matmul_add_relu``: the distinct op names of a group in program order; a long
    group keeps its first names (and its matmul, conv or reduction) and ends in ``etc``.  A lone
    transfer is ``lz_transfer_to_cuda``."""
    if len(ops) == 1 and ops[0].name == TRANSFER:
        return f"lz_transfer_to_{ops[0].attributes['device'].value}"
    names: list[str] = []
    for op in ops:
        name = op.name.removeprefix("lz.")
        if name not in names:
            names.append(name)
    if len(names) > MAX_NAME_PARTS + 1:
        keep = names[:MAX_NAME_PARTS]
        anchors = [op.name.removeprefix("lz.") for op in ops
                   if op_role(op) in ("matmul", "conv", "reduction")]
        for a in anchors:
            if a not in keep:
                keep[-1] = a
                break
        names = keep + ["etc"]
    return "lz_fused_" + "_".join(names)


# --- the partitioner -------------------------------------------------------------------------------

@dataclass
class Group:
    id: int
    ops: list  # program order
    fixed: bool = False  # an lz.kernel already made: never merged
    device: "str | None" = None  # where it runs (None: the CPU target, no placement)

    @property
    def is_transfer(self) -> bool:
        """A placed ``lz.transfer``: a kernel of kind ``transfer`` of its own."""
        return self.device is not None and self.ops[0].name == TRANSFER


@dataclass
class PartitionOptions(Pass):
    """The options partition takes (fuse takes them too, for when it partitions itself)."""

    max_ops: int = option(64, "largest number of ops in one kernel")
    epilogues: bool = option(True, "fuse elementwise epilogues into matmul and conv kernels")
    reductions: bool = option(True, "fuse elementwise prologues and epilogues into reduction kernels")
    movement: bool = option(True, "fold data movement into the kernel that reads it (elementwise, epilogue or "
                                  "reduction)")
    prologues: bool = option(True, "fold a transpose or a cast to bf16/f16 into the matmul kernel that reads it")
    cost_model: bool = option(True, "fuse only where the cost model estimates the fused kernel no slower than "
                                    "its parts (lezero/passes/fusion_cost.py)")
    target: str = option(HOST, "where kernels run: cpu, or cuda (ops the GPU backend cannot run go to the "
                               "CPU, with lz.transfer ops between)")


class Partitioner:
    """The groups of one function: ``groups`` by id, and ``graph``, their producer -> consumer
    DiGraph (acyclic throughout)."""

    def __init__(self, func: FuncOp, options: PartitionOptions):
        self.func = func
        self.options = options
        self.groups: dict[int, Group] = {}
        self.graph = nx.DiGraph()
        self.device = place_function(func, options.target) if options.target != HOST else None
        body = func.entry_block
        self.ops = [op for op in body.ops if op.name not in ("lz.constant", "func.return")]
        self.position = {id(op): i for i, op in enumerate(self.ops)}
        self.group_of: dict[int, int] = {}
        self.returned = {id(v) for v in body.terminator.operands} if body.terminator is not None else set()
        self._ids = itertools.count()
        self._estimates: dict[int, fusion_cost.Estimate] = {}
        self._splats: dict[int, bool] = {}  # id(value) -> a splat constant (a weight's check reads all of it)
        for op in self.ops:
            if op.name != "lz.kernel" and (op.definition is None or op.name == "func.call"):
                raise IRError(f"partition cannot put '{op.name}' in a kernel (inline calls and lower "
                              "unregistered ops first)", op.location)
            self._add_group([op], fixed=op.name == "lz.kernel" or op.name in CONTROL_FLOW_OPS)
        for op in self.ops:
            for v in op.operands:
                src = self._producer_group(v)
                dst = self.group_of[id(op)]
                if src is not None and src != dst:
                    self.graph.add_edge(src, dst)

    # --- bookkeeping ---
    def _add_group(self, ops, fixed=False) -> int:
        gid = next(self._ids)
        device = self.device[id(ops[0])] if self.device is not None else None
        self.groups[gid] = Group(gid, sorted(ops, key=lambda o: self.position[id(o)]), fixed, device)
        for op in ops:
            self.group_of[id(op)] = gid
        self.graph.add_node(gid)
        return gid

    def _producer_group(self, v: Value):
        owner = v.owner
        if isinstance(owner, Operation) and id(owner) in self.group_of:
            return self.group_of[id(owner)]
        return None

    def describe(self, gid: int) -> str:
        group = self.groups[gid]
        first = group.ops[0]
        name = first.attributes["name"].value if group.fixed else kernel_base_name(group.ops)
        flc = first.location.file_line_col()
        return f"{name} (line {flc.line})" if flc is not None else name

    # --- profit and legality ---
    def profit(self, a: int, b: int) -> int:
        """Bytes of memory traffic saved by merging producer ``a`` into consumer ``b``."""
        members = {id(op) for g in (a, b) for op in self.groups[g].ops}
        saved = 0
        for op in self.groups[a].ops:
            for r in op.results:
                users = r.users
                if not any(self.group_of.get(id(u)) == b for u in users):
                    continue
                private = id(r) not in self.returned and all(id(u) in members for u in users)
                saved += value_bytes(r) * (2 if private else 1)
        return saved

    def cycle_through(self, a: int, b: int):
        """A third group on a path from ``a`` to ``b`` (merging them would close a cycle), or None:
        the first successor of ``a`` but ``b`` that reaches ``b``.  One search serves them all (a
        group that an earlier successor reached without finding ``b`` cannot lead a later one to
        it); a ``has_path`` per successor was half of DenseNet-121's pass pipeline."""
        successors = self.graph.succ
        seen: set[int] = set()
        for s in successors[a]:
            if s == b or s in seen:
                continue
            seen.add(s)
            stack = [s]
            while stack:
                for n in successors[stack.pop()]:
                    if n == b:
                        return s
                    if n not in seen:
                        seen.add(n)
                        stack.append(n)
        return None

    def can_fuse(self, a: int, b: int) -> tuple[bool, str]:
        """Whether producer group ``a`` and consumer group ``b`` may become one kernel, and why not."""
        ga, gb = self.groups[a], self.groups[b]
        if ga.fixed or gb.fixed:
            return False, "an lz.kernel or a control-flow op is scheduled on its own"
        if ga.is_transfer or gb.is_transfer:  # so no group mixes devices: edges between them pass one
            return False, "a transfer between devices is a kernel of its own"
        if len(ga.ops) + len(gb.ops) > self.options.max_ops:
            return False, f"max-ops={self.options.max_ops} reached"
        through = self.cycle_through(a, b)
        if through is not None:
            return False, f"would create a cycle through {self.describe(through)}"
        ops = sorted(ga.ops + gb.ops, key=lambda o: self.position[id(o)])
        try:
            kind = classify(ops)
        except Refusal as e:
            return False, e.reason
        reason = self._disabled_by_options(kind, ops)
        return (False, reason) if reason else (True, "")

    def _disabled_by_options(self, kind: str, ops) -> str:
        o = self.options
        if kind in ("matmul", "conv") and not o.epilogues and any(op_role(op) == "elementwise" for op in ops):
            return f"epilogues=false: a {kind} kernel holds no epilogue"
        anchor = next((op for op in ops if op.name in CONTRACTION_OPS), None)
        prologue = operand_prologue(anchor, {id(r): op for op in ops for r in op.results}) if anchor else []
        if prologue and not o.prologues:
            return "prologues=false: a matmul kernel reads its operands from memory"
        if kind == "reduction" and not o.reductions:
            return "reductions=false: a reduction kernel holds only its reduction"
        if not o.movement and any(op.name in MOVEMENT_OPS and op not in prologue for op in ops):
            return "movement=false: data movement is a kernel of its own"
        return ""

    # --- the cost model ---
    def candidate(self, ops: list, kind: str) -> fusion_cost.Candidate:
        """``ops`` (program order) as the kernel the cost model estimates."""
        members = {id(op) for op in ops}
        inputs, seen = [], set()
        for op in ops:
            for v in op.operands:
                owner = v.owner
                inside = isinstance(owner, Operation) and id(owner) in members
                if inside or id(v) in seen or self._is_splat_constant(v):
                    continue
                seen.add(id(v))
                inputs.append(v)
        outputs = [r for op in ops for r in op.results
                   if id(r) in self.returned or any(id(u) not in members for u in r.users)]
        return fusion_cost.Candidate(tuple(ops), kind, tuple(inputs), tuple(outputs),
                                     frozenset(id(op) for op in ops if op.name in MOVEMENT_OPS), self.options.target)

    def _is_splat_constant(self, v: Value) -> bool:
        """A splat ``lz.constant``: one scalar to a kernel (fuse clones it into the elementwise ops
        reading it), not a buffer it reads."""
        if id(v) not in self._splats:
            owner = v.owner
            self._splats[id(v)] = (isinstance(owner, Operation) and owner.name == "lz.constant"
                                   and owner.attributes["value"].splat_value() is not None)
        return self._splats[id(v)]

    def estimate(self, gid: int) -> fusion_cost.Estimate:
        """The cost model's estimate of group ``gid`` as a kernel of its own."""
        if gid not in self._estimates:
            ops = self.groups[gid].ops
            self._estimates[gid] = fusion_cost.estimate(self.candidate(ops, classify(ops)))
        return self._estimates[gid]

    def fused_estimate(self, a: int, b: int) -> tuple[fusion_cost.Estimate, fusion_cost.Estimate]:
        """The estimates of ``a`` and ``b`` merged, and of the two as kernels of their own."""
        ops = sorted(self.groups[a].ops + self.groups[b].ops, key=lambda o: self.position[id(o)])
        return fusion_cost.estimate(self.candidate(ops, classify(ops))), self.estimate(a) + self.estimate(b)

    # --- the greedy merge ---
    def run(self) -> None:
        heap: list = []

        def push(a, b):
            key = (self.position[id(self.groups[b].ops[0])], self.position[id(self.groups[a].ops[0])])
            heapq.heappush(heap, (-self.profit(a, b), key, a, b))

        for a, b in self.graph.edges:
            push(a, b)
        log = FUSION_LOG.isEnabledFor(logging.DEBUG)
        where = f"@{self.func.sym_name}: "
        while heap:
            neg_profit, _, a, b = heapq.heappop(heap)
            if a not in self.groups or b not in self.groups or not self.graph.has_edge(a, b):
                continue  # one side was merged since: its new group's pairs were pushed anew
            ok, reason = self.can_fuse(a, b)
            if not ok:
                if log:
                    FUSION_LOG.debug("%srefused %s + %s: %s (would save %d bytes)", where, self.describe(a),
                                     self.describe(b), reason, -neg_profit)
                continue
            estimates = ""
            if self.options.cost_model:
                fused, parts = self.fused_estimate(a, b)
                if fused.seconds > parts.seconds:
                    if log:
                        FUSION_LOG.debug("%srefused %s + %s: the fused kernel would be slower than its parts: "
                                         "estimated %s > %s", where, self.describe(a), self.describe(b), fused,
                                         self._parts_text(a, b))
                    continue
                estimates = f"; estimated {fused} <= {self._parts_text(a, b)}" if log else ""
            before = (self.describe(a), self.describe(b))
            merged = self._merge(a, b)
            if log:
                FUSION_LOG.debug("%smerged %s + %s -> %s (%s), saves %d bytes%s", where, *before,
                                 self.describe(merged), classify(self.groups[merged].ops), -neg_profit, estimates)
            for p in self.graph.predecessors(merged):
                push(p, merged)
            for s in self.graph.successors(merged):
                push(merged, s)

    def _parts_text(self, a: int, b: int) -> str:
        return f"parts {self.estimate(a)} + {self.estimate(b)}"

    def _merge(self, a: int, b: int) -> int:
        ops = self.groups[a].ops + self.groups[b].ops
        gid = self._add_group(ops)
        for old in (a, b):
            self.graph.add_edges_from((p, gid) for p in self.graph.predecessors(old) if p not in (a, b))
            self.graph.add_edges_from((gid, s) for s in self.graph.successors(old) if s not in (a, b))
            self.graph.remove_node(old)
            del self.groups[old]
        return gid

    # --- the result ---
    def stages(self) -> dict[int, int]:
        """Each group's topological generation."""
        return {g: i for i, generation in enumerate(nx.topological_generations(self.graph)) for g in generation}

    def annotate(self) -> None:
        stage = self.stages()
        order = sorted(self.groups, key=lambda g: (stage[g], self.position[id(self.groups[g].ops[0])]))
        number = 0
        for gid in order:
            group = self.groups[gid]
            if group.fixed:
                group.ops[0].attributes[STAGE_ATTR] = IntegerAttr(stage[gid], I64)
                continue
            kind = TRANSFER_KIND if group.is_transfer else classify(group.ops)
            for op in group.ops:
                op.attributes[GROUP_ATTR] = IntegerAttr(number, I64)
                op.attributes[KIND_ATTR] = StringAttr(kind)
                op.attributes[STAGE_ATTR] = IntegerAttr(stage[gid], I64)
                if group.device is not None:
                    op.attributes[DEVICE_ATTR] = StringAttr(group.device)
            number += 1


def clone_operand_casts(func: FuncOp) -> None:
    """Give each matmul that reads a cast to bf16 or f16 (``is_operand_cast``; through a transpose or not)
    a copy of its own when every reader of the cast is such a matmul, so that each can take it as
    its prologue (the GEMM rounds as it packs) and no cast is a kernel: autocast's cast of a
    layer's input feeds the forward matmul and the weight gradient's, a weight's the forward and
    the input gradient's."""
    for op in list(func.entry_block.ops):
        if op.name != "lz.cast" or not op.result.has_uses:
            continue
        readers = list(dict.fromkeys(op.result.users))  # in order of use, each once
        if len(readers) < 2:
            continue

        def reads_as_operand(user) -> bool:  # a matmul, or a transpose only matmuls read
            matmuls = [user] if user.name == "lz.matmul" else user.result.users if user.name == "lz.transpose" else []
            return bool(matmuls) and all(m.name == "lz.matmul" and is_operand_cast(op, m) and m.parent is op.parent
                                         for m in matmuls)

        if all(reads_as_operand(user) and user.parent is op.parent for user in readers):
            for reader in readers[1:]:
                copy = func.entry_block.insert_after(op, op.clone())
                for i, v in enumerate(reader.operands):
                    if v is op.result:
                        reader.set_operand(i, copy.result)


def partition_function(func: FuncOp, options: PartitionOptions) -> None:
    """Place (for a target other than the CPU) and group ``func``'s ops, and annotate them
    (``lz.group``, ``lz.group_kind``, ``lz.stage``, and ``lz.device`` when placed); first, each
    matmul gets a copy of a cast to bf16 or f16 it shares with other matmuls (``clone_operand_casts``)."""
    if options.prologues:
        clone_operand_casts(func)
    p = Partitioner(func, options)
    p.run()
    p.annotate()


@dataclass
class Partition(PartitionOptions):
    name = "partition"
    summary = "Group ops into kernels (annotates lz.group, lz.group_kind, lz.stage); fuse makes them"

    def run(self, module: ModuleOp) -> None:
        for func in module.functions:
            partition_function(func, self)
