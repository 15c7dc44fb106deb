"""Eager ops: how a frontend op becomes IR, and the cache of compiled one-op functions.

An ``EagerOp`` is a frontend op: a name and ``emit(b, attrs, *values) -> [Value, ...]``, which
builds its IR with a ``Builder`` (one lz op for most; a few for composites such as ``linear`` or
``cross_entropy``, which the pipeline then fuses).  The same ``emit`` serves twice: to compile the
op on its own (eager execution) and to replay a recorded graph into one function (``backward``,
``lezero.eager.autograd.trace``), so eager and traced code are the same IR.

Eager execution looks up ``(op, attributes, shape and dtype of each input)`` in ``RUNNERS``; on a
miss it builds ``@f`` around one ``emit``, compiles it through the whole CPU pipeline
(``CompiledFunction``) and keeps the plan's lean runner (``lezero.runtime.launch``): after that
an op is a dict lookup and one launch.  A shape mismatch is found while building (shape
inference), so errors cost nothing on the hot path; they name the op, the shapes and the user's
line (``OperatorError``).  An index out of range, found by the kernel when it runs
(``lezero/codegen/index_checks.py``), is an ``IndexError`` that starts with the user's line.

On cuda (inputs that are torch tensors, ``lezero.eager.device_arrays``) the same key holds the lean
runner of ``lezero.compile(..., target="cuda")``: a torch dtype in the key tells the device, so the
CPU path pays nothing for it.  Inputs on two devices are found on the miss and raise
``OperatorError`` at the user's line, as PyTorch's "expected all tensors to be on the same device".
"""
from __future__ import annotations

import linecache
import os
import sys
import time

import numpy as np

from lezero.eager.device_arrays import device_of, narrowed, numpy_dtype, same_device, widened
from lezero.eager.dtypes import BFLOAT16_STORAGE
from lezero.ir.builder import Builder
from lezero.ir.core import FuncOp, ModuleOp
from lezero.ir.diagnostics import IRError
from lezero.ir.location import UNKNOWN, FileLineColLoc, Location
from lezero.ir.opdef import OpError
from lezero.ir.types import BF16, FunctionType, TensorType, element_type_of
from lezero.runtime import compile as compile_module
from lezero.runtime.devices import Device

# the lezero package (this file is lezero/eager/dispatch.py): frames inside it are not the user's line
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class OperatorError(IRError, RuntimeError):
    """An eager op cannot run on its inputs: ``model.py:12:9: error: matmul: 'lz.matmul' op
    contracting dimensions differ: 4x3 has 3 columns, 5x2 has 5 rows``, then the user's line with
    a caret.  A ``RuntimeError``, as PyTorch raises for shape mismatches."""

    def __str__(self) -> str:
        text = super().__str__()
        flc = self.location.file_line_col()
        if flc is not None:
            line = linecache.getline(flc.filename, flc.line).rstrip("\n")
            if line:
                text += f"\n{line}\n{' ' * max(flc.col - 1, 0)}^"
        return text


def user_location(skip_package: bool = True) -> Location:
    """The first frame outside the lezero package, as ``file:line:col`` (the column where the
    call starts).  Walks the stack, so it runs only when an error is raised or a trace records."""
    frame = sys._getframe(1)
    while frame is not None and skip_package and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return UNKNOWN
    col = 1
    try:
        positions = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        if positions[2] is not None:
            col = positions[2] + 1
    except (AttributeError, IndexError):  # Python < 3.11
        pass
    return FileLineColLoc(frame.f_code.co_filename, frame.f_lineno, col)


