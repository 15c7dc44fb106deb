"""The kernel cache: CPU kernels lowered, compiled and loaded once, in memory and on disk.

Two keys, two kinds of entry in ``$LEZERO_CACHE_DIR`` (default ``~/.cache/lezero``):

- a kernel's **content** key (``kernel_key``): the ``lz.kernel`` op printed on its own, without
  what says where it sits (its name, arena offsets, stage), with the target (CPU, its caches, which
  the GEMM blocks for, LLVM's and llvmlite's versions) and ``source_fingerprint()`` (the code that
  lowers it: lezero/ir, lezero/passes and lezero/codegen).  Its entry (``<key>.k``) holds what the
  runtime needs besides the code (work items, flops, the symbol, the object key), so a hit skips
  lowering: ResNet's repeated blocks are lowered and compiled once per model, and a warm start
  builds no LLVM IR at all.  Kernels with bounds checks (their errors name their op's location)
  are keyed by their LLVM IR only.
- the **object** key (``object_key``): a hash of the LLVM IR, the optimization level and the
  target.  Its entry (``<key>.o``) is the object code, so code whose IR did not change is reused
  after an edit of the compiler's sources.

Every entry carries a header with the SHA-256 of its payload; one that is truncated, corrupt or
written by another compiler version is removed and rebuilt, never loaded.  Files are written
atomically (temp file + rename), so a crash or a concurrent writer never leaves half an entry.

A kernel missing from the cache is lowered when the plan asks for it (``plan_kernel``) and its
compilation starts right then in the background (``lezero.runtime.kernel_compiler``), so LLVM
compiles some kernels while Python lowers the next ones; ``load_kernels`` waits for them.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import math
import os
import pathlib
import tempfile
import threading
import time
import weakref
from concurrent.futures import Future, as_completed
from dataclasses import asdict, dataclass, field, replace

import llvmlite
import llvmlite.binding as llvm

from lezero.codegen.index_checks import checks_indices, checks_of
from lezero.codegen.kernel import bytes_accessed, estimate_flops, symbol_name
from lezero.codegen.llvm import jit
from lezero.codegen.llvm.backend import LoweredKernel, lower_kernel
from lezero.codegen.llvm.cache_model import caches_for
from lezero.codegen.llvm.object_compiler import OPT_LEVEL, apply_codegen_options, codegen_options
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.codegen.packed_operands import packed_operand_from_fields
from lezero.codegen.row_generic import (SEQUENCE_ATTR, SEQUENCE_PROBES, RowGeneric, lower_row_generic, sequence_form,
                                        sequence_lengths, serves_many_shapes, widest_rows_form)
from lezero.ir.core import Operation
from lezero.ir.types import TensorType
from lezero.ir.printer import print_op
from lezero.passes.memory_plan import OFFSETS_ATTR
from lezero.passes.partition import STAGE_ATTR
from lezero.runtime.kernel_compiler import compiler_for
from lezero.runtime.progress import progress

# Bump when generated code changes meaning in a way the sources' fingerprint cannot see.
CODEGEN_VERSION = "lezero-cpu-2"
_MAGIC = b"LZKCACHE2\n"
_HEADER_LENGTH = len(_MAGIC) + 64 + 1

# Attributes of an lz.kernel that say where it sits, not what it computes.
_PLACEMENT_ATTRS = frozenset({"name", OFFSETS_ATTR, STAGE_ATTR})
# The packages whose code decides what a kernel is lowered to (the layers below the runtime).
_LOWERING_PACKAGES = ("ir", "passes", "codegen")


def cache_directory() -> pathlib.Path:
    env = os.environ.get("LEZERO_CACHE_DIR")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "lezero"


def target_identity(cpu: CpuTarget) -> str:
    """Everything about the target and the compiler that changes the object code."""
    return "|".join([CODEGEN_VERSION, f"llvmlite-{llvmlite.__version__}",
                     "llvm-" + ".".join(map(str, llvm.llvm_version_info)), cpu.identity])


@functools.cache
def source_fingerprint() -> str:
    """A hash of the sources that lower kernels (~8 ms, once per process): an edit there makes
    every content key new, so the cache never hands back what older code lowered."""
    root = pathlib.Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in _LOWERING_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def kernel_text(kernel_op: Operation) -> str:
    """``kernel_op`` printed on its own, values numbered from it, without its placement attributes:
    equal for kernels that compute the same thing wherever they sit."""
    attributes = {k: v for k, v in kernel_op.attributes.items() if k not in _PLACEMENT_ATTRS}
    alone = Operation(kernel_op.name, (), [r.type for r in kernel_op.results], attributes,
                      [region.clone({}) for region in kernel_op.regions])
    return print_op(alone)


@dataclass(frozen=True)
class KernelFacts:
    """What a content entry holds: what the runtime reads of a lowered kernel besides its code."""

    symbol: str            # the ABI function in the object (the name of the kernel first lowered)
    object_key: str
    work_items: int
    flops: int
    bytes_accessed: int
    external_symbols: tuple
    packed_operands: tuple = ()  # a PackedGemmA/B per constant operand read pre-packed (issue 11)
    index_checks: tuple = ()     # the bounds checks in slot order, IndexCheck.portable() each


class CachedKernel:
    """A CPU kernel of a plan keyed by its content: ``LoweredKernel``'s fields, read from the cache
    (or from lowering it now), its LLVM IR lowered only when something asks for it (a native
    build, ``--emit=llvm``).  A row-generic kernel runs the code of its ``generic_form`` (a rows
    form, or its sequence form: then ``sizes`` holds the sequence length, which the plan hands it in
    a buffer after its results).  ``content_key`` may be a function that computes it: a kernel
    planned without printing it (``plan_kernel_resized``) is keyed only when something asks."""

    def __init__(self, op: Operation, cpu: CpuTarget, content_key, facts: KernelFacts,
                 lowered: LoweredKernel | None = None, row_generic: RowGeneric | None = None,
                 generic_form: Operation | None = None, sizes: tuple = ()):
        self.op = op
        self.row_generic = row_generic  # its code is its rows form's, serving every row count
        self.generic_form = generic_form
        self.sizes = sizes
        self.cpu = cpu
        self._content_key = content_key
        self.facts = facts
        self._lowered = lowered
        attrs = op.definition.attrs(op)
        self.name = symbol_name(attrs.name)
        self.kind = attrs.kind
        self.work_items = facts.work_items
        self.flops = facts.flops
        self.bytes_accessed = facts.bytes_accessed
        self.external_symbols = facts.external_symbols
        self.packed_operands = facts.packed_operands
        # a kernel with bounds checks: the cached code's checks, naming this kernel's ops
        self.index_checks = checks_of(op, facts.index_checks) if checks_indices(op) else None
        self.operand_types = tuple(v.type for v in op.operands)
        self.result_types = tuple(r.type for r in op.results)

    def for_op(self, op: Operation) -> "CachedKernel":
        """This kernel for ``op``, a kernel of the same text (its bounds checks name ``op``'s ops)."""
        return CachedKernel(op, self.cpu, self._content_key, self.facts, None, self.row_generic, self.generic_form,
                            self.sizes)

    @property
    def content_key(self) -> str:
        if callable(self._content_key):
            self._content_key = self._content_key()
        return self._content_key

    def lowered(self) -> LoweredKernel:
        if self._lowered is None:
            self._lowered = lower_kernel(self.op, cpu=self.cpu)
        return self._lowered

    @property
    def llvm_ir(self) -> str:
        return self.lowered().llvm_ir


@dataclass
class CacheStats:
    memory_hits: int = 0    # kernels found in this process (an identical kernel counts here)
    disk_hits: int = 0      # kernels whose content entry was read from disk (not lowered)
    objects_read: int = 0   # objects read from disk (not compiled)
    lowerings: int = 0      # kernels lowered to LLVM IR
    row_generic_hits: int = 0  # kernels served by the code of their rows form (any row count)
    compiles: int = 0       # objects compiled by LLVM
    rejected: int = 0       # corrupt or stale disk entries, rebuilt
    lower_seconds: float = 0.0
    compile_seconds: float = 0.0  # waiting for LLVM after lowering (compiles overlap the lowering)
    load_seconds: float = 0.0


class LoadedKernel:
    """A kernel's machine code in this process: a ctypes function with the kernel ABI."""

    def __init__(self, engine, address: int, symbol: str):
        import ctypes

        self._engine = engine  # the code lives as long as its engine
        self.address = address
        self.symbol = symbol
        self.function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(address)


@dataclass
class KernelCache:
    directory: pathlib.Path | None = None
    stats: CacheStats = field(default_factory=CacheStats)

    def __post_init__(self):
        self._facts: dict[str, KernelFacts] = {}      # content key -> facts
        self._loaded: dict[str, LoadedKernel] = {}    # object key -> code
        self._pending: dict[str, Future] = {}         # object key -> object bytes being compiled
        self._row_generic: dict[str, object] = {}     # rows form's key -> False or (RowGeneric, facts)
        self._rows_seen: dict[str, int] = {}          # rows form's key -> the row count it was first lowered at
        # kernel's content key -> (verdict, its form, sizes, rows): a model's repeated layers find their form once
        self._generic_of: dict[str, tuple] = {}
        # the sequence forms whose code serves every length, by _signature: (form, verdict) each
        self._sequence_codes: dict[tuple, list] = {}
        self._lock = threading.Lock()
        _CACHES[id(self)] = self

    def _forget_parents_compilations(self) -> None:
        """After a fork: the parent's compilations in flight never finish here (their compilers
        are the parent's); what this process needs it compiles itself."""
        self._pending.clear()
        self._lock = threading.Lock()

    # --- keys and files --------------------------------------------------------------------------
    def kernel_key(self, kernel_op: Operation, cpu: CpuTarget) -> str:
        identity = "\n".join([target_identity(cpu), repr(caches_for(cpu)), source_fingerprint()])
        return hashlib.sha256((identity + "\n" + kernel_text(kernel_op)).encode()).hexdigest()

    def object_key(self, llvm_ir: str, cpu: CpuTarget) -> str:
        options = " ".join(codegen_options(cpu.triple))
        return hashlib.sha256(f"{target_identity(cpu)}|O{OPT_LEVEL}|{options}\n{llvm_ir}".encode()).hexdigest()

    def path(self, key: str, suffix: str = ".o") -> pathlib.Path:
        return (self.directory or cache_directory()) / key[:2] / f"{key}{suffix}"

    # --- the plan's kernels ----------------------------------------------------------------------
    def plan_kernel(self, kernel_op: Operation, cpu: CpuTarget | str | None = None):
        """``kernel_op`` for a plan: a ``CachedKernel`` from memory or disk without lowering it, or
        lowered now with its compilation started.  A kernel with bounds checks keeps them in its
        facts by their ops' places in the body, so a hit names the ops of the kernel at hand."""
        cpu = cpu_target(cpu)
        key = self.kernel_key(kernel_op, cpu)
        with self._lock:
            facts = self._facts.get(key)
        if facts is not None:
            self.stats.memory_hits += 1
            return CachedKernel(kernel_op, cpu, key, facts)
        facts = self._read_facts(key)
        if facts is not None:
            self.stats.disk_hits += 1
            with self._lock:
                self._facts[key] = facts
            return CachedKernel(kernel_op, cpu, key, facts)
        generic = self._row_generic_kernel(kernel_op, cpu, key)
        if generic is not None:
            return generic
        lowered = self._lower(kernel_op, cpu)
        return CachedKernel(kernel_op, cpu, key, self._keep_lowered(key, lowered, cpu), lowered)

    def plan_kernel_resized(self, kernel_op: Operation, cpu: CpuTarget | str | None, like: CachedKernel):
        """``kernel_op`` for a plan, ``like`` being a planned kernel that it is at other sizes (the
        source's, in a schedule made by ``lezero.runtime.shape_substitution``).  When ``like`` runs
        the code of a rows form and ``kernel_op``'s rows form is that same form (compared op by op,
        types and attributes, not printed), ``like``'s code at ``kernel_op``'s row count: what
        ``plan_kernel`` would find, without printing either kernel (the content key is computed
        if asked for); else ``plan_kernel``."""
        if like.row_generic is None:
            return self.plan_kernel(kernel_op, cpu)
        widest = widest_rows_form(kernel_op)
        if widest is not None and like.sizes:
            cpu = cpu_target(cpu)
            known = self._known_sequence_code(kernel_op, *widest)
            if known is None:
                return self.plan_kernel(kernel_op, cpu)
            return self._generic_kernel(kernel_op, cpu, lambda: self.kernel_key(kernel_op, cpu), known[0],
                                        math.prod(widest[0]), *known[1:])
        if widest is None or _structure(widest[1]) != _structure(like.generic_form) or \
                sequence_lengths(kernel_op, *widest):  # what plan_kernel would try first
            return self.plan_kernel(kernel_op, cpu)
        cpu = cpu_target(cpu)
        verdict = (like.row_generic, like.facts)
        return self._generic_kernel(kernel_op, cpu, lambda: self.kernel_key(kernel_op, cpu), verdict,
                                    math.prod(widest[0]), like.generic_form, ())

    def _keep_lowered(self, key: str, lowered: LoweredKernel, cpu: CpuTarget) -> KernelFacts:
        """The facts of ``lowered`` kept under content ``key`` (memory and disk), its compilation started."""
        facts = KernelFacts(lowered.name, self.object_key(lowered.llvm_ir, cpu),
                            lowered.work_items, lowered.flops, lowered.bytes_accessed, lowered.external_symbols,
                            lowered.packed_operands, tuple(c.portable() for c in lowered.index_checks or ()))
        with self._lock:
            self._facts[key] = facts
        self._start_compile(facts.object_key, lowered, cpu)
        self._write(self.path(key, ".k"), json.dumps(asdict(facts)).encode())
        return facts

    def _row_generic_kernel(self, kernel_op: Operation, cpu: CpuTarget, key: str):
        """``kernel_op`` served by the code of its rows form when that code serves every row count
        (``lezero/codegen/row_generic.py``: compiled once for all batch and sequence sizes), else
        None.  The probe runs when a second row count of the same rows form shows up (a model of
        static shapes never pays for it), or at once in a function that serves many shapes
        (``row_generic.MANY_SHAPES_ATTR``); its verdict is kept per rows form, in memory and on disk
        (``<key>.g``; the code's facts in ``<key>.k``).  In such a function a kernel whose rows hold
        the sequence length (attention; the embedding and mask kernels) tries its sequence forms
        first (``row_generic.sequence_lengths``): code that takes the length at run time as well."""
        known = self._generic_of.get(key)
        if known is not None:
            verdict, form, sizes, rows = known
            return self._generic_kernel(kernel_op, cpu, key, verdict, rows, form, sizes) if verdict else None
        widest = widest_rows_form(kernel_op)
        if widest is None:
            return None
        prefix, form = widest
        rows = math.prod(prefix)
        known = self._known_sequence_code(kernel_op, prefix, form)
        if known is not None:
            self._generic_of[key] = known + (rows,)
            return self._generic_kernel(kernel_op, cpu, key, *known[:1], rows, *known[1:])
        for length in sequence_lengths(kernel_op, prefix, form):
            sequence = sequence_form(form, length, SEQUENCE_PROBES[0])
            verdict = None if sequence is None else \
                self._generic_verdict(kernel_op, prefix, sequence, rows, cpu, length)
            if verdict:
                with self._lock:
                    self._sequence_codes.setdefault(_signature(sequence), []).append((sequence, verdict))
                self._generic_of[key] = (verdict, sequence, (length,), rows)
                return self._generic_kernel(kernel_op, cpu, key, verdict, rows, sequence, (length,))
        verdict = self._generic_verdict(kernel_op, prefix, form, rows, cpu)
        if verdict is not None:
            self._generic_of[key] = (verdict, form, (), rows)
        return self._generic_kernel(kernel_op, cpu, key, verdict, rows, form, ()) if verdict else None

    def _known_sequence_code(self, kernel_op: Operation, prefix: tuple, form: Operation) -> tuple | None:
        """``(verdict, sequence form, (length,))``: the code of a sequence form found before serves
        ``kernel_op`` (of rows form ``form`` over ``prefix``) when that form made at one of its lengths
        is ``form`` (op by op); else None.
        Its own sequence form would make every dim of the length run-time, and the dims that equal
        it by chance (GPT-2's 64-wide heads at a length of 64) can keep its lowering from taking it:
        the form found at another length knows which dims follow it.  Asked first, on the full
        path and for a substituted kernel alike, so both plan the same code."""
        with self._lock:
            known = list(self._sequence_codes.get(_signature(form), ()))
        for length in sequence_lengths(kernel_op, prefix, form) if known else ():
            for sequence, verdict in known:
                at = sequence_form(sequence, SEQUENCE_PROBES[0], length, instance=True)
                if at is None:
                    continue
                del at.attributes[SEQUENCE_ATTR]
                if _structure(at) == _structure(form):
                    return verdict, sequence, (length,)
        return None

    def _generic_verdict(self, kernel_op: Operation, prefix: tuple, form: Operation, rows: int, cpu: CpuTarget,
                         length: int | None = None):
        """Whether the code of ``form`` (``kernel_op``'s rows form, or its sequence form given the
        sequence ``length``) serves every row count: ``(RowGeneric, KernelFacts)``, False, or None
        when it is not probed yet (one row count so far)."""
        generic_key = self.kernel_key(form, cpu)
        with self._lock:
            verdict = self._row_generic.get(generic_key)
            first_rows = self._rows_seen.setdefault(generic_key, rows)
        if verdict is None:
            verdict = self._read_row_generic(generic_key)
        if verdict is None and first_rows == rows and not serves_many_shapes(kernel_op):
            return None  # one row count so far: lowered for it
        if verdict is None:
            found = lower_row_generic(kernel_op, prefix, lambda op: self._lower(op, cpu), length)
            verdict = False if found is None else (found[0], self._keep_lowered(generic_key, found[1], cpu))
            record = {"items_per_row": verdict[0].items_per_row, "length_power": verdict[0].length_power} \
                if verdict else {}
            self._write(self.path(generic_key, ".g"), json.dumps(record).encode())
        with self._lock:
            self._row_generic[generic_key] = verdict
        return verdict

    def _generic_kernel(self, kernel_op: Operation, cpu: CpuTarget, key: str, verdict, rows: int,
                        form: Operation, sizes: tuple) -> CachedKernel:
        shape, facts = verdict
        self.stats.row_generic_hits += 1
        here = replace(facts, work_items=shape.work_items(rows, sizes),
                       flops=estimate_flops(kernel_op.regions[0].blocks[0]), bytes_accessed=bytes_accessed(kernel_op))
        return CachedKernel(kernel_op, cpu, key, here, row_generic=shape, generic_form=form, sizes=sizes)

    def _read_row_generic(self, generic_key: str):
        """A row-generic verdict from disk: False, ``(RowGeneric, KernelFacts)``, or None (none there)."""
        payload = self._read(self.path(generic_key, ".g"))
        if payload is None:
            return None
        try:
            record = json.loads(payload)
            if not record:
                return False
            shape = RowGeneric(int(record["items_per_row"]), int(record.get("length_power", 0)))
        except (ValueError, KeyError, TypeError):
            self._reject(self.path(generic_key, ".g"))
            return None
        facts = self._read_facts(generic_key)
        return None if facts is None else (shape, facts)

    def load_kernels(self, kernels, cpu: CpuTarget | str | None = None) -> list[LoadedKernel]:
        """The machine code of each of ``kernels`` (``plan_kernel``'s), waiting for compilations."""
        cpu = cpu_target(cpu)
        keys = [self._object_key_of(kernel, cpu)[0] for kernel in kernels]
        with self._lock:
            pending = [self._pending[key] for key in keys if key in self._pending]
        # Every compilation ends before any loading starts: loading takes LLVM's lock, which the
        # compiler in this process holds for a whole kernel at a time.
        start = time.perf_counter()
        with progress(len(pending), "compiling kernels") as bar:  # on a terminal, when it takes a while
            for _ in as_completed(pending):
                bar.update()
        self.stats.compile_seconds += time.perf_counter() - start
        return [self._load_planned(kernel, cpu) for kernel in kernels]

    def load(self, llvm_ir: str, symbol: str, cpu: CpuTarget | str | None = None) -> LoadedKernel:
        """The compiled ``symbol`` of ``llvm_ir`` for ``cpu`` (default: ``$LEZERO_CPU`` or
        the host; it must be executable here), from memory, disk, or a fresh compile."""
        cpu = cpu_target(cpu)
        key = self.object_key(llvm_ir, cpu)
        with self._lock:
            hit = self._loaded.get(key)
        if hit is not None:
            self.stats.memory_hits += 1
            return hit
        return self._load_object(key, symbol, cpu, lambda: _compile_object(llvm_ir, cpu))

    def load_module(self, llvm_ir: str, symbols, cpu: CpuTarget | str | None = None):
        """``(engine, addresses)``: the addresses of ``symbols`` in the object code of ``llvm_ir``,
        read from disk when it is there, else compiled now and kept (the native thread pool's
        module: JIT-compiling it cost every process ~45 ms), and the engine that owns that code
        (keep it alive while an address is used)."""
        cpu = cpu_target(cpu)
        path = self.path(self.object_key(llvm_ir, cpu))
        obj = self._read(path)
        if obj is None:
            obj = _compile_object(llvm_ir, cpu)
            self._write(path, obj)
        return _engine_with(obj, symbols, cpu)

    # --- inside ----------------------------------------------------------------------------------
    def _lower(self, kernel_op: Operation, cpu: CpuTarget) -> LoweredKernel:
        start = time.perf_counter()
        with collector_paused():
            lowered = lower_kernel(kernel_op, cpu=cpu)
        self.stats.lower_seconds += time.perf_counter() - start
        self.stats.lowerings += 1
        return lowered

    def _start_compile(self, key: str, lowered: LoweredKernel, cpu: CpuTarget) -> None:
        """Compile ``lowered`` in the background unless its object is loaded, on disk or coming."""
        with self._lock:
            if key in self._loaded or key in self._pending:
                return
        if self.path(key).exists():
            return
        cpu.require_executable("kernels")
        future = compiler_for(cpu).submit(lowered.llvm_ir, OPT_LEVEL, lowered.name)
        with self._lock:
            self._pending[key] = future

    def _object_key_of(self, kernel, cpu: CpuTarget) -> tuple[str, str]:
        """The object key and symbol of a planned kernel."""
        if isinstance(kernel, CachedKernel):
            return kernel.facts.object_key, kernel.facts.symbol
        return self.object_key(kernel.llvm_ir, cpu), kernel.name

    def _load_planned(self, kernel, cpu: CpuTarget) -> LoadedKernel:
        key, symbol = self._object_key_of(kernel, cpu)
        with self._lock:
            hit = self._loaded.get(key)
            pending = self._pending.get(key)
        if hit is not None:
            return hit
        if pending is not None:
            try:
                return self._load_object(key, symbol, cpu, pending.result)
            finally:
                with self._lock:
                    self._pending.pop(key, None)
        obj = self._read(self.path(key))
        if obj is not None:
            self.stats.objects_read += 1
            return self._load_code(key, obj, symbol, cpu)
        if not isinstance(kernel, CachedKernel):
            return self._load_object(key, symbol, cpu, lambda: _compile_object(kernel.llvm_ir, cpu))
        # Its facts are here but its object is gone (removed, or rejected as corrupt): lower it
        # again and key it by this kernel's own symbol (a row-generic one: its rows form again).
        shape = kernel.row_generic
        lowered = self._lower(kernel.op if shape is None else kernel.generic_form, cpu)
        facts = replace(kernel.facts, symbol=lowered.name, object_key=self.object_key(lowered.llvm_ir, cpu))
        if shape is None:
            with self._lock:
                self._facts[kernel.content_key] = facts
            self._write(self.path(kernel.content_key, ".k"), json.dumps(asdict(facts)).encode())
        return self._load_object(facts.object_key, facts.symbol, cpu,
                                 lambda: _compile_object(lowered.llvm_ir, cpu))

    def _load_object(self, key: str, symbol: str, cpu: CpuTarget, compile_now) -> LoadedKernel:
        obj = self._read(self.path(key))
        if obj is None:
            start = time.perf_counter()
            obj = compile_now()
            self.stats.compile_seconds += time.perf_counter() - start
            self.stats.compiles += 1
            self._write(self.path(key), obj)
        else:
            self.stats.objects_read += 1
        return self._load_code(key, obj, symbol, cpu)

    def _load_code(self, key: str, obj: bytes, symbol: str, cpu: CpuTarget) -> LoadedKernel:
        start = time.perf_counter()
        kernel = _load_object(obj, symbol, cpu)
        self.stats.load_seconds += time.perf_counter() - start
        with self._lock:
            self._loaded[key] = kernel
        return kernel

    def _read_facts(self, key: str) -> KernelFacts | None:
        payload = self._read(self.path(key, ".k"))
        if payload is None:
            return None
        try:
            fields = json.loads(payload)
            return KernelFacts(fields["symbol"], fields["object_key"], int(fields["work_items"]),
                               int(fields["flops"]), int(fields["bytes_accessed"]),
                               tuple(fields["external_symbols"]),
                               tuple(packed_operand_from_fields(packed) for packed in fields["packed_operands"]),
                               tuple(tuple(check) for check in fields["index_checks"]))
        except (ValueError, KeyError, TypeError):
            self._reject(self.path(key, ".k"))
            return None

    def _read(self, path: pathlib.Path) -> bytes | None:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        ok = len(data) > _HEADER_LENGTH and data.startswith(_MAGIC)
        if ok:
            digest = data[len(_MAGIC):_HEADER_LENGTH - 1].decode("ascii", "replace")
            payload = data[_HEADER_LENGTH:]
            ok = hashlib.sha256(payload).hexdigest() == digest
        if not ok:
            self._reject(path)
            return None
        return payload

    def _reject(self, path: pathlib.Path) -> None:
        self.stats.rejected += 1
        try:
            path.unlink()
        except OSError:
            pass

    def _write(self, path: pathlib.Path, payload: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n" + payload)
            os.replace(tmp, path)
        except OSError:
            # A read-only or full cache directory costs speed, never correctness.
            pass

    def clear_memory(self) -> None:
        with self._lock:
            self._facts.clear()
            self._loaded.clear()
            self._row_generic.clear()
            self._rows_seen.clear()
            self._generic_of.clear()
            self._sequence_codes.clear()


_PAUSES = [0, False]  # lowerings under way, whether the collector ran before the first
_PAUSES_LOCK = threading.Lock()


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while a kernel is lowered (in any thread), back to
    its former state after the last.  Lowering builds an llvmlite module of ~10^5 objects that all
    live until it is printed, so the collector's full passes, which it starts each time the live
    objects grew by a quarter, walked the whole heap again and again: half of the lowering's CPU
    time (ResNet-50's 28 kernels 1.5-1.8 -> 0.73-0.95 s).  The module's cycles are garbage after
    it is printed; the collector frees them in one pass later.  A new shape's substitution
    (``lezero.onnx.compiled_model``) runs under it too."""
    with _PAUSES_LOCK:
        if _PAUSES[0] == 0:
            _PAUSES[1] = gc.isenabled()
            gc.disable()
        _PAUSES[0] += 1
    try:
        yield
    finally:
        with _PAUSES_LOCK:
            _PAUSES[0] -= 1
            if _PAUSES[0] == 0 and _PAUSES[1]:
                gc.enable()


def _structure(op: Operation) -> tuple:
    """What ``kernel_text`` prints of ``op``, as a tuple: op names, operands by value number, types
    and attributes (placement attributes left out).  Equal tuples print equal texts."""
    numbers: dict[int, int] = {}

    def walk(op: Operation) -> tuple:
        operands = tuple(numbers.get(id(v), -1) for v in op.operands)
        for r in op.results:
            numbers[id(r)] = len(numbers)
        regions = []
        for region in op.regions:
            for block in region.blocks:
                for a in block.args:
                    numbers[id(a)] = len(numbers)
                regions.append((tuple(a.type for a in block.args), tuple(walk(inner) for inner in block.ops)))
        attributes = tuple(sorted((k, v) for k, v in op.attributes.items() if k not in _PLACEMENT_ATTRS))
        return op.name, operands, tuple(r.type for r in op.results), attributes, tuple(regions)

    return walk(op)


def _signature(form: Operation) -> tuple:
    """What a rows form is without its sizes: its ops' names and its arguments' element types and
    ranks (forms of one kernel at two lengths have the same)."""
    body = form.regions[0].blocks[0]
    return (tuple(op.name for op in body.ops),
            tuple((a.type.element_type, a.type.rank) if isinstance(a.type, TensorType) else a.type for a in body.args))


def _compile_object(llvm_ir: str, cpu: CpuTarget) -> bytes:
    cpu.require_executable("kernels")
    tm = jit.shared_target_machine(cpu)
    parsed = jit.optimized_module(llvm_ir, tm)
    with jit._compile_lock:
        apply_codegen_options(tm.triple)
        return tm.emit_object(parsed)


def _engine_with(obj: bytes, symbols, cpu: CpuTarget) -> tuple:
    """An MCJIT engine holding object code ``obj``, and the addresses of ``symbols`` in it."""
    with jit._compile_lock:
        engine = jit.execution_engine(cpu)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        addresses = tuple(engine.get_function_address(symbol) for symbol in symbols)
    missing = [symbol for symbol, address in zip(symbols, addresses) if not address]
    if missing:
        raise RuntimeError(f"object code has no symbol {', '.join(map(repr, missing))}")
    return engine, addresses


def _load_object(obj: bytes, symbol: str, cpu: CpuTarget) -> LoadedKernel:
    engine, (address,) = _engine_with(obj, (symbol,), cpu)
    return LoadedKernel(engine, address, symbol)


_DEFAULT: KernelCache | None = None


_CACHES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # every KernelCache, for fork


def _after_fork_in_child() -> None:
    global _PAUSES_LOCK
    for cache in list(_CACHES.values()):
        cache._forget_parents_compilations()
    # the lowerings under way are the parent's threads': none runs here
    _PAUSES_LOCK = threading.Lock()
    if _PAUSES[0]:
        _PAUSES[0] = 0
        if _PAUSES[1]:
            gc.enable()


os.register_at_fork(after_in_child=_after_fork_in_child)


def default_cache() -> KernelCache:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = KernelCache()
    return _DEFAULT
