"""ONNX -> lz: ``import_model(path_or_model) -> ModuleOp``.

The module holds one ``func.func @main``: its arguments are the graph inputs that are not
initializers (in order), its results the graph outputs; ``lz.input_names`` and ``lz.output_names``
record their ONNX names.  Initializers become ``lz.constant``s; every op carries a ``NameLoc``
naming the ONNX node it came from (``node.name``, or ``<op_type>_<index>`` for a nameless node).

Each ONNX operator has a converter per opset range (``lezero.onnx.registry``, filled by
``lezero/onnx/ops/*.py``): a function of a ``NodeContext`` returning one value per node output,
built from lz ops.

**Constants are evaluated at import.** An lz op whose operands are all known is run through its
numpy reference at once and becomes an ``lz.constant`` (unless that would make a large constant
out of small ones, such as a broadcast, or a dequantized weight), so shape subgraphs (Shape -> Gather -> Concat -> Reshape)
fold away and shapes stay static where the graph inputs' shapes are.  A converter that needs a
value at compile time (Reshape's target shape, Slice's starts, TopK's K, ...) asks for it with
``ctx.require_constant``; when the value is computed from graph inputs the import stops with a
``ValueDependentError`` naming them, and ``import_model(..., constant_inputs={name: array})``
imports the model specialized to those values (``CompiledModel`` does that by itself).

Opsets 11 and later of the default domain are imported; older models are refused unless
``upgrade_opset=True`` converts them first with ``onnx.version_converter``.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lezero.ir.attributes import ArrayAttr, StringAttr
from lezero.ir.builder import Builder
from lezero.ir.core import INPUT_NAMES_ATTR, OUTPUT_NAMES_ATTR, Block, FuncOp, ModuleOp, Value
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.numerics import to_storage
from lezero.ir.location import NameLoc
from lezero.ir.opdef import OpError
from lezero.ir.types import ElementType, FunctionType, TensorType, format_shape
from lezero.ir.verifier import verify
from lezero.runtime.progress import progress
import lezero.onnx.element_types as element_types
import lezero.onnx.registry as registry
from lezero.onnx.errors import DynamicShapeError, OnnxError, UnsupportedError, ValueDependentError
from lezero.onnx.loading import load_model

MIN_OPSET = 11
DEFAULT_DOMAINS = ("", "ai.onnx")

# A folded constant may be this many elements, or as large as its operands together.
FOLD_MAX_ELEMENTS = 1 << 16
# Ops never folded at import (issue 12): a quantized weight stays 8-bit, 4x smaller than its
# float value, and the fold-qdq pass makes its matmul the int8 GEMM.
KEPT_UNFOLDED = frozenset({"lz.dequantize"})
_REQUIRED = object()


def _normalize_domain(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


def _attribute_value(attr: onnx.AttributeProto):
    """An attribute as a Python value: strings decoded, tensors as numpy arrays."""
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return _tensor_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    if isinstance(value, list) and value and isinstance(value[0], onnx.TensorProto):
        return [_tensor_array(v) for v in value]
    return value


def _tensor_array(tensor: onnx.TensorProto) -> np.ndarray:
    et = element_types.from_onnx(tensor.data_type)
    if et is None:
        raise UnsupportedError(f"tensor '{tensor.name}' has element type "
                               f"{element_types.onnx_type_name(tensor.data_type)}, which lezero does not support")
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as e:  # malformed data: wrong byte count, bad raw_data
        raise OnnxError(f"tensor '{tensor.name}' is malformed: {e}") from None
    return to_storage(element_types.to_storage_array(array, et), et)


def tensor_type_of(value_info: onnx.ValueInfoProto, what: str) -> TensorType:
    t = value_info.type
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedError(f"{what} '{value_info.name}' is a {kind or 'value of no type'}: lezero "
                               "supports tensors only")
    code = t.tensor_type.elem_type
    et = element_types.from_onnx(code)
    if et is None:
        raise UnsupportedError(f"{what} '{value_info.name}' has element type "
                               f"{element_types.onnx_type_name(code)}, which lezero does not support")
    if not t.tensor_type.HasField("shape"):
        raise UnsupportedError(f"{what} '{value_info.name}' has no shape (unknown rank): lezero needs the rank")
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim)
    return TensorType(dims, et)


class NodeContext:
    """What a converter sees of one node: its inputs (lz values, None for an absent optional
    input), attributes, opset version, and a builder whose ops fold when their operands are known."""

    def __init__(self, importer: "Importer", node: onnx.NodeProto, name: str, opset: int,
                 inputs: list, attributes: dict, env: dict | None = None, opsets: dict | None = None):
        self.importer = importer
        self.env = env if env is not None else {}
        self.opsets = opsets if opsets is not None else {}
        self.node = node
        self.op_type = node.op_type
        self.name = name
        self.opset = opset
        self.inputs = inputs
        self.location = NameLoc(name)
        self._attributes = attributes
        self.used_attributes: set[str] = set()

    @property
    def b(self) -> Builder:
        """A builder at the end of the block being filled (``@main``'s, or a loop body's)."""
        return Builder.at_end(self.importer.block, self.location)

    # --- errors ---------------------------------------------------------------------------------
    def describe(self) -> str:
        return f"node '{self.name}' ({self.op_type})"

    def error(self, message: str) -> OnnxError:
        return OnnxError(f"{self.describe()}: {message}", self.location)

    def unsupported(self, message: str) -> UnsupportedError:
        return UnsupportedError(f"{self.describe()}: {message}", self.location)

    def dynamic(self, message: str) -> DynamicShapeError:
        """Unsupported because a dim is dynamic (binding the inputs' dims would make it work)."""
        return DynamicShapeError(f"{self.describe()}: {message}", self.location)

    # --- attributes -----------------------------------------------------------------------------
    def attr(self, name: str, default=_REQUIRED):
        """The attribute's Python value, or ``default``; a missing required attribute is an error.
        Reading an attribute marks it as handled: an attribute no converter reads is refused."""
        self.used_attributes.add(name)
        if name in self._attributes:
            return self._attributes[name]
        if default is _REQUIRED:
            raise self.error(f"requires attribute '{name}'")
        return default

    def has_attr(self, name: str) -> bool:
        self.used_attributes.add(name)
        return name in self._attributes

    def ignore_attrs(self, *names: str) -> None:
        """Attributes that do not change the result (a seed of an op that is deterministic here)."""
        self.used_attributes.update(names)

    # --- inputs ---------------------------------------------------------------------------------
    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def input(self, i: int, what: str | None = None) -> Value:
        if not self.has_input(i):
            raise self.error(f"requires input #{i}{' (' + what + ')' if what else ''}")
        return self.inputs[i]

    def optional(self, i: int) -> Value | None:
        return self.inputs[i] if self.has_input(i) else None

    def constant_of(self, v: Value | None) -> np.ndarray | None:
        return None if v is None else self.importer.known.get(v)

    def const(self, i: int) -> np.ndarray | None:
        """Input ``i``'s value when it is known at import (None if absent or computed at run time)."""
        return self.constant_of(self.optional(i))

    def require_constant(self, v: Value, what: str) -> np.ndarray:
        """``v``'s value, which must be known at import; ``ValueDependentError`` naming the graph
        inputs it is computed from otherwise."""
        array = self.constant_of(v)
        if array is not None:
            return array
        sources = sorted(self.importer.sources.get(v, ()))
        if not sources:  # no graph input to bind: a loop or branch body's argument, say
            raise self.unsupported(f"{what} must be known when the model is compiled, but it is computed at run "
                                   "time from values no graph input gives (a loop's or branch's arguments)")
        names = ", ".join(f"'{s}'" for s in sources)
        raise ValueDependentError(
            f"{self.describe()}: {what} must be known when the model is compiled, but it is computed from "
            f"graph input{'s' if len(sources) != 1 else ''} {names} (bind {'them' if len(sources) != 1 else 'it'} "
            "with constant_inputs)", self.location, sources)

    def require_const(self, i: int, what: str) -> np.ndarray:
        return self.require_constant(self.input(i, what), what)

    def ints(self, i: int, what: str) -> list[int] | None:
        """An optional integer input known at import, as a list (None when absent)."""
        if not self.has_input(i):
            return None
        return [int(v) for v in np.asarray(self.require_const(i, what)).reshape(-1)]

    def inline_graph(self, graph: onnx.GraphProto, values: list, what: str, outer: dict | None = None) -> list[Value]:
        """The values a subgraph attribute computes from ``values`` (its inputs, in order); it
        also sees every value of the enclosing graph, or only ``outer`` (name -> value) when given
        (a region, which is isolated from above)."""
        if len(graph.input) != len(values):
            raise self.error(f"{what} takes {len(graph.input)} inputs, given {len(values)}")
        scope = dict(self.env if outer is None else outer)
        for i, v in zip(graph.input, values):
            scope[i.name] = v
        for t in graph.initializer:
            scope[t.name] = self.importer.constant(_tensor_array(t), None, NameLoc(f"{self.name}/{what}/{t.name}"))
        self.importer.convert_nodes(graph.node, scope, self.opsets, prefix=f"{self.name}/{what}/")
        missing = [o.name for o in graph.output if scope.get(o.name) is None]
        if missing:
            raise self.error(f"{what} does not compute its output '{missing[0]}'")
        return [scope[o.name] for o in graph.output]

    # --- types ----------------------------------------------------------------------------------
    @staticmethod
    def dtype(v: Value) -> ElementType:
        return v.type.element_type

    @staticmethod
    def rank(v: Value) -> int:
        return v.type.rank

    def shape(self, v: Value, what: str = "the input") -> tuple:
        """``v``'s shape, which must be static."""
        if not v.type.is_static:
            raise self.dynamic(f"needs a static shape for {what}, got {v.type}")
        return v.type.shape

    # --- building ---------------------------------------------------------------------------------
    def create(self, name: str, operands, attrs: dict | None = None) -> list[Value]:
        """An lz op (results inferred), folded to constants when every operand is known."""
        try:
            op = self.b.create(name, list(operands), attrs or {})
        except OpError as e:
            raise self.error(str(e)) from None
        return self.importer.fold(op, self)

    def op(self, name: str, *operands: Value, **attrs) -> Value:
        return self.create(name, operands, attrs)[0]

    def constant(self, value, element_type: ElementType | None = None) -> Value:
        """An ``lz.constant`` of ``value`` (as ``element_type``'s storage when given)."""
        array = np.asarray(value)
        if element_type is not None:
            array = to_storage(array, element_type)
            t = TensorType(array.shape, element_type)
        else:
            t = None
        return self.importer.constant(array, t, self.location)

    def scalar(self, value, like) -> Value:
        """A rank-0 constant of ``like``'s element type (a value or an ``ElementType``)."""
        et = like if isinstance(like, ElementType) else self.dtype(like)
        return self.constant(np.asarray(value), et)

    def cast(self, v: Value, et: ElementType) -> Value:
        return v if self.dtype(v) == et else self.op("lz.cast", v, to=et)

    def reshape(self, v: Value, shape) -> Value:
        shape = [int(d) for d in shape]
        if tuple(shape) == v.type.shape:
            return v
        return self.op("lz.reshape", v, shape=shape)

    def transpose(self, v: Value, perm) -> Value:
        perm = [int(p) for p in perm]
        if perm == list(range(len(perm))):
            return v
        return self.op("lz.transpose", v, perm=perm)


@dataclass
class Importer:
    model: onnx.ModelProto
    constant_inputs: dict = field(default_factory=dict)
    func: FuncOp = None
    known: dict = field(default_factory=dict)      # Value -> numpy array, for values known at import
    sources: dict = field(default_factory=dict)    # Value -> frozenset of graph-input names it depends on
    functions: dict = field(default_factory=dict)  # (domain, name) -> FunctionProto (model-local)
    bounds: dict = field(default_factory=dict)     # Value -> (lo, hi): a loop index's range, both included
    block: Block = None                            # where converted ops go: @main's block or a region's

    @contextlib.contextmanager
    def inside(self, block: Block):
        """Convert into ``block`` (a region of a loop or an If, ``lezero/onnx/ops/control_flow.py``)."""
        outer, self.block = self.block, block
        try:
            yield block
        finally:
            self.block = outer

    # --- constants and folding ----------------------------------------------------------------------
    def constant(self, array: np.ndarray, t: TensorType | None, location) -> Value:
        b = Builder.at_end(self.block, location)
        try:
            v = b.constant(array, t)
        except TypeError as e:
            raise UnsupportedError(str(e), location) from None
        self.known[v] = v.owner.attributes["value"].array
        return v

    def fold(self, op, ctx: NodeContext) -> list[Value]:
        operands = op.operands
        if op.name == "lz.constant":
            self.known[op.result] = op.attributes["value"].array
            return list(op.results)
        arrays = [self.known.get(v) for v in operands]
        if op.name == "lz.gather" and all(a is not None for a in arrays):
            broadcast = self._fold_gather_of_one_index(op, arrays, ctx)
            if broadcast is not None:
                return [broadcast]
        if operands and all(a is not None for a in arrays) and self._worth_folding(op, arrays):
            try:
                outs = op.definition.evaluate(op, arrays)
            except (OpError, ValueError, IndexError) as e:
                raise ctx.error(f"'{op.name}' op {e}") from None
            folded = []
            for r, out in zip(op.results, outs):
                out = to_storage(np.asarray(out), r.type.element_type).reshape(r.type.shape)
                folded.append(self.constant(np.ascontiguousarray(out), r.type, op.location))
            for r, c in zip(op.results, folded):
                r.replace_all_uses_with(c)
            op.erase()
            return folded
        deps = frozenset().union(*(self.sources.get(v, frozenset()) for v in operands)) if operands else frozenset()
        for r in op.results:
            self.sources[r] = deps
        return list(op.results)

    def _fold_gather_of_one_index(self, op, arrays, ctx: NodeContext) -> Value | None:
        """A gather from a constant table at constant indices that are all one index (BERT's
        token-type rows: ``Gather(table, Expand(0, [b, s]))``) as that one slice, a constant of 1s
        in the indices' dims, broadcast to the result: the same ops at every size of the indices
        (a ``[b, s, h]`` constant would be folded only up to ``FOLD_MAX_ELEMENTS``, a kernel past it,
        so a schedule's structure would change at ``b x s x h`` = 65536); None for other gathers."""
        table, indices = arrays
        result = op.results[0].type
        if indices.size < 2 or not result.is_static or not np.all(indices == indices.reshape(-1)[0]):
            return None
        axis = op.definition.attrs(op).axis
        one = indices.reshape(-1)[:1].reshape((1,) * indices.ndim)
        try:
            (row,) = op.definition.evaluate(op, [table, one])
        except (OpError, ValueError, IndexError) as e:
            raise ctx.error(f"'{op.name}' op {e}") from None
        shape = table.shape[:axis] + one.shape + table.shape[axis + 1:]
        row = to_storage(np.asarray(row), result.element_type).reshape(shape)
        small = self.constant(np.ascontiguousarray(row), TensorType(shape, result.element_type), op.location)
        b = Builder.at_end(self.block, op.location)
        out = b.op("lz.broadcast_to", small, shape=list(result.shape))
        self.sources[out] = frozenset()
        op.results[0].replace_all_uses_with(out)
        op.erase()
        return out

    @staticmethod
    def _worth_folding(op, arrays) -> bool:
        if op.name in KEPT_UNFOLDED or any(not r.type.is_static for r in op.results):
            return False
        size = sum(r.type.num_elements for r in op.results)
        return size <= max(FOLD_MAX_ELEMENTS, sum(a.size for a in arrays))

    # --- the graph ----------------------------------------------------------------------------------
    def run(self) -> ModuleOp:
        model = self.model
        opsets = self.opsets(model.opset_import, "the model")
        graph = model.graph
        for f in model.functions:
            self.functions[(_normalize_domain(f.domain), f.name)] = f
        initializers = {t.name for t in graph.initializer}
        unknown = set(self.constant_inputs) - {i.name for i in graph.input}
        if unknown:
            raise OnnxError(f"constant_inputs names {', '.join(sorted(map(repr, unknown)))}, which "
                            "the graph has no input of")
        arguments = [i for i in graph.input if i.name not in initializers and i.name not in self.constant_inputs]
        arg_types = [tensor_type_of(i, "graph input") for i in arguments]
        self.func = FuncOp("main", FunctionType(arg_types, []), NameLoc(graph.name or "main"))
        self.block = self.func.entry_block
        env: dict[str, Value] = {}
        for i, arg in zip(arguments, self.func.arguments):
            arg.name_hint = _ssa_name(i.name)
            env[i.name] = arg
            self.sources[arg] = frozenset({i.name})
        for t in graph.initializer:
            env[t.name] = self.constant(_tensor_array(t), None, NameLoc(t.name))
        if graph.sparse_initializer:
            raise UnsupportedError(f"sparse initializer '{graph.sparse_initializer[0].values.name}': sparse "
                                   "tensors are not supported")
        for i in graph.input:
            if i.name in self.constant_inputs:
                t = tensor_type_of(i, "graph input")
                array = np.asarray(self.constant_inputs[i.name])
                array = to_storage(element_types.to_storage_array(array, t.element_type), t.element_type)
                if len(array.shape) != t.rank or any(d is not None and d != s for d, s in zip(t.shape, array.shape)):
                    raise OnnxError(f"constant_inputs['{i.name}'] has shape {format_shape(array.shape)}, but "
                                    f"the input is {t}")
                env[i.name] = self.constant(array, TensorType(array.shape, t.element_type), NameLoc(i.name))
        with progress(len(graph.node), "importing ONNX nodes", unit="node") as bar:  # a terminal's bar (issue 16)
            for index, node in enumerate(graph.node):
                self.convert_node(node, index, env, opsets, "", None)
                bar.update()
        results = []
        for out in graph.output:
            if out.name not in env:
                raise OnnxError(f"graph output '{out.name}' is not computed by any node, input or initializer")
            v = env[out.name]
            if v is None:
                raise UnsupportedError(f"graph output '{out.name}' is an output lezero does not compute")
            declared = out.type.tensor_type.elem_type if out.type.HasField("tensor_type") else 0
            if declared and element_types.from_onnx(declared) not in (None, v.type.element_type):
                raise OnnxError(f"graph output '{out.name}' is declared "
                                f"{element_types.onnx_type_name(declared)} but computes {v.type.element_type}",
                                v.owner.location if hasattr(v.owner, "location") else NameLoc(out.name))
            results.append(v)
        Builder.at_end(self.func.entry_block).create("func.return", results, result_types=[])
        self.func.update_function_type()
        self.func.attributes[INPUT_NAMES_ATTR] = ArrayAttr(tuple(StringAttr(i.name) for i in arguments))
        self.func.attributes[OUTPUT_NAMES_ATTR] = ArrayAttr(tuple(StringAttr(o.name) for o in graph.output))
        erase_dead_ops(self.func.entry_block)
        module = ModuleOp([self.func])
        verify(module)
        return module

    def opsets(self, opset_imports, what: str) -> dict[str, int]:
        opsets = {}
        for o in opset_imports:
            opsets[_normalize_domain(o.domain)] = int(o.version)
        default = opsets.get("")
        if not opsets and what == "the model":
            raise OnnxError("the model imports no operator set (opset_import is empty)")
        if default is not None and default < MIN_OPSET:
            raise UnsupportedError(
                f"{what} uses opset {default} of the default ONNX domain; lezero imports opset {MIN_OPSET} and "
                f"later (convert it with onnx.version_converter.convert_version(model, {MIN_OPSET}), or pass "
                "upgrade_opset=True)")
        return opsets

    def convert_nodes(self, nodes, env: dict, opsets: dict, prefix: str, outer_attrs: dict | None = None) -> None:
        for index, node in enumerate(nodes):
            self.convert_node(node, index, env, opsets, prefix, outer_attrs)

    def convert_node(self, node, index, env, opsets, prefix, outer_attrs) -> None:
        name = prefix + (node.name or f"{node.op_type}_{index}")
        location = NameLoc(name)
        domain = _normalize_domain(node.domain)
        inputs = []
        for i, input_name in enumerate(node.input):
            if not input_name:
                inputs.append(None)
                continue
            if input_name not in env:
                raise OnnxError(f"node '{name}' ({node.op_type}) reads '{input_name}', which no earlier node, "
                                "graph input or initializer defines", location)
            v = env[input_name]
            if v is None:
                raise UnsupportedError(f"node '{name}' ({node.op_type}) reads '{input_name}', an output lezero "
                                       "does not compute", location)
            inputs.append(v)
        attributes = {}
        for a in node.attribute:
            if a.ref_attr_name:
                if outer_attrs is None or a.ref_attr_name not in outer_attrs:
                    continue  # a function attribute the caller did not set: the default applies
                attributes[a.name] = outer_attrs[a.ref_attr_name]
                continue
            try:
                attributes[a.name] = _attribute_value(a)
            except UnsupportedError as e:
                raise UnsupportedError(f"node '{name}' ({node.op_type}): attribute '{a.name}': {e.message}",
                                       location) from None
        versions = registry.versions_of(domain, node.op_type)
        fn = None
        if versions:
            if domain not in opsets:
                raise OnnxError(f"node '{name}' ({node.op_type}) is in domain '{domain}', which the model does not "
                                "import (opset_import)", location)
            fn = registry.converter_at(versions, opsets[domain])
        if fn is None:
            local = self.functions.get((domain, node.op_type))
            if local is not None:
                self.inline_function(local, node, name, inputs, attributes, env)
                return
            where = f"{domain}::" if domain else ""
            since = f" before opset {versions[0][0]} (this model imports opset {opsets[domain]})" if versions else ""
            raise UnsupportedError(f"node '{name}': ONNX operator {where}{node.op_type} is not supported by "
                                   f"lezero{since}", location)
        ctx = NodeContext(self, node, name, opsets[domain], inputs, attributes, env, opsets)
        try:
            outputs = fn(ctx)
        except IRError as e:
            if e.location is location or isinstance(e.location, NameLoc):
                raise
            raise OnnxError(f"node '{name}' ({node.op_type}): {e.message}", location) from None
        except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError) as e:
            # inputs a converter did not anticipate (a malformed attribute, an impossible shape):
            # still an error naming the node; the cause stays chained for a bug report
            raise OnnxError(f"node '{name}' ({node.op_type}): cannot convert: {type(e).__name__}: {e}",
                            location) from e
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        ignored = set(attributes) - ctx.used_attributes
        if ignored:
            a = sorted(ignored)[0]
            raise UnsupportedError(f"node '{name}' ({node.op_type}): attribute '{a}' is not supported", location)
        for i, out_name in enumerate(node.output):
            if not out_name:
                continue
            env[out_name] = outputs[i] if i < len(outputs) else None

    def inline_function(self, function: onnx.FunctionProto, node, name, inputs, attributes, env) -> None:
        """A call of a model-local function: its body, with the caller's values and attributes."""
        opsets = self.opsets(function.opset_import, f"function '{function.name}'")
        scope: dict[str, Value] = {}
        for formal, actual in zip(function.input, inputs):
            scope[formal] = actual
        defaults = {}
        for a in function.attribute_proto:
            defaults[a.name] = _attribute_value(a)
        defaults.update(attributes)
        unknown = set(attributes) - set(function.attribute) - set(defaults)
        if unknown:
            raise UnsupportedError(f"node '{name}' ({node.op_type}): attribute '{sorted(unknown)[0]}' is not an "
                                   f"attribute of function '{function.name}'", NameLoc(name))
        self.convert_nodes(function.node, scope, opsets, prefix=name + "/", outer_attrs=defaults)
        for formal, actual in zip(function.output, node.output):
            if actual:
                if formal not in scope:
                    raise OnnxError(f"function '{function.name}' does not compute its output '{formal}'",
                                    NameLoc(name))
                env[actual] = scope[formal]


