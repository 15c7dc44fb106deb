"""``lz.jit.save(traced, path)`` / ``lz.jit.load(path)``: a traced module as its IR text and weights.

The file is an ``lz.save`` checkpoint (no pickle: loading runs no code; written atomically;
checksummed) holding::

    {"format": "lezero.jit.TracedModule", "version": 1,
     "graph": the module's MLIR text, with locations (the user's source lines),
     "entry": the function's name, "inputs": how many data inputs it takes,
     "outputs": the output structure (tensor indices in tuples, lists, dicts),
     "tensors": {state-dict name: tensor}, one per argument after the inputs}

Loading parses and verifies the text and binds each named argument (``{lz.name = ...}``) to its
saved tensor, checking shapes and dtypes, so a loaded module runs exactly as the traced one did.
"""
from __future__ import annotations

import os

from lezero.eager.core import wrap
from lezero.eager.serialization import CheckpointError, load as load_checkpoint, save as save_checkpoint
from lezero.eager.tensor import Tensor
from lezero.ir.parser import parse_module
from lezero.ir.printer import print_module
from lezero.ir.verifier import verify
from lezero.jit.trace import TracedModule, argument_names
from lezero.tflite import export as tflite_export

FORMAT = "lezero.jit.TracedModule"
VERSION = 1


# File names of formats lz.jit.save does not write (issue 12): an error, never lezero's format under
# their name.  The value says where the format is written instead, if anywhere.
OTHER_FORMATS = {".onnx": "write ONNX with lezero.onnx.export(traced, path)"}


def save(traced: TracedModule, f) -> None:
    """Write ``traced`` to the path (or binary file) ``f``; a ``.tflite`` path gets a TFLite
    flatbuffer (``lezero.tflite.export``, issue 12), which ``load`` does not read back."""
    if not hasattr(f, "write"):
        suffix = os.path.splitext(os.fspath(f))[1].lower()
        if suffix in OTHER_FORMATS:
            raise ValueError(f"lz.jit.save: {os.fspath(f)!r} names a {suffix} file, but lz.jit.save writes lezero's "
                             f"traced-module format; {OTHER_FORMATS[suffix]}")
        if suffix == ".tflite" and isinstance(traced, TracedModule):
            tflite_export(traced, f)
            return
    if not isinstance(traced, TracedModule):
        raise TypeError(f"lz.jit.save takes a TracedModule (from lz.jit.trace), got {type(traced).__name__}")
    if traced.random or traced.updates:
        raise TypeError("lz.jit.save: this traced module draws random numbers or updates buffers (traced in "
                        "training mode); a saved module could not follow its generator or module: trace it after "
                        "model.eval()")
    save_checkpoint({"format": FORMAT, "version": VERSION, "graph": print_module(traced.module, debuginfo=True),
                     "entry": traced.entry, "inputs": traced.n_inputs, "outputs": traced.structure,
                     "tensors": {name: t for name, t in traced.named_tensors}}, f)  # cuda ones copied to the host


def load(f) -> TracedModule:
    """Read what ``save`` wrote."""
    name = getattr(f, "name", None) or (os.fspath(f) if not hasattr(f, "read") else "<stream>")
    obj = load_checkpoint(f)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise CheckpointError(f"{name}: not a traced module saved by lz.jit.save (an lz.save checkpoint? read it "
                              f"with lz.load)")
    if obj.get("version") != VERSION:
        raise CheckpointError(f"{name}: traced-module format version {obj.get('version')} is not supported "
                              f"(expected {VERSION})")
    module = parse_module(obj["graph"], filename=str(name))
    verify(module)
    entry, n_inputs, tensors = obj["entry"], int(obj["inputs"]), obj["tensors"]
    func = module.lookup(entry)
    names = argument_names(func)[n_inputs:]
    if sorted(names) != sorted(tensors):
        raise CheckpointError(f"{name}: the graph's arguments {names} and the saved tensors {list(tensors)} differ")
    named = []
    for arg, key in zip(func.arguments[n_inputs:], names):
        t = tensors[key]
        t = t if isinstance(t, Tensor) else wrap(t)
        want = arg.type
        if t._data.shape != tuple(want.shape) or t._data.dtype != want.element_type.numpy_dtype:
            raise CheckpointError(f"{name}: tensor {key!r} is {t._data.dtype}{list(t._data.shape)}, the graph "
                                  f"expects {want}")
        named.append((key, t))
    return TracedModule(module, entry, named, obj["outputs"], n_inputs)
