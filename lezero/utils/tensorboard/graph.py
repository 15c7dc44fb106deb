"""TensorBoard's ``GraphDef`` from lz IR: what ``SummaryWriter.add_graph`` and
``lezero-opt --emit=tensorboard`` write.

The graph is the compiler's own IR, so it exists for every model the frontends accept (PyTorch's
``add_graph`` fails where its tracer cannot follow the model; ours never traces again).  One node
per argument (named by the argument's ``lz.name``, a state-dict key such as ``fc1.weight``, or the
ONNX input name) and one per op (``func.return`` is not a node: the graph's outputs are the values
nothing else reads).  Each op node carries the op's name as its type, its result shapes as
``_output_shapes`` (TensorBoard prints them on the edges) and ``dtype``, and its source location
(the user's Python line, the ONNX node) as the ``location`` attribute.

Nodes are grouped by module path, TensorBoard's ``/`` scopes: an op located inside a module's
``forward`` (``NameLoc("fc1", ...)``, which ``SummaryWriter.add_graph`` records while it traces an
``nn.Module``; an ONNX node's name) becomes ``fc1/matmul``; a parameter ``fc1.weight`` becomes
``fc1/weight``, so the ``fc1`` box holds its ops and its weights.  Ops in a region (``lz.for``'s
body) are nodes inside their op's box.

``fused=True`` draws the graph the CPU runs instead: after ``lezero.codegen.schedule`` every
``lz.kernel`` is a box named by its kernel symbol (``lz_fused_matmul_add_relu_0``) holding the ops
fused into it, so the graph tab shows what fusion did.  That needs static shapes: a traced model's
dynamic batch is bound from ``shapes`` (the example inputs' shapes).
"""
from __future__ import annotations

from tensorboardX.proto.attr_value_pb2 import AttrValue
from tensorboardX.proto.graph_pb2 import GraphDef
from tensorboardX.proto.node_def_pb2 import NodeDef
from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboardX.proto.versions_pb2 import VersionDef

from lezero.ir.core import INPUT_NAMES_ATTR, FuncOp, ModuleOp
from lezero.ir.location import FusedLoc, Location, NameLoc, UnknownLoc
from lezero.ir.types import TensorType
from lezero.runtime.plan import specialize

NAME_ATTR = "lz.name"  # the argument attribute jit.trace names parameters with
_TERMINATORS = ("func.return", "lz.yield")


def _shape_attr(types) -> AttrValue:
    shapes = []
    for t in types:
        dims = t.shape if isinstance(t, TensorType) else ()
        shapes.append(TensorShapeProto(dim=[TensorShapeProto.Dim(size=-1 if d is None or d < 0 else d)
                                            for d in dims]))
    return AttrValue(list=AttrValue.ListValue(shape=shapes))


def _dtype(types) -> str:
    return ", ".join(str(t.element_type) if isinstance(t, TensorType) else str(t) for t in types)


def scope_of(location: Location) -> str:
    """The ``/`` scope an op located at ``location`` goes in: the outermost name of a ``NameLoc``
    (a module path ``layer1.0.conv1`` or an ONNX node name ``/layer1/layer1.0/conv1/Conv``), its
    dots and slashes as TensorBoard's separators; ``""`` for a plain file location."""
    if isinstance(location, FusedLoc):
        for inner in location.locations:
            if scope_of(inner):
                return scope_of(inner)
        return ""
    if isinstance(location, NameLoc):
        return "/".join(p for p in location.name.replace(".", "/").split("/") if p)
    return ""


def _describe(location: Location) -> str:
    return "" if isinstance(location, UnknownLoc) else location.describe()


class _Names:
    """Unique node names: the first ``fc1/add`` keeps its name, the next is ``fc1/add_1``."""

    def __init__(self):
        self.used: set[str] = set()

    def make(self, wanted: str) -> str:
        name, k = wanted, 0
        while name in self.used:
            k += 1
            name = f"{wanted}_{k}"
        self.used.add(name)
        return name


def argument_names(func: FuncOp, module: ModuleOp | None = None) -> list[str]:
    """Each argument's display name: its ``lz.name``, the ONNX input name, else ``input<i>``."""
    names = [f"input{i}" for i in range(len(func.arguments))]
    onnx_names = func.attributes.get(INPUT_NAMES_ATTR)
    if onnx_names is not None:
        for i, n in enumerate(onnx_names.values):
            names[i] = f"input/{n.value}"
    arg_attrs = func.attributes.get("arg_attrs")
    if arg_attrs is not None:
        for i, d in enumerate(arg_attrs.values):
            named = d.get(NAME_ATTR)
            if named is not None:
                names[i] = named.value.replace(".", "/")
    return names


