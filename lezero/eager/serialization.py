"""``lz.save`` / ``lz.load``: checkpoints without pickle, so loading runs no code.

A file is::

    b"LZCKPT01"                      magic and format version
    u64 little-endian                 length of the JSON header
    JSON header                       {"structure": ..., "tensors": [{dtype, shape, offset, nbytes}],
                                       "sha256": digest of the data section}
    padding to 64 bytes
    data section                      each tensor's bytes, little-endian, C order, 64-byte aligned

``structure`` is the saved object with each tensor replaced by ``{"__tensor__": i}``; dicts with
non-string keys, tuples, and non-finite floats get tagged forms (``__dict__``, ``__tuple__``,
``__float__``), so a state dict, an optimizer's state dict or any nesting of dicts, lists,
tuples, numbers, strings, None and tensors comes back as it went in (tensors as ``lz.Tensor``,
numpy arrays too).  Random number generators' states need two more kinds: numpy arrays of the
unsigned types lezero has no dtype for (MT19937's ``uint32`` key) are stored as ``{"__ndarray__": i}``
and come back as numpy arrays, and integers of any size (PCG64's 128-bit state) are JSON integers.

``snapshot(obj)`` separates taking the values from writing them: it copies every array (the
only time the caller must wait), and its ``write`` can then run in a background thread while
training goes on changing the tensors (``lz.utils.checkpoint`` saves that way).

Writes are atomic: a temporary file in the same directory, flushed and fsynced, then renamed over
the target (and the directory fsynced), so a crash leaves the old file or the new one, never half
of one.  Reading checks the magic, the header, every tensor's extent and the data's SHA-256: a
truncated or corrupt file raises ``CheckpointError`` saying what is wrong.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import math
import mmap
import os
import struct
import tempfile

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import Tensor, wrap
from lezero.eager.device_arrays import host, storage, to_device
from lezero.runtime.devices import device

MAGIC = b"LZCKPT01"
ALIGNMENT = 64
# numpy dtypes without a lezero dtype that a checkpoint still holds (RNG states), as numpy arrays
_NUMPY_ONLY = {np.dtype(t): np.dtype(t).name for t in (np.uint16, np.uint32, np.uint64)}


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be read: truncated, corrupt, or not a lezero checkpoint."""


