"""The standalone float32 GEMM of ``lezero/codegen/llvm/gemm.py``, called through ctypes: what
tests/codegen/llvm/test_gemm.py and benchmarks/sgemm.py measure the generator with, apart from the
compiled kernels (which call the GEMM from their kernel ABI function, on the runtime's pool).

``SgemmKernel`` compiles ``SgemmGenerator``'s module for one ``GemmConfig`` and one ``Epilogue``
and splits C into one rectangle per thread (``split_rectangles``): ``threads="native"`` runs them
with the generated ``<name>_threaded`` (POSIX threads), ``"pool"`` with the runtime's
``ThreadPool``.  A few epilogues to fuse (bias, relu, residual, scale) come with it.
"""
from __future__ import annotations

import ctypes
import math
import threading

import llvmlite.ir as ir
import numpy as np

from lezero.codegen.llvm import jit
from lezero.codegen.llvm.gemm import GEMM_PARAMS, WORKSPACE_ALIGNMENT, GemmConfig, SgemmGenerator
from lezero.codegen.llvm.gemm_epilogue import Epilogue, EpilogueArg
from lezero.codegen.llvm.target import CpuTarget
from lezero.codegen.llvm.vectors import FLOAT_BYTES
from lezero.runtime.thread_pool import ThreadPool, default_num_threads

F32 = ir.FloatType()
I64 = ir.IntType(64)


def bias_add_epilogue(name: str = "bias") -> Epilogue:
    """acc + bias[col]."""
    return Epilogue("bias", lambda out, acc: out.builder.fadd(acc, out.load_columns(name)),
                    (EpilogueArg(name, "vector"),))


def relu_epilogue() -> Epilogue:
    """max(acc, 0)."""
    return Epilogue("relu", lambda out, acc: out.maximum(acc, out.splat(0.0)))


def residual_add_epilogue(name: str = "residual") -> Epilogue:
    """acc + residual[row, col]."""
    return Epilogue("residual", lambda out, acc: out.builder.fadd(acc, out.load_matrix(name)),
                    (EpilogueArg(name, "matrix"),))


def scale_epilogue(name: str = "alpha") -> Epilogue:
    """alpha * acc."""
    return Epilogue("scale", lambda out, acc: out.builder.fmul(acc, out.splat(out.arg(name))),
                    (EpilogueArg(name, "scalar"),))


def _ctypes_type(ir_type: ir.Type):
    if isinstance(ir_type, ir.PointerType):
        return ctypes.c_void_p
    if ir_type == I64:
        return ctypes.c_int64
    if ir_type == F32:
        return ctypes.c_float
    raise TypeError(ir_type)


_workspaces = threading.local()


