"""``lezero.onnx.compile(model) -> CompiledModel``: an ONNX model compiled for the CPU through
``lezero.compile``, run with ``.run({name: array}) -> {name: array}`` (``.profile(feeds)``: the same
run timing each kernel launch).

When a shape (or another compile-time parameter) is computed from graph inputs -- Reshape's target
shape fed as an input, Range's bounds, TopK's K -- the model compiles on its first ``run`` for the
values given there, and again for each new set of values of those inputs (``ValueDependentError``
names them; the rest of the inputs stay arguments).  Dynamic dims are bound per call by the
compiled function itself (one plan per input shape); when the graph computes with a dynamic dim
(``Shape`` of it: ``DynamicShapeError``), the model is imported per input shape instead, with the
inputs' dims set from the feeds.

Such a model serves new sizes of its dynamic dims without importing it again once it has run at
a shape and, for each dim where the new shape differs, at a shape that differs from that one in
that dim alone (``_dims``: the inputs' dims named alike are one dim): that schedule, with the
sizes and the constants that follow the dims substituted (``lezero.runtime.shape_substitution``:
fitted against the others, each op checked against its shape rule, memory planned again), is
planned at once with its source's kernels.  When nothing fits (a constant follows a dim by no
rule, a size is 1) the new shape takes the full path, and its schedule is one more to fit from.
"""
from __future__ import annotations

import math
import threading

import numpy as np
import onnx
from onnx import numpy_helper

from lezero.codegen.row_generic import DYNAMIC_SIZES_ATTR, MANY_SHAPES_ATTR
from lezero.ir.attributes import ArrayAttr, UnitAttr, i64_array
from lezero.ir.core import INPUT_NAMES_ATTR, OUTPUT_NAMES_ATTR, ModuleOp
from lezero.ir.diagnostics import IRError
import lezero.onnx.element_types as element_types
from lezero.onnx.errors import DynamicShapeError, OnnxError, ValueDependentError
from lezero.onnx.importer import FOLD_MAX_ELEMENTS, Importer, tensor_type_of, upgrade
from lezero.onnx.loading import load_model
from lezero.runtime.cpu import CompiledFunction
from lezero.runtime.kernel_cache import collector_paused
from lezero.runtime.shape_substitution import SHAPES_LOG, SizeFit


class FeedError(OnnxError, ValueError):
    """Wrong feeds: an unknown or missing input name, or an array of the wrong dtype or rank."""


def _names(func, key: str) -> list[str]:
    attr = func.attributes.get(key)
    return [a.value for a in attr.values] if isinstance(attr, ArrayAttr) else []


class _Program:
    """One import + compilation: the module, its argument names, the compiled function."""

    def __init__(self, module: ModuleOp, substituted: bool = False):
        self.module = module
        self.substituted = substituted  # a schedule made by substitution (module docstring)
        self.func = module.lookup("main")
        self.argument_names = _names(self.func, INPUT_NAMES_ATTR)
        self.output_names = _names(self.func, OUTPUT_NAMES_ATTR)
        self.result_types = list(self.func.function_type.results)
        self.compiled = CompiledFunction(module, "main")

    def _outputs(self, out: list) -> list:
        return [element_types.from_storage_array(a, t.element_type) for a, t in zip(out, self.result_types)]

    def __call__(self, feeds: dict) -> list:
        out = self.compiled(*[feeds[name] for name in self.argument_names])
        return self._outputs(list(out) if isinstance(out, tuple) else [out])

    def profile(self, feeds: dict) -> tuple[list, list]:
        out, timings = self.compiled.profile(*[feeds[name] for name in self.argument_names])
        return self._outputs(out), timings