def _ssa_name(name: str) -> str | None:
    cleaned = "".join(c if c.isalnum() or c in "_$." else "_" for c in name)
    if not cleaned or not (cleaned[0].isalpha() or cleaned[0] == "_"):
        cleaned = "_" + cleaned
    return cleaned


def erase_dead_ops(block) -> None:
    """Erase the ops of ``block`` whose results nothing uses (the import's ops are pure): from the
    last, so an op only dead ops used is erased too; the list is rebuilt once at the end (erasing
    them one by one from it is quadratic: ~40 ms of a GPT-2 import, once per input shape)."""
    dead = set()
    for op in reversed(list(block.ops)):
        if op.name not in ("func.return", "lz.yield") and not any(r.has_uses for r in op.results):
            dead.add(id(op))
            op.parent = None  # out of the block: the list is rebuilt below
            op.erase()
    if dead:
        block.ops[:] = [op for op in block.ops if id(op) not in dead]


def import_model(source, *, constant_inputs: dict | None = None, upgrade_opset: bool = False,
                 base_dir=None) -> ModuleOp:
    """An ONNX model (a path, bytes or an ``onnx.ModelProto``) as an lz module holding ``@main``.

    ``constant_inputs`` maps graph-input names to arrays imported as constants (the model is then
    specialized to those values; they are no longer arguments).  ``upgrade_opset`` converts a model
    older than opset 11 with ``onnx.version_converter`` instead of refusing it.  ``base_dir`` is
    where external data lives when ``source`` is a ``ModelProto``."""
    model = load_model(source, base_dir)
    if upgrade_opset:
        model = upgrade(model)
    return Importer(model, dict(constant_inputs or {})).run()