def thread_workspace(floats: int) -> int:
    """Address of this thread's 64-byte aligned scratch buffer of at least ``floats`` floats.

    One buffer per thread, shared by all kernels (a thread runs one GEMM at a time) and kept
    across calls, so packing touches warm pages instead of faulting in fresh ones every call.
    """
    if getattr(_workspaces, "floats", 0) < floats:
        buffer = np.empty(floats + WORKSPACE_ALIGNMENT // FLOAT_BYTES, dtype=np.float32)
        address = buffer.ctypes.data
        _workspaces.buffer, _workspaces.floats = buffer, floats
        _workspaces.address = address + (-address) % WORKSPACE_ALIGNMENT
    return _workspaces.address


def thread_workspaces(floats: int, count: int) -> np.ndarray:
    """Addresses (uint64[count]) of ``count`` aligned scratch buffers owned by this thread, for
    the tasks of one ``<name>_threaded`` call."""
    buffers = getattr(_workspaces, "task_buffers", None)
    if buffers is None or buffers[0] < floats or len(buffers[1]) < count:
        arrays = [np.empty(floats + WORKSPACE_ALIGNMENT // FLOAT_BYTES, dtype=np.float32) for _ in range(count)]
        addresses = np.array([x.ctypes.data + (-x.ctypes.data) % WORKSPACE_ALIGNMENT for x in arrays], np.uint64)
        buffers = _workspaces.task_buffers = (floats, arrays, addresses)
    return buffers[2]


def split_rectangles(m: int, n: int, k: int, num_tasks: int, mr: int, nr: int) -> list[tuple[int, int, int, int]]:
    """Cut C[m, n] into at most ``num_tasks`` rectangles (m_begin, m_end, n_begin, n_end).

    A grid of tm x tn, cuts on multiples of mr / nr (so only the matrix edge is ragged). Each task
    packs its own rows of A and its own columns of B, so the grid is chosen to minimize the
    slowest task's time, estimated as its multiply-adds plus ``PACKING_COST`` per packed float.
    """
    def cuts(extent: int, parts: int, unit: int) -> list[int]:
        units = math.ceil(extent / unit)
        return [min(extent, (units * p // parts) * unit) for p in range(parts + 1)]

    best = None
    for tasks in range(num_tasks, 0, -1):
        for tm in range(1, tasks + 1):
            if tasks % tm:
                continue
            tn = tasks // tm
            if tm > math.ceil(m / mr) or tn > math.ceil(n / nr):
                continue
            row_cuts, col_cuts = cuts(m, tm, mr), cuts(n, tn, nr)
            rows = max(b - a for a, b in zip(row_cuts, row_cuts[1:]))
            cols = max(b - a for a, b in zip(col_cuts, col_cuts[1:]))
            slowest = rows * cols * k + PACKING_COST * (rows + cols) * k
            if best is None or slowest < best[0]:
                best = (slowest, row_cuts, col_cuts)
    _, row_cuts, col_cuts = best
    return [(r0, r1, c0, c1) for r0, r1 in zip(row_cuts, row_cuts[1:]) for c0, c1 in zip(col_cuts, col_cuts[1:])
            if r0 < r1 and c0 < c1]


# Packing a float costs about as much as this many multiply-adds (16 per cycle per core on
# AVX-512/AVX2 with two FMA pipes vs about one scalar copy per cycle).
PACKING_COST = 16


# Below this many flops a GEMM runs on the calling thread: handing a task to a pool thread and
# waiting for it costs 35-80 us here, what one core computes in ~100 us of a 180^3 GEMM.
PARALLEL_THRESHOLD_FLOPS = 2 * 180 ** 3


class SgemmKernel:
    """A compiled float32 GEMM with an optional fused epilogue.

    >>> kernel = SgemmKernel(epilogue=bias_add_epilogue().then(relu_epilogue()))
    >>> y = kernel(x, w, bias=b)          # relu(x @ w + b)

    Arrays: float32, 2-D, rows contiguous (row strides may be larger than the width, e.g. slices);
    others are copied. With ``transpose_a``/``transpose_b`` the kernel computes ``a.T @ b`` /
    ``a @ b.T`` from the arrays as they are; ``b_in_place`` reads B's rows where they lie.
    ``out`` must not overlap any input. Epilogue arguments are keywords: "vector" ones 1-D of
    length N, "matrix" ones M x N, "scalar" ones floats.
    ``num_threads`` defaults to ``default_num_threads()``; products under
    ``parallel_threshold_flops`` run on the calling thread. ``threads`` picks how the rectangles
    run in parallel: "native" (default) makes one ctypes call to ``<name>_threaded``, which starts
    a POSIX thread per extra rectangle and joins them, with no Python or GIL involved (~20 us per
    call here); "pool" makes one ctypes call per rectangle on the runtime's ``ThreadPool`` (a hand-off
    costs 17-35 us at best, more when other Python threads hold the GIL). On this 2-core machine
    both were equal at 1024^3 when it was quiet, and "native" was faster when it was shared.
    """

    def __init__(self, config: GemmConfig | None = None, epilogue: Epilogue | None = None,
                 num_threads: int | None = None, name: str = "lz_sgemm", threads: str = "native",
                 transpose_a: bool = False, transpose_b: bool = False, b_in_place: bool = False,
                 cpu: CpuTarget | str | None = None):
        if threads not in ("pool", "native"):
            raise ValueError(f"threads must be 'pool' or 'native', not {threads!r}")
        self.config = config or GemmConfig.for_target(cpu)
        self.epilogue = epilogue
        self.num_threads = num_threads or default_num_threads()
        self.parallel_threshold_flops = PARALLEL_THRESHOLD_FLOPS
        self.threads = threads
        self.name = name
        self.transpose_a, self.transpose_b = transpose_a, transpose_b
        self.generator = SgemmGenerator(self.config, epilogue, name, pack_b=not b_in_place, mask_b=b_in_place,
                                        transpose_a=transpose_a, transpose_b=transpose_b)
        self.ir_module = self.generator.build_module()
        self.compiled = jit.compile_module(self.ir_module, cpu)
        fixed_types = [_ctypes_type(t) for _, t in GEMM_PARAMS]
        epilogue_types = [_ctypes_type(t) for t in self.generator.epilogue_param_types]
        self.function = self.compiled.ctypes_function(name, None, fixed_types + epilogue_types)
        self._pool: ThreadPool | None = None  # threads="pool": made on first use
        self.threaded_function = self.compiled.ctypes_function(
            f"{name}_threaded", None,
            fixed_types[:7] + [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p] + epilogue_types)

    def _run_rectangle(self, fixed_args: tuple, rectangle: tuple[int, int, int, int], epilogue_args: list) -> None:
        self.function(*fixed_args, *rectangle, thread_workspace(self.config.workspace_floats), *epilogue_args)

    def __call__(self, a: np.ndarray, b: np.ndarray, /, out: np.ndarray | None = None, **epilogue_arrays) -> np.ndarray:
        a, b = _as_rows_contiguous_f32(a, "a"), _as_rows_contiguous_f32(b, "b")
        m, k = a.shape[::-1] if self.transpose_a else a.shape
        k_b, n = b.shape[::-1] if self.transpose_b else b.shape
        if k != k_b:
            raise ValueError(f"matmul shapes {a.shape} and {b.shape} do not agree on K")
        # Epilogue arrays are checked and converted first; ``epilogue_arrays`` keeps them alive.
        epilogue_args = self._epilogue_call_args(epilogue_arrays, m, n) if self.epilogue else []
        if out is None:
            out = np.empty((m, n), dtype=np.float32)
        else:
            if out.shape != (m, n) or out.dtype != np.float32 or not out.flags.aligned or \
                    out.strides[1] != FLOAT_BYTES or out.strides[0] % FLOAT_BYTES or out.strides[0] < 0:
                raise ValueError(f"out must be a float32 {m}x{n} array with contiguous rows")
            # C holds partial sums between K blocks, so no input may be read through it.
            inputs = [a, b] + [x for x in epilogue_arrays.values() if isinstance(x, np.ndarray)]
            if any(np.may_share_memory(out, x) for x in inputs):
                raise ValueError("out must not overlap a, b or an epilogue argument")
        if m == 0 or n == 0:
            return out
        fixed_args = (k, a.ctypes.data, _row_stride(a), b.ctypes.data, _row_stride(b),
                      out.ctypes.data, _row_stride(out))
        if self.num_threads == 1 or 2 * m * n * k < self.parallel_threshold_flops:
            self._run_rectangle(fixed_args, (0, m, 0, n), epilogue_args)
            return out
        rectangles = split_rectangles(m, n, k, self.num_threads, self.config.mr, self.config.nr)
        if len(rectangles) == 1:
            self._run_rectangle(fixed_args, rectangles[0], epilogue_args)
        elif self.threads == "native":
            bounds = np.array(rectangles, dtype=np.int64)
            workspaces = thread_workspaces(self.config.workspace_floats, len(rectangles))
            self.threaded_function(*fixed_args, len(rectangles), bounds.ctypes.data, workspaces.ctypes.data,
                                   *epilogue_args)
        else:  # one rectangle per thread, the caller's thread computing the first
            if self._pool is None:
                self._pool = ThreadPool(self.num_threads)

            def run(_, begin, end):
                for rectangle in rectangles[begin:end]:
                    self._run_rectangle(fixed_args, rectangle, epilogue_args)

            self._pool.parallel_for(run, None, len(rectangles))
        return out

    def _epilogue_call_args(self, arrays: dict, m: int, n: int) -> list:
        expected = {arg.name for arg in self.generator.epilogue_args}
        if arrays.keys() != expected:
            raise TypeError(f"epilogue {self.epilogue and self.epilogue.name!r} takes arguments "
                            f"{sorted(expected)}, got {sorted(arrays)}")
        call_args = []
        for arg in self.generator.epilogue_args:
            value = arrays[arg.name]
            if arg.kind == "scalar":
                call_args.append(float(value))
                continue
            if arg.kind in ("pointer", "index"):
                call_args.append(int(value))
                continue
            array = np.ascontiguousarray(value, dtype=np.float32) if arg.kind == "vector" else \
                _as_rows_contiguous_f32(value, arg.name)
            expected_shape = (n,) if arg.kind == "vector" else (m, n)
            if array.shape != expected_shape:
                raise ValueError(f"epilogue argument {arg.name!r} has shape {array.shape}, expected {expected_shape}")
            arrays[arg.name] = array  # the caller's dict keeps converted copies alive
            call_args.append(array.ctypes.data)
            if arg.kind == "matrix":
                call_args.append(_row_stride(array))
        return call_args


def _as_rows_contiguous_f32(array: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {array.shape}")
    if array.dtype != np.float32 or not array.flags.aligned or array.strides[1] != FLOAT_BYTES \
            or array.strides[0] % FLOAT_BYTES or array.strides[0] < 0:
        array = np.ascontiguousarray(array, dtype=np.float32)
    return array


def _row_stride(array: np.ndarray) -> int:
    """Row stride in floats (a 1-row or 0-column array may report any stride; any value >= 1 works)."""
    return max(array.strides[0] // FLOAT_BYTES, 1)