class _GraphBuilder:
    def __init__(self):
        self.nodes: list[NodeDef] = []
        self.names = _Names()
        self.node_of: dict[int, str] = {}  # id(Value) -> the node (":k" for result k > 0)

    def value_input(self, value) -> str:
        return self.node_of.get(id(value), "")

    def add_node(self, name: str, op_type: str, inputs: list[str], result_types, location: Location,
                 extra: dict | None = None) -> str:
        attr = {"_output_shapes": _shape_attr(result_types), "dtype": AttrValue(s=_dtype(result_types).encode())}
        described = _describe(location)
        if described:
            attr["location"] = AttrValue(s=described.encode())
        for key, text in (extra or {}).items():
            attr[key] = AttrValue(s=text.encode())
        unique = self.names.make(name)
        self.nodes.append(NodeDef(name=unique, op=op_type, input=[i for i in inputs if i], attr=attr))
        return unique

    def define(self, values, node: str) -> None:
        for k, v in enumerate(values):
            self.node_of[id(v)] = node if k == 0 else f"{node}:{k}"

    def add_ops(self, ops, prefix: str) -> None:
        for op in ops:
            if op.name in _TERMINATORS:
                continue
            scope = scope_of(op.location)
            short = op.name.split(".", 1)[-1]
            path = "/".join(p for p in (prefix, scope, short) if p)
            node = self.add_node(path, op.name, [self.value_input(v) for v in op.operands],
                                 [r.type for r in op.results], op.location)
            self.define(op.results, node)
            for r, region in enumerate(op.regions):
                for block in region.blocks:
                    self.define_block_args(block, f"{node}/region{r}")
                    self.add_ops(block.ops, f"{node}/region{r}")

    def define_block_args(self, block, prefix: str) -> None:
        for i, arg in enumerate(block.args):
            node = self.add_node(f"{prefix}/arg{i}", "lz.block_argument", [], [arg.type], UnknownLoc())
            self.node_of[id(arg)] = node

    def graph_def(self) -> GraphDef:
        return GraphDef(node=self.nodes, versions=VersionDef(producer=22))


def graph_def(module: ModuleOp, entry: str | None = None) -> GraphDef:
    """The graph of function ``@entry`` (default: the module's first function) as written."""
    func = _entry(module, entry)
    builder = _GraphBuilder()
    for arg, name in zip(func.arguments, argument_names(func)):
        builder.node_of[id(arg)] = builder.add_node(name, "lz.argument", [], [arg.type], UnknownLoc())
    builder.add_ops(func.entry_block.ops, "")
    return builder.graph_def()


def fused_graph_def(module: ModuleOp, entry: str | None = None, shapes: list | None = None,
                    target: str = "cpu") -> GraphDef:
    """The graph of ``@entry`` after the kernel pipeline for ``target``: one box per kernel (named
    by its symbol, with its kind as an attribute) holding the ops fused into it.  ``shapes`` bind
    the arguments' dynamic dims (default: the function's argument types, which must be static)."""
    func = _entry(module, entry)
    if shapes is None:
        if not all(isinstance(a.type, TensorType) and a.type.is_static for a in func.arguments):
            raise ValueError(f"the fused graph of @{func.sym_name} needs static shapes: its arguments are "
                             f"{', '.join(str(a.type) for a in func.arguments)}; pass the example inputs' shapes")
        shapes = [a.type.shape for a in func.arguments]
    scheduled = specialize(module, func.sym_name, [tuple(s) for s in shapes], target).lookup(func.sym_name)
    builder = _GraphBuilder()
    for arg, name in zip(scheduled.arguments, argument_names(func)):
        builder.node_of[id(arg)] = builder.add_node(name, "lz.argument", [], [arg.type], UnknownLoc())
    for op in scheduled.entry_block.ops:
        if op.name in _TERMINATORS:
            continue
        if op.name != "lz.kernel":
            builder.add_ops([op], "")
            continue
        attrs = op.definition.attrs(op)
        body = op.regions[0].blocks[0]
        for arg, operand in zip(body.args, op.operands):  # the region reads the kernel's operands
            builder.node_of[id(arg)] = builder.value_input(operand)
        kernel = builder.names.make(attrs.name)
        builder.add_ops(body.ops, kernel)
        terminator = body.ops[-1]
        for result, yielded in zip(op.results, terminator.operands):
            builder.node_of[id(result)] = builder.value_input(yielded)
    return builder.graph_def()


def _entry(module: ModuleOp, entry: str | None) -> FuncOp:
    if entry is None:
        if not module.functions:
            raise ValueError("add_graph: the module has no function")
        return module.functions[0]
    return module.lookup(entry)
