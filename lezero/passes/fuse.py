"""fuse: turn each partition group into one ``lz.kernel`` op (issue 3).

Reads the ``lz.group`` / ``lz.group_kind`` annotations ``partition`` wrote.  A function none of
whose ops is annotated is partitioned first, with fuse's own options (partition's: ``max-ops``,
...), so ``fuse`` alone is the whole job; a function where only some ops are annotated is an
error (something ran between partition and fuse), and so is a grouping that is not a valid
kernel or makes a cycle.

Each group becomes::

    %r:2 = "lz.kernel"(%a, %b) ({
    ^bb0(%x: ..., %y: ...):          the group's inputs from outside, in first-use order
      ...                            the group's ops, in program order, annotations dropped
      "lz.yield"(%1, %0)             the group's values used outside it, in program order
    }) {kind = "matmul", name = "lz_fused_matmul_add_relu_0", lz.stage = 1 : i64}

With a target other than the CPU, the kernel also gets the group's ``lz.device`` as its
``device`` attribute, and a group of kind ``transfer`` (one ``lz.transfer``) becomes a kernel
named ``lz_transfer_to_<device>_<n>``.

Splat constants read by elementwise ops are cloned into the kernel (a splat is one scalar to the
code generator); every other constant is a kernel operand.  The name lists the distinct op names
in program order (``kernel_base_name``) and a number unique in the module.  Grouped ops nothing
reads are erased first, so every kernel yields something.  After fuse a function body holds only
``lz.constant``, ``lz.kernel`` and ``func.return``: constants first, then the kernels by stage
(and program order within a stage), which is a topological order.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import networkx as nx

from lezero.ir.attributes import IntegerAttr, StringAttr
from lezero.ir.core import Block, FuncOp, ModuleOp, Operation, Region, Value
from lezero.ir.dialect.collective import START, WAIT
from lezero.ir.diagnostics import IRError
from lezero.ir.location import UNKNOWN, FusedLoc, UnknownLoc
from lezero.ir.opdef import ELEMENTWISE
from lezero.ir.types import I64
from lezero.passes.partition import (CONTROL_FLOW_OPS, DEVICE_ATTR, GROUP_ATTR, KIND_ATTR, PARTITION_ATTRS,
                                     STAGE_ATTR, TRANSFER_KIND, PartitionOptions, Refusal, classify,
                                     kernel_base_name, partition_function)
from lezero.passes.placement import TRANSFER
from lezero.passes.rewriter import is_trivially_dead


def clones_into_kernel(v: Value, user: Operation) -> bool:
    """Whether ``user`` (an op going into a kernel) gets its own copy of constant ``v``: splat
    constants read by elementwise ops do; other constants are kernel operands."""
    owner = v.owner
    if not (isinstance(owner, Operation) and owner.name == "lz.constant"):
        return False
    definition = user.definition
    return (definition is not None and definition.has_trait(ELEMENTWISE)
            and owner.attributes["value"].splat_value() is not None)


def _fused_location(ops):
    locations = []
    for op in ops:
        if not isinstance(op.location, UnknownLoc) and op.location not in locations:
            locations.append(op.location)
    if not locations:
        return UNKNOWN
    return locations[0] if len(locations) == 1 else FusedLoc(tuple(locations))


def _read_groups(func: FuncOp, shrunk: set) -> tuple[dict[int, list], dict[int, str], dict[int, "str | None"]]:
    """Group number -> ops (program order), -> kind, checked against the ops (groups in
    ``shrunk`` lost dead ops: their kind is what is left of them), and -> device (None: not placed)."""
    groups: dict[int, list] = {}
    kinds: dict[int, str] = {}
    devices: dict[int, "str | None"] = {}
    for op in func.entry_block.ops:
        if op.name in ("lz.constant", "lz.kernel", "func.return") or op.name in CONTROL_FLOW_OPS:
            continue
        group, kind = op.attributes.get(GROUP_ATTR), op.attributes.get(KIND_ATTR)
        if not isinstance(group, IntegerAttr) or not isinstance(kind, StringAttr):
            raise IRError(f"'{op.name}' has no {GROUP_ATTR} and {KIND_ATTR}, though other ops of "
                          f"@{func.sym_name} do: run partition right before fuse", op.location)
        groups.setdefault(group.value, []).append(op)
        previous = kinds.setdefault(group.value, kind.value)
        if previous != kind.value:
            raise IRError(f"'{op.name}' says group {group.value} is {kind.value!r}, another op of it "
                          f"says {previous!r}", op.location)
        device = op.attributes.get(DEVICE_ATTR)
        device = device.value if isinstance(device, StringAttr) else None
        previous = devices.setdefault(group.value, device)
        if previous != device:
            raise IRError(f"'{op.name}' says group {group.value} runs on {device or 'no device'}, another op of "
                          f"it says {previous or 'no device'}", op.location)
    for number, ops in groups.items():
        if kinds[number] == TRANSFER_KIND:
            if len(ops) != 1 or ops[0].name != TRANSFER:
                raise IRError(f"group {number} is annotated 'transfer', but a transfer kernel holds one "
                              f"'{TRANSFER}'", ops[0].location)
            continue
        try:
            kind = classify(ops)
        except Refusal as e:
            raise IRError(f"group {number} cannot be one kernel: {e.reason}", ops[0].location) from None
        if number in shrunk:
            kinds[number] = kind
        elif kind != kinds[number]:
            raise IRError(f"group {number} is annotated {kinds[number]!r}, but its ops make a {kind!r} kernel",
                          ops[0].location)
    return groups, kinds, devices


def _erase_dead_grouped_ops(body: Block) -> set:
    """Erase the grouped ops nothing reads (dce's job, but a kernel must yield something that is
    read); return the numbers of the groups that lost ops."""
    shrunk = set()
    for op in reversed(list(body.ops)):
        group = op.attributes.get(GROUP_ATTR)
        if group is not None and is_trivially_dead(op):
            shrunk.add(getattr(group, "value", None))
            op.erase()
    return shrunk


def fuse_function(func: FuncOp, options: PartitionOptions, names: "KernelNamer") -> None:
    body = func.entry_block
    if not any(GROUP_ATTR in op.attributes for op in body.ops):
        partition_function(func, options)
    used_constants = {id(op) for op in body.ops if op.name == "lz.constant" and op.result.uses}
    shrunk = _erase_dead_grouped_ops(body)
    groups, kinds, devices = _read_groups(func, shrunk)
    position = {id(op): i for i, op in enumerate(body.ops)}

    # the group graph: numbered groups, and the kernels already there as nodes of their own
    node_of: dict[int, object] = {}
    nodes: dict[object, list] = {}
    for number, ops in groups.items():
        nodes[("group", number)] = ops
        for op in ops:
            node_of[id(op)] = ("group", number)
    for op in body.ops:
        if op.name == "lz.kernel" or op.name in CONTROL_FLOW_OPS:  # scheduled as they are
            nodes[("kernel", id(op))] = [op]
            node_of[id(op)] = ("kernel", id(op))
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    for node, ops in nodes.items():
        for op in ops:
            for v in op.operands:
                src = node_of.get(id(v.owner)) if isinstance(v.owner, Operation) else None
                if src is not None and src != node:
                    graph.add_edge(src, node)
    if not nx.is_directed_acyclic_graph(graph):
        cycle = nx.find_cycle(graph)
        first = nodes[cycle[0][0]][0]
        shown = " -> ".join(f"group {u[1]}" if u[0] == "group" else "an lz.kernel" for u, _ in cycle)
        raise IRError(f"the groups of @{func.sym_name} form a cycle ({shown}): each must be able to run "
                      "after all it reads", first.location)
    stage = {n: i for i, generation in enumerate(nx.topological_generations(graph)) for n in generation}
    order = _launch_order(graph, nodes, stage, position)

    kernels = []
    for node in order:
        ops = nodes[node]
        if node[0] == "kernel":
            ops[0].attributes[STAGE_ATTR] = IntegerAttr(stage[node], I64)
            kernels.append(ops[0])
        else:
            kernels.append(_build_kernel(ops, kinds[node[1]], devices[node[1]], stage[node], names))

    # the grouped ops are now inside kernels: drop the originals, then lay the body out
    grouped = [op for ops in groups.values() for op in ops]
    for op in grouped:
        op.drop_all_references()
    terminator = body.terminator
    constants = [op for op in body.ops if op.name == "lz.constant"]
    for op in list(body.ops):
        body.remove(op)
    for op in constants:
        if op.result.uses or id(op) not in used_constants:
            body.append(op)
        else:  # read only by ops that got their own copy (or by dead ones)
            op.drop_all_references()
    for op in kernels:
        body.append(op)
    body.append(terminator)


# issue 14: a collective's start runs as soon as its operand is computed
def _launch_order(graph: nx.DiGraph, nodes: dict, stage: dict, position: dict) -> list:
    """The kernels by (topological generation, program position), except that an
    ``lz.all_reduce_start`` and the flattening its bucket needs (kernels of reshapes and concats
    read only by starts and waits, or by such kernels) run as soon as they are ready: the
    all-reduce then overlaps the kernels of the generation that computed its last gradient, not
    only those after it.  Without a start
    this is exactly the sorted order (Kahn's algorithm taking the smallest key that is ready)."""
    def key(n) -> tuple:
        return stage[n], position[id(nodes[n][0])]
    starts = {n for n, ops in nodes.items() if any(op.name == START for op in ops)}
    if not starts:
        return sorted(nodes, key=key)
    waits = {n for n, ops in nodes.items() if any(op.name == WAIT for op in ops)}  # they read the bucket too
    urgent = set(starts)
    for n in reversed(list(nx.topological_sort(graph))):
        if graph.out_degree(n) and all(s in urgent or s in waits for s in graph.successors(n)) and \
                all(op.name in ("lz.reshape", "lz.concat") for op in nodes[n]):
            urgent.add(n)
    waiting = {n: graph.in_degree(n) for n in nodes}
    ready = [((n not in urgent, *key(n)), n) for n, d in waiting.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(n)
        for s in graph.successors(n):
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, ((s not in urgent, *key(s)), s))
    return order


def _build_kernel(ops: list, kind: str, device: "str | None", stage: int, names: "KernelNamer") -> Operation:
    members = {id(op) for op in ops}
    outputs = [r for op in ops for r in op.results if any(id(u.op) not in members for u in r.uses)]
    block = Block()
    inputs: list[Value] = []
    inside: dict[int, Value] = {}   # id(outer value) -> its value in the kernel (results, arguments)
    constants: dict[int, Value] = {}
    for op in ops:
        operands = []
        for v in op.operands:
            if id(v) in inside and id(v.owner) in members:
                operands.append(inside[id(v)])
            elif clones_into_kernel(v, op):
                if id(v) not in constants:
                    c = v.owner
                    copy = Operation(c.name, (), c.result_types, c.attributes, location=c.location)
                    block.append(copy)
                    constants[id(v)] = copy.result
                operands.append(constants[id(v)])
            else:
                if id(v) not in inside:
                    inputs.append(v)
                    inside[id(v)] = block.add_argument(v.type, location=getattr(v, "location", UNKNOWN))
                operands.append(inside[id(v)])
        attributes = {k: a for k, a in op.attributes.items() if k not in PARTITION_ATTRS}
        copy = Operation(op.name, operands, op.result_types, attributes, location=op.location)
        block.append(copy)
        inside.update(zip(map(id, op.results), copy.results))
    block.append(Operation("lz.yield", [inside[id(r)] for r in outputs]))
    attributes = {"kind": StringAttr(kind), "name": StringAttr(names.next(kernel_base_name(ops))),
                  STAGE_ATTR: IntegerAttr(stage, I64)}
    if device is not None:
        attributes["device"] = StringAttr(device)
    kernel = Operation("lz.kernel", inputs, [r.type for r in outputs], attributes, [Region([block])],
                       _fused_location(ops))
    for old, new in zip(outputs, kernel.results):
        old.replace_uses_if(new, lambda use: id(use.op) not in members)
    return kernel


class KernelNamer:
    """Kernel names unique in a module: ``<base>_<n>`` with one counter for the module."""

    def __init__(self, module: ModuleOp):
        self.taken = {op.attributes["name"].value for op in module.walk()
                      if op.name == "lz.kernel" and isinstance(op.attributes.get("name"), StringAttr)}
        self.counter = 0

    def next(self, base: str) -> str:
        while True:
            name = f"{base}_{self.counter}"
            self.counter += 1
            if name not in self.taken:
                self.taken.add(name)
                return name


@dataclass
class Fuse(PartitionOptions):
    name = "fuse"
    summary = "Make each partition group one lz.kernel (partitioning first where no op is annotated)"

    def run(self, module: ModuleOp) -> None:
        names = KernelNamer(module)
        for func in module.functions:
            fuse_function(func, self, names)