class CompiledModel:
    """An ONNX model compiled for the CPU; see the module docstring."""

    def __init__(self, source, *, upgrade_opset: bool = False, base_dir=None):
        model = load_model(source, base_dir)
        if upgrade_opset:
            model = upgrade(model)
        self.model = model
        graph = model.graph
        initializers = {t.name for t in graph.initializer}
        self._inputs = [i for i in graph.input if i.name not in initializers]
        self.input_names = [i.name for i in self._inputs]
        self.output_names = [o.name for o in graph.output]
        self._input_types = {i.name: tensor_type_of(i, "graph input") for i in self._inputs}
        self._lock = threading.Lock()
        self._programs: dict[tuple, _Program] = {}
        self.value_inputs: tuple[str, ...] = ()  # inputs whose values the program is specialized on
        self.shape_specialized = False  # whether programs are imported per input shape
        self._schedules: dict[tuple, ModuleOp] = {}  # input shapes -> the full path's schedule there
        # (source shapes, partners' shapes) -> (the fit or None, the dims it fits)
        self._fits: dict[tuple, tuple] = {}
        self._initializer_arrays: list | None = None
        # the dynamic dims: the (input, dim) places of each (one named dim_param may be at several)
        named: dict[str, list] = {}
        for i, value in enumerate(self._inputs):
            for d, dim in enumerate(value.type.tensor_type.shape.dim):
                if not dim.HasField("dim_value"):
                    named.setdefault(dim.dim_param or f"?{i}.{d}", []).append((i, d))
        self._dims = list(named.values())
        try:
            self._programs[()] = _Program(Importer(model).run())
        except ValueDependentError as e:
            self.value_inputs = e.inputs
        except DynamicShapeError:
            self.shape_specialized = True

    @property
    def module(self) -> ModuleOp | None:
        """The lz module of the program compiled without input values (None when the model needs
        some inputs' values to compile: ``value_inputs``)."""
        program = self._programs.get(())
        return program.module if program is not None else None

    def _checked(self, feeds: dict) -> dict:
        if not isinstance(feeds, dict):
            raise TypeError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
        unknown = [k for k in feeds if k not in self._input_types]
        if unknown:
            raise FeedError(f"unknown input {unknown[0]!r}; the model's inputs are "
                            f"{', '.join(map(repr, self.input_names)) or 'none'}")
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise FeedError(f"missing input {missing[0]!r}; the model's inputs are "
                            f"{', '.join(map(repr, self.input_names))}")
        out = {}
        for name, value in feeds.items():
            t = self._input_types[name]
            array = np.asarray(value)
            want = t.element_type.numpy_dtype
            bf16 = element_types.bfloat16_dtype()
            if t.element_type.name == "bf16" and bf16 is not None and array.dtype == bf16:
                array = array.astype(np.float32)
            elif array.dtype != want:
                raise FeedError(f"input {name!r} expects {t} (numpy {want}), got an array of dtype {array.dtype}")
            if array.ndim != t.rank or any(d is not None and d != s for d, s in zip(t.shape, array.shape)):
                raise FeedError(f"input {name!r} expects {t}, got an array of shape {array.shape}")
            out[name] = array
        return out

    def _with_static_dims(self, feeds: dict) -> onnx.ModelProto:
        """The model with every graph input's dims set to its feed's shape."""
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for i in model.graph.input:
            if i.name in feeds and i.type.HasField("tensor_type"):
                dims = i.type.tensor_type.shape.dim
                for d, size in zip(dims, feeds[i.name].shape):
                    d.Clear()
                    d.dim_value = int(size)
        return model

    def _imported(self, feeds: dict, bound: tuple = ()) -> ModuleOp:
        """The model imported for ``feeds``: at their shapes when it is imported per shape (then
        marked as serving many shapes: its kernels' code serves them all), at the values of the
        ``bound`` inputs."""
        model = self._with_static_dims(feeds) if self.shape_specialized else self.model
        module = Importer(model, {n: feeds[n] for n in bound}).run()
        if self.shape_specialized:
            main = module.lookup("main")
            main.attributes[MANY_SHAPES_ATTR] = UnitAttr()
            # its dynamic dims' sizes: what its kernels' sequence forms may read at run time
            point = self._point(tuple(feeds[n].shape for n in self.input_names))
            if point:
                main.attributes[DYNAMIC_SIZES_ATTR] = i64_array(point)
        return module

    def _program(self, feeds: dict) -> _Program:
        program = self._programs.get(())
        if program is not None:
            return program
        bound = tuple(self.value_inputs)
        while True:
            shapes = tuple(feeds[n].shape for n in self.input_names) if self.shape_specialized else ()
            key = (shapes,) + tuple((n, feeds[n].dtype.str, feeds[n].shape, feeds[n].tobytes()) for n in bound)
            program = self._programs.get(key)
            if program is not None:
                return program
            try:
                with self._lock:
                    program = self._programs.get(key)
                    if program is None and self.shape_specialized and not bound:
                        # a full collection of the heap here cost a new shape ~70 ms on top of its 20-30
                        with collector_paused():
                            program = self._substituted(shapes)
                    if program is not None:
                        self._programs[key] = program
                        return program
                    program = _Program(self._imported(feeds, bound))
                    if self.shape_specialized and not bound:
                        self._schedules[shapes] = program.compiled.plan_for(list(shapes)).module
                    self._programs[key] = program
                return program
            except ValueDependentError as e:
                new = [n for n in e.inputs if n not in bound]
                if not new:
                    raise
                bound = tuple(bound) + tuple(new)
                self.value_inputs = bound
            except DynamicShapeError:
                if self.shape_specialized:
                    raise
                self.shape_specialized = True

    def _tables(self) -> list:
        """The model's initializers as arrays: what a constant that follows a dim may be the first
        rows of (``shape_substitution.ConstantRule``)."""
        if self._initializer_arrays is None:
            self._initializer_arrays = [numpy_helper.to_array(t) for t in self.model.graph.initializer
                                        if t.dims and element_types.from_onnx(t.data_type) is not None]
        return self._initializer_arrays

    def _point(self, shapes: tuple) -> tuple | None:
        """The size of each dynamic dim (``_dims``) in input ``shapes``; None when two places of one
        named dim differ."""
        sizes = []
        for places in self._dims:
            found = {shapes[i][d] for i, d in places}
            if len(found) != 1:
                return None
            sizes.append(found.pop())
        return tuple(sizes)

    def _substituted(self, shapes: tuple) -> _Program | None:
        """The program at input ``shapes`` made from known schedules by substitution (module
        docstring), or None.  The source: a schedule of the full path; for each dynamic dim where
        it differs from ``shapes``, a partner: one that differs from the source in that dim alone.
        A fit made before serves every shape that differs from its source in its dims only."""
        new = self._point(shapes)
        if new is None:
            return None
        known = [(point, s) for s in self._schedules if (point := self._point(s)) is not None]
        made = [(fit_key, dims) for fit_key, (fit, dims) in self._fits.items() if fit is not None
                and all(x == y for k, (x, y) in enumerate(zip(self._point(fit_key[0]), new)) if k not in dims)]
        made.sort(key=lambda m: _distance(self._point(m[0][0]), new))
        fresh = []
        for at, source in sorted(known, key=lambda k: _distance(k[0], new)):  # the nearest first
            dims = tuple(k for k, (x, y) in enumerate(zip(at, new)) if x != y)
            partners = tuple(_partner(known, at, k) for k in dims)
            if dims and None not in partners and (source, partners) not in self._fits:
                fresh.append(((source, partners), dims))
        for fit_key, dims in made + fresh:  # a fit walks three schedules: those made before first
            source, partners = fit_key
            if fit_key not in self._fits:
                at = self._point(source)
                self._fits[fit_key] = (SizeFit.between(
                    self._schedules[source], tuple(at[k] for k in dims),
                    [(self._schedules[p], self._point(p)[k]) for p, k in zip(partners, dims)],
                    self._tables(), FOLD_MAX_ELEMENTS), dims)
            fit = self._fits[fit_key][0]
            if fit is None:
                continue
            substitution = fit.substitute(tuple(new[k] for k in dims))
            if substitution is None:  # (logged) another source may fit: one whose schedule has a kernel there
                continue
            try:
                program = _Program(substitution.module, substituted=True)  # verified: every op's shape rule
            except IRError as e:
                SHAPES_LOG.debug("no substitution to input shapes %s: %s", shapes, e.message)
                return None
            compiled = program.compiled
            source_kernels = [launch.kernel for launch in self._programs[(source,)].compiled.plan_for(
                list(source)).plan.launches if launch.op.name == "lz.kernel"]
            compiled.plan_for(list(shapes), substitution.planned_kernels(source_kernels, compiled.cache, compiled.cpu))
            SHAPES_LOG.debug("input shapes %s: the schedule at %s, substituted", shapes, source)
            return program
        return None

    def run(self, feeds: dict) -> dict:
        """``{input name: array}`` -> ``{output name: array}`` (in the graph's output order)."""
        feeds = self._checked(feeds)
        program = self._program(feeds)
        return dict(zip(self.output_names, program(feeds)))

    def profile(self, feeds: dict) -> tuple[dict, list]:
        """``run(feeds)`` timing each kernel launch: ``(outputs, a lezero.runtime.cpu.KernelTiming
        per launch)`` (``CompiledFunction.profile``; a first run at new shapes compiles outside
        the timing, but warm the model up to time steady-state kernels)."""
        feeds = self._checked(feeds)
        outputs, timings = self._program(feeds).profile(feeds)
        return dict(zip(self.output_names, outputs)), timings

    def __repr__(self) -> str:
        return f"<CompiledModel inputs={self.input_names} outputs={self.output_names}>"


def _distance(point: tuple, other: tuple) -> float:
    return sum(abs(math.log(x / y)) for x, y in zip(point, other) if x * y)


def _partner(known: list, at: tuple, k: int) -> tuple | None:
    """The input shapes of a known ``(point, shapes)`` whose dims are ``at`` but dim ``k``, there at
    least 2, or None."""
    return next((shapes for point, shapes in known if point[k] != at[k] and point[k] >= 2
                 and all(x == y for j, (x, y) in enumerate(zip(point, at)) if j != k)), None)


def compile(source, *, upgrade_opset: bool = False, base_dir=None) -> CompiledModel:  # noqa: A001
    """Import and compile an ONNX model (a path, bytes or an ``onnx.ModelProto``) for the CPU."""
    return CompiledModel(source, upgrade_opset=upgrade_opset, base_dir=base_dir)