class EagerOp:
    """A frontend op: ``emit(b, attrs, *values) -> list of Values`` (``attrs`` a dict)."""

    __slots__ = ("name", "emit", "num_results", "__weakref__")

    def __init__(self, name: str, emit, num_results: int = 1):
        self.name = name
        self.emit = emit
        self.num_results = num_results

    def build(self, b: Builder, attrs: tuple, values) -> list:
        """Emit into ``b``; an op error becomes an ``OperatorError`` at the user's line."""
        try:
            results = self.emit(b, dict(attrs), *values)
        except OpError as e:
            raise OperatorError(f"{self.name}: {e}", user_location()) from None
        except IRError as e:
            raise OperatorError(f"{self.name}: {e.message}", user_location()) from None
        return list(results) if isinstance(results, (list, tuple)) else [results]

    def __repr__(self) -> str:
        return f"<EagerOp {self.name}>"


_LZ_OPS: dict[str, EagerOp] = {}


def lz_op(name: str) -> EagerOp:
    """The eager op of one lz op: ``lz_op("lz.add")``."""
    op = _LZ_OPS.get(name)
    if op is None:
        def emit(b, attrs, *values, _name=name):
            return [b.op(_name, *values, **attrs)]
        op = _LZ_OPS[name] = EagerOp(name[3:] if name.startswith("lz.") else name, emit)
    return op


def one_op_function(op: EagerOp, attrs: tuple, types: list) -> FuncOp:
    """``@f(types...)`` returning ``op``'s results."""
    func = FuncOp("f", FunctionType(types, []))
    b = Builder.at_end(func.entry_block)
    results = op.build(b, attrs, func.arguments)
    b.create("func.return", results, result_types=[])
    func.update_function_type()
    return func


def constant_of(b: Builder, value, element_type):
    """``value`` as an ``lz.constant`` of ``element_type``: bf16 too, which its float32 numpy storage
    alone would make f32."""
    array = np.asarray(value, element_type.numpy_dtype)
    return b.constant(array, TensorType(array.shape, element_type))


def tensor_type(array) -> TensorType:
    """The IR type of an array (numpy, or a cuda tensor's torch storage)."""
    d = numpy_dtype(array)
    return TensorType(tuple(array.shape), BF16 if d is BFLOAT16_STORAGE else element_type_of(d))


def device_of_arrays(name: str, arrays) -> Device:
    """The device all ``arrays`` are on; on several, an ``OperatorError`` naming ``name``."""
    device = same_device(arrays)
    if device is None:
        found = sorted({device_of(a).type for a in arrays}, reverse=True)
        raise OperatorError(f"{name}: expected all tensors to be on the same device, but found at least two "
                            f"devices, {' and '.join(found)}", user_location())
    return device


def compile_for(module: ModuleOp, entry: str, device: Device, cpu=None):
    """``lezero.compile`` of ``@entry`` for ``device`` (host code for ``cpu``: default ``$LEZERO_CPU``
    or the host); its lean ``runner(shapes)`` runs numpy arrays on the CPU (``run(arrays,
    outs=None)``), torch tensors on cuda.  A function with bf16 in its signature takes and gives
    the tensors' bfloat16 storage (``bf16_storage_runner``)."""
    compiled = compile_module(module, entry, device.type, cpu)
    signature = compiled.func.function_type
    if any(t.element_type == BF16 for t in (*signature.inputs, *signature.results)):
        lean = compiled.runner
        compiled.runner = lambda shapes: bf16_storage_runner(lean(shapes), signature)  # this object's runners only
    return compiled


def bf16_storage_runner(run, signature: FunctionType):
    """``run`` (a lean runner of a function of ``signature``, whose bf16 buffers are float32
    holding bf16 values) taking bf16 arguments as bfloat16 storage (widened to float32, exactly)
    and giving its bf16 results as bfloat16 storage (narrowed, exactly: the kernels rounded them).
    The eager engine's bf16 costs these two copies per op."""
    wide = [i for i, t in enumerate(signature.inputs) if t.element_type == BF16]
    narrow = [i for i, t in enumerate(signature.results) if t.element_type == BF16]

    def run_bf16(arrays, outs=None, keys=None):
        arrays = list(arrays)
        for i in wide:  # (a cuda function takes torch.bfloat16 itself: its device storage of bf16)
            if arrays[i].__class__ is np.ndarray and numpy_dtype(arrays[i]) is BFLOAT16_STORAGE:
                arrays[i] = widened(arrays[i])
        results = list(run(arrays) if keys is None else run(arrays, keys=keys))
        for i in narrow:
            results[i] = narrowed(results[i])
        if outs is None:
            return results
        for out, r in zip(outs, results):
            out[...] = r
        return outs
    run_bf16.kernel_count, run_bf16.checks_indices = run.kernel_count, run.checks_indices
    return run_bf16


