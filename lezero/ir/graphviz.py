"""Graphviz pictures of a function's data flow (``lezero-opt --emit=dot``)."""
from __future__ import annotations

from lezero.ir.core import FuncOp, ModuleOp


def _quote(s: str) -> str:
    return '"' + s.replace('"', '\\"') + '"'


def function_to_dot(func: FuncOp) -> str:
    """One ``digraph``: arguments and ops are nodes, edges follow values (labelled with their types)."""
    ids: dict[int, str] = {}
    lines = [f"digraph {_quote(func.sym_name)} {{", "  rankdir=TB;",
             '  node [fontname="monospace", fontsize=10];', '  edge [fontname="monospace", fontsize=8];']
    for i, arg in enumerate(func.arguments):
        ids[id(arg)] = f"arg{i}"
        lines.append(f"  arg{i} [shape=ellipse, label={_quote(f'%arg{i}: {arg.type}')}];")
    for n, op in enumerate(op for op in func.entry_block.ops):
        node = f"op{n}"
        label = "return" if op.name == "func.return" else op.name
        shape = "doubleoctagon" if op.name == "func.return" else "box"
        if op.name == "lz.constant":
            label += f"\\n{op.result.type}"
        lines.append(f"  {node} [shape={shape}, label={_quote(label)}];")
        for v in op.operands:
            src = ids.get(id(v))
            if src is not None:
                lines.append(f"  {src} -> {node} [label={_quote(str(v.type))}];")
        for r in op.results:
            ids[id(r)] = node
    lines.append("}")
    return "\n".join(lines) + "\n"


def module_to_dot(module: ModuleOp) -> str:
    return "".join(function_to_dot(f) for f in module.functions)
