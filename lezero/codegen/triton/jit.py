"""Generated Triton source -> a launchable ``@triton.jit`` function, and PTX for sm_90 (AMD GCN for gfx942).

``load(kernel)`` writes the kernel's module to ``$LEZERO_CACHE_DIR/triton/<sha256>.py`` (else
``~/.cache/lezero/triton``; written to a temporary file and renamed, so concurrent processes never
see half a file) and imports it: ``@triton.jit`` reads its function's source with ``inspect``,
so it must live in a real file.  Loaded kernels are cached in memory by that hash.

Under ``TRITON_INTERPRET=1`` (read by triton when the module is imported, so set it before the
first load) the function runs on the CPU with torch CPU tensors as buffers.  ``build_ptx``
compiles for ``GPUTarget("cuda", 90, 32)`` without a GPU, ``build_amdgcn`` for ``GPUTarget("hip",
"gfx942", 64)`` (MI300; what instructions the kernels get there, since no AMD GPU runs them yet).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from lezero.codegen.triton.kernel import LaunchConfig, TritonKernel

MISSING_TRITON = "the cuda target needs triton: pip install -e '.[gpu]'"


# Multiply-adds contract to FMA on the GPU (one rounding instead of two; faster), as Triton and
# torch do by default.  Said explicitly: triton 3.9 warns when it is left to its default.
FP_FUSION = True


class TritonMissingError(ImportError):
    """Raised when a Triton kernel is loaded or built without the triton package."""


def _triton():
    try:
        import triton
    except ImportError as e:
        raise TritonMissingError(f"{MISSING_TRITON} ({e})") from None
    return triton


def cache_dir() -> Path:
    root = os.environ.get("LEZERO_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "lezero"
    return base / "triton"


def source_hash(kernel: TritonKernel) -> str:
    return hashlib.sha256(kernel.source.encode()).hexdigest()


def _write_source(kernel: TritonKernel, digest: str) -> Path:
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{digest}.py"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(kernel.source)
        os.replace(tmp, path)
    return path


class LoadedTritonKernel:
    """A kernel's ``@triton.jit`` function, launched on buffers (operands then results)."""

    def __init__(self, kernel: TritonKernel, fn, interpreted: bool):
        self.kernel = kernel
        self.fn = fn
        self.interpreted = interpreted

    def launch(self, buffers, config: LaunchConfig | None = None) -> None:
        config = config or self.kernel.configs[0]
        if not self.interpreted:
            self.fn[config.grid](*buffers, **config.constexprs, num_warps=config.num_warps,
                                 num_stages=config.num_stages, enable_fp_fusion=FP_FUSION)
            return
        with _language_restored(), _interpretable_library(), _tree_reductions():
            self.fn[config.grid](*buffers, **config.constexprs)


_LOADED: dict[tuple, LoadedTritonKernel] = {}


def body_hash(kernel: TritonKernel) -> str:
    """The hash of the source with the kernel's name taken out: kernels that differ only in their
    names (a model's repeated conv + bias + relu) share one loaded function, so one compile."""
    return hashlib.sha256(kernel.source.replace(kernel.name, "\0").encode()).hexdigest()


