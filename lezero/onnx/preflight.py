"""``lezero-compile --check``: everything that stops an ONNX model from compiling, in one run.

The importer stops at the first node it cannot convert; the check imports the model with a
``CheckingImporter`` (the importer itself, so the answer is the importer's) that records a node's
error instead, marks the node's outputs as missing, and goes on; a node reading a missing value is
skipped silently (its producer is already reported). What is reported, each with the node or input
it is about and what to do:

- an ONNX operator no converter handles (``lezero.onnx.registry``), an attribute or attribute value
  a converter refuses, an unsupported element type, an opset the version converter cannot lift;
- a dim of a graph input that is dynamic and not bound by ``--shape`` (for the rest of the check
  it is taken as 1, so that the converters see the static shapes they will see once it is bound);
- a value the compiler needs at compile time that is computed from a graph input (bind it with
  ``--constant-input``);
- a dynamic dim that remains inside the graph once the inputs are bound (a node whose result
  shape depends on data).
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.location import NameLoc
from lezero.ir.types import TensorType, format_shape
from lezero.onnx.errors import OnnxError, UnsupportedError, ValueDependentError
from lezero.onnx.importer import Importer, upgrade
from lezero.onnx.native import NativeCompileError, bind_onnx_shapes, onnx_inputs

ADVICE = {
    "operator": "export the model without it (another exporter option or opset, or a graph rewrite such as "
                "onnx-simplifier), or add a converter for it in lezero/onnx/ops/",
    "unsupported": "export the model without this attribute value or type, or extend its converter in "
                   "lezero/onnx/ops/",
    "invalid": "the model is malformed here; check it with onnx.checker.check_model",
}


@dataclass
class Finding:
    kind: str    # "operator" | "unsupported" | "value-dependent" | "dynamic-dim" | "invalid" | "shape"
    where: str   # "node 'conv1' (Conv)", "input 'x'", "the model"
    message: str
    advice: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}\n    what to do: {self.advice}"


class CheckingImporter(Importer):
    """The importer, recording each node's error and going on past it."""

    def __init__(self, model, constant_inputs=None):
        super().__init__(model, dict(constant_inputs or {}))
        self.findings: list[Finding] = []
        self.missing: set[str] = set()  # ONNX value names whose producer failed

    def convert_node(self, node, index, env, opsets, prefix, outer_attrs) -> None:
        name = prefix + (node.name or f"{node.op_type}_{index}")
        if any(i in self.missing for i in node.input if i):
            self._lose(node, env)
            return
        try:
            super().convert_node(node, index, env, opsets, prefix, outer_attrs)
        except OnnxError as e:
            self.findings.append(_finding(e, f"node '{name}' ({node.op_type})"))
            self._lose(node, env)

    def _lose(self, node, env) -> None:
        for out in node.output:
            if out:
                self.missing.add(out)
                env[out] = None


def _finding(e: OnnxError, where: str) -> Finding:
    message = e.message
    if message.startswith(where + ": "):
        message = message[len(where) + 2:]
    elif message.startswith("node '") and ": " in message:  # "node 'x': ONNX operator Foo is not supported"
        message = message.split(": ", 1)[1]
    if isinstance(e, ValueDependentError):
        names = ", ".join(f"--constant-input {n}=FILE.npy" for n in e.inputs) or "--constant-input NAME=FILE.npy"
        return Finding("value-dependent", where, message.replace(" (bind them with constant_inputs)", "")
                       .replace(" (bind it with constant_inputs)", ""),
                       f"compile for fixed values of the inputs it depends on: {names}")
    if isinstance(e, UnsupportedError):
        kind = "operator" if "ONNX operator" in message else "unsupported"
        return Finding(kind, where, message, ADVICE[kind])
    return Finding("invalid", where, message, ADVICE["invalid"])


def check_model(model, shapes: dict | None = None, constant_inputs: dict | None = None) -> list[Finding]:
    """Everything that stops ``model`` (an ``onnx.ModelProto``, external data loaded) from
    compiling with these ``shapes`` and ``constant_inputs``; empty when it compiles as it is."""
    shapes = dict(shapes or {})
    constant_inputs = dict(constant_inputs or {})
    findings: list[Finding] = []

    # Dynamic dims of the graph inputs; the rest of the check binds them to 1.
    declared = onnx_inputs(model, constant_inputs)
    known = {name for name, _, _ in declared}
    for name in shapes:
        if name not in known:
            findings.append(Finding("shape", f"--shape {name}", f"'{name}' is not a graph input",
                                    f"name one of: {', '.join(repr(n) for n in sorted(known)) or 'none'}"))
    assumed = {}
    for name, dims, dim_names in declared:
        given = shapes.get(name)
        if given is not None:
            if len(given) != len(dims) or any(d is not None and d != g for d, g in zip(dims, given)):
                findings.append(Finding("shape", f"input '{name}'",
                                        f"--shape {name}={'x'.join(map(str, given))} does not fit its shape "
                                        f"{format_shape(dims)}", "give a shape of the same rank that keeps its "
                                                                 "static dims"))
                given = None
            else:
                assumed[name] = tuple(given)
                continue
        dynamic = [i for i, d in enumerate(dims) if d is None]
        if dynamic:
            example = "x".join("1" if d is None else str(d) for d in dims)
            for i in dynamic:
                label = f" ('{dim_names[i]}')" if dim_names[i] else ""
                findings.append(Finding("dynamic-dim", f"input '{name}'",
                                        f"dim {i}{label} of {format_shape(dims)} is dynamic",
                                        f"bind it at compile time: --shape {name}={example} (your sizes)"))
        assumed[name] = tuple(1 if d is None else d for d in dims)
    try:
        model = bind_onnx_shapes(model, assumed, constant_inputs)
    except NativeCompileError:
        pass  # already reported above

    try:
        model = upgrade(model)
    except UnsupportedError as e:
        return findings + [_finding(e, "the model")]
    importer = CheckingImporter(model, constant_inputs)
    try:
        importer.run()
    except OnnxError as e:
        # After node errors, failing to return a lost output is their consequence, not news.
        if not importer.findings or "lezero does not compute" not in e.message:
            where = f"node '{e.location.name}'" if isinstance(e.location, NameLoc) else "the model"
            importer.findings.append(_finding(e, where))
    findings += importer.findings

    # Dims that stay dynamic inside the graph, by the node that makes them.
    if importer.func is not None:
        seen = set()
        for op in importer.func.entry_block.ops:
            for r in op.results:
                if isinstance(r.type, TensorType) and not r.type.is_static and isinstance(op.location, NameLoc):
                    node = op.location.name
                    if node not in seen:
                        seen.add(node)
                        findings.append(Finding("dynamic-dim", f"node '{node}'",
                                                f"computes {r.type}, whose shape depends on data",
                                                "the compiler needs static shapes: bind the inputs it depends "
                                                "on with --constant-input, or export the model with this shape "
                                                "fixed"))
    return findings
