"""An ONNX model to a native executable or shared library: the model's input shapes bound and
imported to an lz module, which ``lezero.runtime.native`` builds (``compile_onnx_native``).

This module is also the public path ``lezero.onnx.native`` the docs have named since
``lezero-compile`` appeared, so it re-exports the module-level builder and its errors
(``compile_module_native``, ``NativeCompileError``, ``ShapeBindingError``, ``BuildResult``)
from their home in ``lezero.runtime.native``: scripts that import them from here keep working.
"""
from __future__ import annotations

import os
import time

from lezero.codegen.llvm.target import CpuTarget
from lezero.runtime.native.build import BuildResult, c_compiler, compile_module_native, native_target
from lezero.runtime.native.program import NativeCompileError, ShapeBindingError, resolve_shapes

__all__ = ["BuildResult", "NativeCompileError", "ShapeBindingError", "bind_onnx_shapes", "compile_module_native",
           "compile_onnx_native", "onnx_inputs"]


def onnx_inputs(model, constant_inputs=()) -> list[tuple]:
    """``(name, shape with None for a dynamic dim, [dim_param or None per dim])`` of each graph
    input that is an argument (not an initializer, not bound by ``constant_inputs``)."""
    initializers = {t.name for t in model.graph.initializer}
    declared = []
    for value in model.graph.input:
        if value.name in initializers or value.name in constant_inputs:
            continue
        t = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not t.HasField("shape"):
            continue  # the importer says what is wrong with it
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        names = [d.dim_param if d.HasField("dim_param") and d.dim_param else None for d in t.shape.dim]
        declared.append((value.name, dims, names))
    return declared


def bind_onnx_shapes(model, shapes: dict, constant_inputs=()):
    """``model`` with every graph input's dynamic dims bound from ``shapes`` (a copy when anything
    changes), before import: the importer then folds shape computations (Shape -> Gather ->
    Reshape) to constants. ``NativeCompileError`` lists every dim left dynamic, every bad name."""
    declared = onnx_inputs(model, constant_inputs)
    bound = resolve_shapes(declared, shapes)
    if all(tuple(shape) == tuple(b) for (_, shape, _), b in zip(declared, bound)):
        return model
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    by_name = {name: b for (name, _, _), b in zip(declared, bound)}
    for value in copy.graph.input:
        if value.name in by_name:
            for dim, size in zip(value.type.tensor_type.shape.dim, by_name[value.name]):
                dim.dim_value = size  # clears dim_param (a oneof)
    return copy


def compile_onnx_native(source, output: str | os.PathLike, *, shapes: dict | None = None,
                        constant_inputs: dict | None = None, shared: bool = False, name: str = "model",
                        keep_build_dir: bool = False, jobs: int | None = None, cpu: CpuTarget | str | None = None,
                        triple: str | None = None) -> BuildResult:
    """An ONNX model (a path or a ``ModelProto``) built as a native executable or shared library
    (``build_native``) for ``cpu`` and ``triple`` (``native_target``). Dynamic dims of graph inputs
    must be bound by ``shapes``; models older than opset 11 are converted with ONNX's version
    converter."""
    from lezero.onnx.importer import import_model
    from lezero.onnx.loading import load_model

    target = native_target(cpu, triple)
    c_compiler(target)  # a missing (cross) compiler fails before the long part
    start = time.perf_counter()
    constant_inputs = dict(constant_inputs or {})
    model = bind_onnx_shapes(load_model(source), shapes or {}, constant_inputs)
    module = import_model(model, constant_inputs=constant_inputs, upgrade_opset=True)
    import_seconds = time.perf_counter() - start
    label = os.path.basename(str(source)) if isinstance(source, (str, os.PathLike)) else (model.graph.name or "model")
    result = compile_module_native(module, output, shared=shared, name=name, source=label,
                                   keep_build_dir=keep_build_dir, jobs=jobs, cpu=target)
    result.seconds = {"load and import ONNX": import_seconds, **result.seconds}
    return result
