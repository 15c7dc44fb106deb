"""The house rules of lezero's layout, read from the source (no import needed):

- **layers import downward**: ``ir <- passes <- codegen <- runtime <- {eager, onnx, tflite} <- {nn, optim,
  utils, quantization, amp, distributed, profiler} <- jit <- cli``; a module may import its own
  layer and those below, never one above, not even lazily inside a function (a lazy import hides the dependency, it does not remove it);
- **no import cycle at load time** (module-level imports, ``TYPE_CHECKING`` blocks aside);
- **every module lives in a layer** (no loose modules at the package root besides ``__init__``, the
  facade that assembles ``import lezero as lz``);
- **no backend imports another** (``codegen/llvm`` and ``codegen/triton`` share only the neutral core);
- **no file over 700 lines** unless its docstring says why, in a paragraph starting
  ``Why this file is long:``.
"""
from __future__ import annotations

import ast
import pathlib

import networkx as nx
import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "lezero"
LAYERS = {"ir": 0, "passes": 1, "codegen": 2, "runtime": 3, "eager": 4, "onnx": 4, "tflite": 4,
          "nn": 5, "optim": 5, "utils": 5, "quantization": 5, "amp": 5, "distributed": 5, "profiler": 5,
          "jit": 6, "cli": 7}
BACKENDS = ("lezero.codegen.llvm", "lezero.codegen.triton")
MAX_LINES = 700
LONG_FILE_REASON = "Why this file is long:"


def _modules() -> dict[str, pathlib.Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, path: pathlib.Path):
    """(imported lezero module, at load time?) for every import statement of a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(target: str) -> str:
        while target not in MODULES and "." in target:
            target = target.rpartition(".")[0]
        return target

    def visit(node: ast.AST, at_load: bool):
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            load = at_load and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "lezero":
                        yield resolve(alias.name), load, child.lineno
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[:len(package.split(".")) - child.level + 1]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                if module.split(".")[0] == "lezero":
                    for alias in child.names:
                        submodule = f"{module}.{alias.name}"
                        yield resolve(submodule if submodule in MODULES else module), load, child.lineno
            yield from visit(child, load)

    yield from visit(ast.parse(path.read_text(), filename=str(path)), True)


IMPORTS = {name: [(target, load, line) for target, load, line in _imports(name, path) if target != name]
           for name, path in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}"


def test_every_module_lives_in_a_layer():
    loose = sorted(m for m in MODULES if m != "lezero" and _layer(m) is None)
    assert not loose, f"modules outside every layer {sorted(LAYERS)}: {loose}"


def test_layers_import_downward():
    upward = []
    for module, imports in sorted(IMPORTS.items()):
        if module == "lezero":
            continue  # the facade: it assembles the public API from every layer
        for target, load, line in imports:
            if target == "lezero":
                upward.append(f"{_where(module, line)}: {module} imports the package facade `lezero`")
            elif _layer(module) and _layer(target) and LAYERS[_layer(target)] > LAYERS[_layer(module)]:
                how = "" if load else " (inside a function)"
                upward.append(f"{_where(module, line)}: {module} ({_layer(module)}) imports {target} "
                              f"({_layer(target)}){how}")
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_no_import_cycle_at_load_time():
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    graph.add_edges_from((m, t) for m, imports in IMPORTS.items() for t, load, _ in imports if load)
    cycles = sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)
    assert not cycles, "modules importing each other at load time:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_backend_imports_another(backend):
    crossing = sorted({f"{_where(m, line)}: {m} imports {t}"
                for m, imports in IMPORTS.items() if m.startswith(backend + ".") or m == backend
                for t, _, line in imports
                if any(t.startswith(other) for other in BACKENDS if other != backend)})
    assert not crossing, "\n".join(crossing)


def test_long_files_say_why():
    unexplained = []
    for module, path in sorted(MODULES.items()):
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            if LONG_FILE_REASON not in doc:
                unexplained.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert not unexplained, (f"files over {MAX_LINES} lines whose docstring has no '{LONG_FILE_REASON}' "
                             "paragraph:\n" + "\n".join(unexplained))


def test_the_checker_sees_imports():
    """Guard against a checker that passes because it reads nothing."""
    assert len(MODULES) > 100
    assert ("lezero.ir.core", True) in {(t, load) for t, load, _ in IMPORTS["lezero.passes.pass_base"]} or \
        any(t.startswith("lezero.ir") for t, _, _ in IMPORTS["lezero.passes.pass_base"])