def load(kernel: TritonKernel) -> LoadedTritonKernel:
    """The kernel's function, imported from its cached file (once per body and interpreter mode:
    a kernel with the body of one already loaded runs that one's function)."""
    _triton()
    key = (body_hash(kernel), os.environ.get("TRITON_INTERPRET", "0"))
    loaded = _LOADED.get(key)
    if loaded is None:
        digest = source_hash(kernel)
        path = _write_source(kernel, digest)
        spec = importlib.util.spec_from_file_location(f"lezero_triton_{digest[:16]}_{key[1]}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded = _LOADED[key] = LoadedTritonKernel(kernel, getattr(module, kernel.name), key[1] == "1")
    return loaded if loaded.kernel is kernel else LoadedTritonKernel(kernel, loaded.fn, loaded.interpreted)


def build_ptx(kernel: TritonKernel, config: LaunchConfig | None = None) -> str:
    """The kernel compiled to PTX for sm_90 (no GPU needed)."""
    return _build(kernel, config, ("cuda", 90, 32), "ptx")


def build_amdgcn(kernel: TritonKernel, config: LaunchConfig | None = None) -> str:
    """The kernel compiled to AMD GCN assembly for gfx942 (MI300; no GPU needed)."""
    return _build(kernel, config, ("hip", "gfx942", 64), "amdgcn")


def _build(kernel: TritonKernel, config: LaunchConfig | None, target: tuple, assembly: str) -> str:
    """``triton.compile`` of the kernel with ``config`` (default: its first) for ``GPUTarget(*target)``:
    the ``assembly`` it makes."""
    triton = _triton()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    config = config or kernel.configs[0]
    interpret = os.environ.pop("TRITON_INTERPRET", None)  # the real JITFunction, not the interpreter's
    try:
        digest = source_hash(kernel)
        path = _write_source(kernel, digest)
        spec = importlib.util.spec_from_file_location(f"lezero_triton_ptx_{digest[:16]}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, kernel.name)
    finally:
        if interpret is not None:
            os.environ["TRITON_INTERPRET"] = interpret
    signature = {k: v for k, v in kernel.signature.items() if v != "constexpr"}
    signature.update({k: "constexpr" for k in config.constexprs})
    # every buffer is 16-byte aligned (torch's allocations; memory-plan's 64-byte offsets), which the
    # launch specializes on: so do the builds, else their loads are unvectorized and unpipelined
    aligned = {(i,): [["tt.divisibility", 16]] for i, kind in enumerate(signature.values()) if kind.startswith("*")}
    source = ASTSource(fn=fn, signature=signature, constexprs=dict(config.constexprs), attrs=aligned)
    with _compilable_library():
        compiled = triton.compile(source, target=GPUTarget(*target),
                                  options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                           "enable_fp_fusion": FP_FUSION})
    return compiled.asm[assembly]


def _language_namespaces() -> list:
    """The modules and classes of ``triton.language`` that the interpreter patches."""
    import triton.language as tl

    modules = [m for name, m in list(sys.modules.items())
               if m is not None and (name == "triton.language" or name.startswith("triton.language."))]
    return modules + [tl.core.tensor, tl.core.dtype, tl.core.condition, tl.core.tensor_descriptor_base]


@contextmanager
def _language_restored():
    """``triton.language`` as it was, after an interpreted launch: the interpreter patches the
    namespaces a called ``@triton.jit`` library function sees (``tl.core`` for ``tl.cdiv``) and
    never restores them, which breaks every later ``triton.compile`` in the process."""
    saved = [(ns, dict(vars(ns))) for ns in _language_namespaces()]
    try:
        yield
    finally:
        for ns, before in saved:  # (names the interpreter added for its rewritten functions stay)
            for name, value in list(vars(ns).items()):
                if name in before and before[name] is not value:
                    setattr(ns, name, before[name])


@contextmanager
def _interpretable_library():
    """The reverse of ``_compilable_library``, for an interpreted launch: a process that imported
    triton *before* ``TRITON_INTERPRET=1`` was set (``import torch._dynamo`` imports it) holds
    ``JITFunction`` library functions (``tl.cdiv``, ``tl.sum``), which raise "Cannot call
    @triton.jit'd outside of the scope of a kernel" when the interpreter calls them; for the
    duration each such call runs as an interpreted device function."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    original = JITFunction.__call__
    JITFunction.__call__ = lambda self, *args, **kwargs: InterpretedFunction(self.fn)(*args, **kwargs)
    try:
        yield
    finally:
        JITFunction.__call__ = original


@contextmanager
def _tree_reductions():
    """``tl.reduce`` with a kernel's own combine function as the GPU runs it, a tree over the axis,
    for the duration of an interpreted launch.  The interpreter combines the elements one after
    another in a Python loop: its float sums over a reduction's lanes come out less accurate than
    the compiled kernel's (lezero/codegen/accumulation.py) and a thousand times slower.  Here the
    first half of the axis combines with the second, elementwise, until one element is left (an
    odd one out waits for the next round); the left operand is always the earlier one."""
    import numpy as np
    from triton.runtime.interpreter import ReduceOps

    def tree_reduce(self, inputs):
        inputs, axis = self.unravel(inputs, self.axis)
        dtypes = [t.dtype for t in inputs]
        data = [t.handle.data for t in inputs]
        while data[0].shape[axis] > 1:
            half = data[0].shape[axis] // 2
            parts = [np.split(d, [half, 2 * half], axis=axis) for d in data]
            out = self.combine_fn.fn(*[self.to_tensor(p[0], dt) for p, dt in zip(parts, dtypes)],
                                     *[self.to_tensor(p[1], dt) for p, dt in zip(parts, dtypes)])
            out = out if isinstance(out, tuple) else (out,)
            data = [np.concatenate([o.handle.data, p[2]], axis=axis) for o, p in zip(out, parts)]
        if self.keep_dims and self.axis is None:
            data = [d.reshape((1,) * len(inputs[0].shape)) for d in data]
        elif not self.keep_dims:
            data = [np.squeeze(d, axis) if self.axis is not None else d.item() for d in data]
        return [self.to_tensor(d, dt) for d, dt in zip(data, dtypes)]

    original = ReduceOps.generic_reduce
    ReduceOps.generic_reduce = tree_reduce
    try:
        yield
    finally:
        ReduceOps.generic_reduce = original


@contextmanager
def _compilable_library():
    """``triton.language``'s own ``@triton.jit`` functions (``tl.cdiv``, ``tl.zeros``, ``tl.sum``) as
    compilable ``JITFunction``s for the duration: a process that imported triton under
    ``TRITON_INTERPRET=1`` (the test suite) holds interpreter versions of them, which
    ``triton.compile`` cannot call (and calling one leaves the interpreter's patches behind)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    replacements: dict[int, JITFunction] = {}
    changes = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, InterpretedFunction):
                if id(value) not in replacements:
                    replacements[id(value)] = JITFunction(value.fn)
                changes.append((module, attr, value))
                setattr(module, attr, replacements[id(value)])
    try:
        yield
    finally:
        for module, attr, value in changes:
            setattr(module, attr, value)