def default_opset(model: onnx.ModelProto) -> int | None:
    versions = [o.version for o in model.opset_import if _normalize_domain(o.domain) == ""]
    return versions[0] if versions else None


def upgrade(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` converted to opset 11 by ONNX's version converter when it is older."""
    version = default_opset(model)
    if version is None or version >= MIN_OPSET:
        return model
    if version == 8:
        model = _set_aside_scan8(model)
    return _convert_version(model, version)


def _convert_version(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # the converter's errors are RuntimeErrors of its C++ core
        raise UnsupportedError(f"the model uses opset {version}; converting it to opset {MIN_OPSET} failed: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def free_names(graph: onnx.GraphProto) -> list[str]:
    """The names ``graph``'s nodes (and their subgraphs') read that ``graph`` does not define, in
    the order they are first read."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    free: dict[str, None] = {}
    for node in graph.node:
        read = list(node.input)
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                      list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                read += free_names(g)
        for name in read:
            if name and name not in defined:
                free.setdefault(name)
        defined.update(node.output)
    for o in graph.output:  # an output may be an outer value passed straight through
        if o.name not in defined:
            free.setdefault(o.name)
    return list(free)


# Scan-8 nodes are moved to this domain before the version converter runs (it would drop their batch
# axis, from the graph's inputs too); ``lezero/onnx/ops/control_flow.py`` converts them.
SCAN8_DOMAIN = "lezero.scan8"


def _set_aside_scan8(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the opset-8 ``model`` whose Scan nodes (nested ones too) are in ``SCAN8_DOMAIN``,
    each body upgraded on its own, as a model whose extra inputs are the outer names it reads."""
    model = copy.deepcopy(model)

    def set_aside(graph: onnx.GraphProto) -> bool:
        found = False
        for node in graph.node:
            for a in node.attribute:
                for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                    found = set_aside(g) or found
            if node.op_type == "Scan" and _normalize_domain(node.domain) == "":
                body = next(a for a in node.attribute if a.name == "body").g
                n_inputs = len(body.input)
                body.input.extend(onnx.ValueInfoProto(name=name) for name in free_names(body))  # outer values
                body_model = helper.make_model(body, opset_imports=list(model.opset_import) +
                                               [helper.make_opsetid(SCAN8_DOMAIN, 1)], ir_version=model.ir_version)
                body.CopyFrom(_convert_version(body_model, 8).graph)
                del body.input[n_inputs:]
                node.domain = SCAN8_DOMAIN
                found = True
        return found

    if set_aside(model.graph):
        model.opset_import.append(helper.make_opsetid(SCAN8_DOMAIN, 1))
    return model


__all__ = ["import_model", "NodeContext", "MIN_OPSET"]