def _encode(obj, arrays: list):
    if isinstance(obj, Tensor):
        arrays.append(host(obj._data))  # a cuda tensor's values, copied to the host
        return {"__tensor__": len(arrays) - 1}
    if isinstance(obj, np.ndarray):
        arrays.append(obj)
        if obj.dtype in _NUMPY_ONLY:
            return {"__ndarray__": len(arrays) - 1}
        _dt.from_numpy_dtype(obj.dtype)
        return {"__tensor__": len(arrays) - 1}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and not any(k.startswith("__") and k.endswith("__") for k in obj):
            return {k: _encode(v, arrays) for k, v in obj.items()}
        return {"__dict__": [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else {"__float__": repr(float(obj))}
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, _dt.dtype):
        return {"__dtype__": obj.name}
    raise TypeError(f"lz.save cannot store a {type(obj).__name__}: only tensors, numpy arrays, numbers, strings, "
                    "None, and dicts, lists and tuples of them")


def _decode(obj, tensors: list):
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if isinstance(obj, dict):
        if len(obj) == 1:
            (key, value), = obj.items()
            if key == "__tensor__":
                return tensors[value]
            if key == "__ndarray__":
                return tensors[value]
            if key == "__tuple__":
                return tuple(_decode(v, tensors) for v in value)
            if key == "__dict__":
                return {_decode(k, tensors): _decode(v, tensors) for k, v in value}
            if key == "__float__":
                return float(value)
            if key == "__dtype__":
                return _dt.as_dtype(value)
        return {k: _decode(v, tensors) for k, v in obj.items()}
    return obj


def _pad(n: int) -> int:
    return -n % ALIGNMENT


class Snapshot:
    """An object's values, taken (``snapshot``) and ready to be written (``write``): the
    structure, and one host array per tensor."""

    def __init__(self, structure, arrays: list):
        self.structure, self.arrays = structure, arrays

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def write(self, f, sync_directory: bool = True) -> str:
        """Write the checkpoint to the path ``f`` atomically (or to a binary file object); returns
        the SHA-256 of its header, which holds the data's: a digest of the whole file for the
        price of hashing the data once (``verify`` checks it).  ``sync_directory``: see
        ``atomic_write``."""
        entries, offset = [], 0
        for a in self.arrays:
            name = _NUMPY_ONLY.get(a.dtype) or _dt.from_numpy_dtype(a.dtype).name
            entries.append({"dtype": name, "shape": list(a.shape), "offset": offset, "nbytes": a.nbytes})
            offset += a.nbytes + _pad(a.nbytes)
        blobs = [_bits(a).astype(_bits(a).dtype.newbyteorder("<"), copy=False) for a in self.arrays]
        chunks = [piece for blob in blobs for piece in (memoryview(blob).cast("B") if blob.nbytes else b"",
                                                        b"\0" * _pad(blob.nbytes))]

        def prefix_with(digest: str) -> bytes:
            header = json.dumps({"structure": self.structure, "tensors": entries, "sha256": digest,
                                 "data_bytes": offset}, separators=(",", ":"), allow_nan=False).encode()
            prefix = MAGIC + struct.pack("<Q", len(header)) + header
            return prefix + b"\0" * _pad(len(prefix))

        def write(out) -> bytes:
            if not out.seekable():  # a stream: hash, then write
                digest = hashlib.sha256()
                for chunk in chunks:
                    digest.update(chunk)
                prefix = prefix_with(digest.hexdigest())
                out.write(prefix)
                for chunk in chunks:
                    out.write(chunk)
                return prefix
            # A file: the data is hashed on a helper thread while it is written (hashlib and file
            # writes release the GIL), then the header goes in again with the digest (64 hex
            # digits, the placeholder's length).
            start = out.tell()
            out.write(prefix_with("0" * 64))
            digest = hashlib.sha256()
            with concurrent.futures.ThreadPoolExecutor(1) as hasher:  # one thread: the updates in order
                hashed = [hasher.submit(digest.update, chunk) for chunk in chunks]
                for chunk in chunks:
                    out.write(chunk)
            for done in hashed:
                done.result()
            prefix = prefix_with(digest.hexdigest())
            end = out.tell()
            out.seek(start)
            out.write(prefix)
            out.seek(end)
            return prefix

        if hasattr(f, "write"):
            prefix = write(f)
        else:
            prefix = atomic_write(os.fspath(f), write, sync_directory)
        return hashlib.sha256(prefix).hexdigest()


def snapshot(obj, copy: bool = True) -> Snapshot:
    """Take ``obj``'s values for ``Snapshot.write``: with ``copy`` every array is copied, so the
    tensors may change (an optimizer step) before the write happens."""
    arrays: list = []
    structure = _encode(obj, arrays)
    arrays = [np.array(storage(a), copy=True, order="C") if copy else np.asarray(storage(a), order="C")
              for a in arrays]
    return Snapshot(structure, arrays)


def atomic_write(path: str, write, sync_directory: bool = True):
    """Call ``write(file)`` on a temporary file beside ``path``, flush and fsync it, rename it over
    ``path`` and fsync the directory (unless ``sync_directory`` is false: a caller writing several
    files of one folder fsyncs it once): a crash leaves the old file or the new one.  Returns
    what ``write`` returned."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            result = write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sync_directory:
        fsync_directory(directory)
    return result


def fsync_directory(directory: str) -> None:
    """Make a rename or an unlink in ``directory`` durable (where the platform allows it)."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def save(obj, f) -> None:
    """Write ``obj`` (a state dict, or any nesting of dicts/lists/tuples of tensors, numbers,
    strings) to the path ``f`` atomically, or to a binary file object."""
    snapshot(obj, copy=False).write(f)


def load(f, map_location=None, weights_only: bool = True):
    """Read what ``save`` wrote; tensors come back as ``lz.Tensor``, on the CPU or on the device
    ``map_location`` names (``weights_only`` is always true: nothing but data is ever loaded)."""
    target = device("cpu" if map_location is None else str(map_location))
    if hasattr(f, "read"):
        data = f.read()
        name = getattr(f, "name", "<stream>")
        return _parse(memoryview(data), name, target)
    name = os.fspath(f)
    with open(name, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        if not size:
            return _parse(memoryview(b""), name, target)
        with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as mapped:  # no second copy in memory
            view = memoryview(mapped)
            try:
                return _parse(view, name, target)
            finally:
                view.release()


def _bits(a: np.ndarray) -> np.ndarray:
    """``a`` as the numbers a file holds: bfloat16 as its 16 bits (ml_dtypes' type has no buffer format)."""
    return a.view(np.uint16) if a.dtype is _dt.BFLOAT16_STORAGE else a


def _read_tensor(payload: memoryview, i: int, entry: dict, data_bytes: int, fail) -> np.ndarray:
    """Tensor ``i`` of the data section: a writable, native-order copy."""
    try:
        name = entry["dtype"]
        numpy_type = np.dtype(name) if name in _NUMPY_ONLY.values() else _dt.as_dtype(name).numpy
        shape = tuple(int(s) for s in entry["shape"])
        offset, nbytes = int(entry["offset"]), int(entry["nbytes"])
    except (KeyError, TypeError, ValueError) as err:
        fail(f"tensor #{i} has a corrupt entry ({err})")
    if nbytes != math.prod(shape) * np.dtype(numpy_type).itemsize or offset < 0 or offset + nbytes > data_bytes:
        fail(f"tensor #{i} ({entry['dtype']}, shape {list(shape)}) does not fit the data section")
    with payload[offset:offset + nbytes] as chunk:
        bits = np.uint16 if numpy_type is _dt.BFLOAT16_STORAGE else numpy_type
        stored = np.frombuffer(chunk, dtype=np.dtype(bits).newbyteorder("<")).reshape(shape)
        array = np.array(stored, dtype=bits, order="C").view(numpy_type)
        del stored
    return array


def verify(path) -> str:
    """Check the file at ``path`` as ``load`` does (magic, header, extents, the data's SHA-256)
    without making tensors; returns the SHA-256 of its header, as ``Snapshot.write`` did."""
    name = os.fspath(path)
    with open(name, "rb") as stream:
        if not os.fstat(stream.fileno()).st_size:
            _parse(memoryview(b""), name, None, decode=False)
        with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                return _parse(view, name, None, decode=False)
            finally:
                view.release()


def _parse(data: memoryview, name: str, target, decode: bool = True):
    """The object in ``data`` (or, without ``decode``, the header's digest once the data is checked)."""
    def fail(why: str):
        raise CheckpointError(f"{name}: not a valid lezero checkpoint: {why}")

    if len(data) < len(MAGIC) + 8:
        fail(f"the file is {len(data)} bytes long, shorter than the header (truncated?)")
    if bytes(data[:len(MAGIC)]) != MAGIC:
        if bytes(data[:len(MAGIC) - 2]) == MAGIC[:-2]:
            fail(f"format version {bytes(data[len(MAGIC) - 2:len(MAGIC)])!r} is not supported (expected {MAGIC[-2:]!r})")
        fail("the magic bytes are missing (was it written by lz.save?)")
    (header_len,) = struct.unpack("<Q", data[len(MAGIC):len(MAGIC) + 8])
    start = len(MAGIC) + 8
    if start + header_len > len(data):
        fail(f"the header says it is {header_len} bytes but the file ends after {len(data) - start} (truncated?)")
    try:
        header = json.loads(bytes(data[start:start + header_len]))
        structure, entries, expected = header["structure"], header["tensors"], header["sha256"]
        data_bytes = int(header["data_bytes"])
    except (ValueError, KeyError, TypeError) as e:
        fail(f"the header is corrupt ({e})")
    base = start + header_len
    base += _pad(base)
    if base + data_bytes > len(data):
        fail(f"the data section should hold {data_bytes} bytes but the file has {max(len(data) - base, 0)} "
             "(truncated?)")
    if base + data_bytes < len(data):
        fail(f"{len(data) - base - data_bytes} unexpected bytes after the data section")
    # every view of the (mapped) file is released before returning or raising
    with data[base:base + data_bytes] as payload:
        if hashlib.sha256(payload).hexdigest() != expected:
            fail("the data does not match its checksum (the file is corrupt)")
        if not decode:
            with data[:base] as head:
                return hashlib.sha256(head).hexdigest()
        arrays = [_read_tensor(payload, i, e, data_bytes, fail) for i, e in enumerate(entries)]
        tensors = [a if a.dtype in _NUMPY_ONLY else wrap(to_device(a, target)) for a in arrays]
    try:
        return _decode(structure, tensors)
    except (IndexError, TypeError, ValueError) as e:
        fail(f"the structure refers to data that is not there ({e})")