# (op, attrs, shape0, dtype0, shape1, dtype1, ...) -> run(inputs, outs=None) -> [arrays]
RUNNERS: dict[tuple, object] = {}


def runner_for(key: tuple, op: EagerOp, attrs: tuple, arrays) -> object:
    """Compile ``op`` for the types of ``arrays`` and remember it under ``key``."""
    run = RUNNERS.get(key)
    if run is None:
        device = device_of_arrays(op.name, arrays)
        func = one_op_function(op, attrs, [tensor_type(a) for a in arrays])
        try:
            run = compile_for(ModuleOp([func]), "f", device).runner([tuple(a.shape) for a in arrays])
        except IRError as e:
            raise OperatorError(f"{op.name}: {e.message}", user_location()) from None
        if run.checks_indices:
            run = _at_user_line(run)
        if TimedRunners.observer is not None:
            TimedRunners.plain[key] = run
            run = TimedRunners.timed(key, run)
        RUNNERS[key] = run
    return run


class TimedRunners:
    """``lezero.profiler``'s view of eager execution (issue 16): while ``observer`` is set, every
    runner in ``RUNNERS`` is a timing wrapper that calls ``observer(op name, input shapes, start,
    end)`` after it runs; ``start(observer)`` wraps them (and ``runner_for`` wraps new ones),
    ``stop()`` puts the plain runners back.  The hot path (``RUNNERS[key](arrays)``) checks nothing.
    A strided runner (``eager/strided.py``: an op on views, ``run(arrays) -> (results, strided)``) is
    not wrapped: the compiled op it calls is, and is timed under that op's name."""

    observer = None
    plain: dict = {}  # key -> the runner a wrapper stands for

    @classmethod
    def start(cls, observer) -> None:
        cls.observer = observer
        for key, run in list(RUNNERS.items()):
            if hasattr(run, "kernel_count"):  # a compiled op; a view's strided runner calls one of them
                cls.plain[key] = run
                RUNNERS[key] = cls.timed(key, run)

    @classmethod
    def stop(cls) -> None:
        for key, run in cls.plain.items():
            RUNNERS[key] = run
        cls.plain = {}
        cls.observer = None

    @classmethod
    def timed(cls, key: tuple, run):
        op = key[0]
        shapes = tuple(x for x in key[2:] if isinstance(x, tuple))
        observer, clock = cls.observer, time.perf_counter

        def timed_run(arrays, outs=None):
            start = clock()
            results = run(arrays, outs)
            observer(op.name, shapes, start, clock())
            return results
        timed_run.kernel_count = run.kernel_count
        timed_run.checks_indices = getattr(run, "checks_indices", False)
        return timed_run


def _at_user_line(run):
    """``run``, its ``IndexError`` (a kernel's bounds check; the cached op has no location)
    starting with the user's line."""
    def located(arrays, outs=None):
        try:
            return run(arrays, outs)
        except IndexError as e:
            raise IndexError(f"{user_location().describe()}: {e}") from None
    located.kernel_count = run.kernel_count
    return located


def run_op(op: EagerOp, attrs: tuple, arrays: list) -> list:
    """Run ``op`` on arrays of one device (C-contiguous, of lezero dtypes): its results, as arrays."""
    key = (op, attrs, *[x for a in arrays for x in (a.shape, a.dtype)])
    run = RUNNERS.get(key)
    if run is None:
        run = runner_for(key, op, attrs, arrays)
    return run(arrays)


def cache_size() -> int:
    return len(RUNNERS)


def clear_cache() -> None:
    RUNNERS.clear()
