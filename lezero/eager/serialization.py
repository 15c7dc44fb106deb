"""``lz.save`` / ``lz.load``: checkpoints without pickle, so loading runs no code.

A file (format version 02) is::

    b"LZCKPT02"                      magic and format version
    u32 little-endian                 length of the header
    header                            zlib-compressed JSON: {"structure": ..., "tensors": [[dtype, shape], ...]}
    32 bytes                          SHA-256 of the data section
    data section                      each tensor's bytes, little-endian, C order, to the end of the file

Each tensor starts at a file offset that is a multiple of 64 when it holds at least 4 KiB (a
large tensor that a reader maps or copies with vector loads), else a multiple of its item size;
the offsets follow from the shapes, so the header stores none.  Why so lean: a quantized model
is mostly small tensors (a scale, a zero point, a bias per layer beside a few kilobytes of int8
weights), and version 01's header (a JSON entry with an offset and a byte count per tensor,
every tensor padded to 64 bytes) cost ~140 bytes per tensor, more than many of the tensors
themselves.  The structure's keys are module paths (``features.0.weight``, ``features.0.
weight_scale``) that repeat their prefixes, which zlib stores once; the digest sits outside the
compressed header, so a writer can fill it in after the data without moving anything.

``structure`` is the saved object with each tensor replaced by ``{"__tensor__": i}``; dicts with
non-string keys, tuples, and non-finite floats get tagged forms (``__dict__``, ``__tuple__``,
``__float__``), so a state dict, an optimizer's state dict or any nesting of dicts, lists,
tuples, numbers, strings, None and tensors comes back as it went in (tensors as ``lz.Tensor``,
numpy arrays too).  Random number generators' states need two more kinds: numpy arrays of the
unsigned types lezero has no dtype for (MT19937's ``uint32`` key) are stored as ``{"__ndarray__": i}``
and come back as numpy arrays, and integers of any size (PCG64's 128-bit state) are JSON integers.

Files of version 01 (``b"LZCKPT01"``, u64 header length, plain JSON header with ``{dtype, shape,
offset, nbytes}`` per tensor and the data's hex digest, data 64-byte aligned) still load.

``snapshot(obj)`` separates taking the values from writing them: it copies every array (the
only time the caller must wait), and its ``write`` can then run in a background thread while
training goes on changing the tensors (``lz.utils.checkpoint`` saves that way).

Writes are atomic: a temporary file in the same directory, flushed and fsynced, then renamed over
the target (and the directory fsynced), so a crash leaves the old file or the new one, never half
of one.  Reading checks the magic, the header (zlib's checksum), every tensor's extent and the
data's SHA-256: a truncated or corrupt file raises ``CheckpointError`` saying what is wrong.
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
import zlib

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import Tensor, wrap
from lezero.eager.device_arrays import host, storage, to_device
from lezero.runtime.devices import device

MAGIC = b"LZCKPT02"
_MAGIC_V1 = b"LZCKPT01"  # still read
ALIGNMENT = 64  # of a tensor of LARGE bytes or more; smaller ones are aligned to their item size
LARGE = 4096
DIGEST = 32  # bytes of the data section's SHA-256
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


def _offsets(base: int, sizes) -> tuple[list[int], int]:
    """The file offsets of tensors of ``sizes`` (``(nbytes, itemsize)`` each) laid out from
    ``base`` in version 02, and where the last one ends."""
    offsets, cursor = [], base
    for nbytes, itemsize in sizes:
        align = ALIGNMENT if nbytes >= LARGE else max(itemsize, 1)
        cursor += -cursor % align
        offsets.append(cursor)
        cursor += nbytes
    return offsets, cursor


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
        the SHA-256 of everything before the data section (the header and the data's digest): a
        digest of the whole file for the price of hashing the data once (``verify`` checks it).
        ``sync_directory``: see ``atomic_write``."""
        table = [[_NUMPY_ONLY.get(a.dtype) or _dt.from_numpy_dtype(a.dtype).name, list(a.shape)]
                 for a in self.arrays]
        header = zlib.compress(json.dumps({"structure": self.structure, "tensors": table}, separators=(",", ":"),
                                          allow_nan=False).encode())
        if len(header) >= 2 ** 32:
            raise ValueError(f"lz.save: the header is {len(header)} bytes compressed, over the format's 4 GiB")
        head = MAGIC + struct.pack("<I", len(header)) + header
        blobs = [_bits(a).astype(_bits(a).dtype.newbyteorder("<"), copy=False) for a in self.arrays]
        offsets, _ = _offsets(len(head) + DIGEST, [(blob.nbytes, blob.itemsize) for blob in blobs])
        chunks, cursor = [], len(head) + DIGEST
        for blob, offset in zip(blobs, offsets):
            if offset > cursor:
                chunks.append(bytes(offset - cursor))
            if blob.nbytes:
                chunks.append(memoryview(blob).cast("B"))
            cursor = offset + blob.nbytes

        def write(out) -> bytes:
            if not out.seekable():  # a stream: hash, then write
                digest = hashlib.sha256()
                for chunk in chunks:
                    digest.update(chunk)
                out.write(head + digest.digest())
                for chunk in chunks:
                    out.write(chunk)
                return head + digest.digest()
            # A file: the data is hashed on a helper thread while it is written (hashlib and file
            # writes release the GIL), then the digest goes into its place before the data.
            start = out.tell()
            out.write(head + bytes(DIGEST))
            digest = hashlib.sha256()
            with concurrent.futures.ThreadPoolExecutor(1) as hasher:  # one thread: the updates in order
                hashed = [hasher.submit(digest.update, chunk) for chunk in chunks]
                for chunk in chunks:
                    out.write(chunk)
            for done in hashed:
                done.result()
            end = out.tell()
            out.seek(start + len(head))
            out.write(digest.digest())
            out.seek(end)
            return head + digest.digest()

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


def _tensor_type(i: int, entry, fail) -> tuple[np.dtype, tuple]:
    """The numpy type and shape of tensor ``i``'s header entry ``[dtype, shape]``."""
    try:
        name, shape = entry
        numpy_type = np.dtype(name) if name in _NUMPY_ONLY.values() else _dt.as_dtype(name).numpy
        shape = tuple(int(s) for s in shape)
    except (KeyError, TypeError, ValueError) as err:
        fail(f"tensor #{i} has a corrupt entry ({err})")
    if any(s < 0 for s in shape):
        fail(f"tensor #{i} has a negative dimension in its shape {list(shape)}")
    return numpy_type, shape


def _read_tensor(payload: memoryview, numpy_type: np.dtype, shape: tuple, offset: int) -> np.ndarray:
    """The tensor at ``offset`` of the data section: a writable, native-order copy."""
    bits = np.uint16 if numpy_type is _dt.BFLOAT16_STORAGE else numpy_type
    nbytes = math.prod(shape) * np.dtype(bits).itemsize
    with payload[offset:offset + nbytes] as chunk:
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


def _header_v2(data: memoryview, fail):
    """(structure, [(numpy type, shape, offset in the data section)], data start, data end, digest)
    of a version-02 file."""
    start = len(MAGIC) + 4
    if len(data) < start:
        fail(f"the file is {len(data)} bytes long, shorter than the header (truncated?)")
    (header_len,) = struct.unpack("<I", data[len(MAGIC):start])
    base = start + header_len + DIGEST
    if base > len(data):
        fail(f"the header says it is {header_len} bytes but the file ends after {len(data) - start} (truncated?)")
    try:
        header = json.loads(zlib.decompress(data[start:start + header_len]))
        structure, table = header["structure"], list(header["tensors"])
    except (zlib.error, ValueError, KeyError, TypeError) as e:
        fail(f"the header is corrupt ({e})")
    types = [_tensor_type(i, entry, fail) for i, entry in enumerate(table)]
    sizes = [(math.prod(shape) * t.itemsize, t.itemsize) for t, shape in types]
    offsets, end = _offsets(base, sizes)
    entries = [(t, shape, offset - base) for (t, shape), offset in zip(types, offsets)]
    return structure, entries, base, end, bytes(data[base - DIGEST:base])


def _header_v1(data: memoryview, fail):
    """What ``_header_v2`` gives, of a version-01 file (a plain JSON header, 64-byte alignment)."""
    start = len(_MAGIC_V1) + 8
    if len(data) < start:
        fail(f"the file is {len(data)} bytes long, shorter than the header (truncated?)")
    (header_len,) = struct.unpack("<Q", data[len(_MAGIC_V1):start])
    if start + header_len > len(data):
        fail(f"the header says it is {header_len} bytes but the file ends after {len(data) - start} (truncated?)")
    try:
        header = json.loads(bytes(data[start:start + header_len]))
        structure, table, digest = header["structure"], header["tensors"], bytes.fromhex(header["sha256"])
        data_bytes = int(header["data_bytes"])
    except (ValueError, KeyError, TypeError) as e:
        fail(f"the header is corrupt ({e})")
    base = start + header_len
    base += _pad(base)
    entries = []
    for i, entry in enumerate(table):
        try:
            t, shape = _tensor_type(i, [entry["dtype"], entry["shape"]], fail)
            offset, nbytes = int(entry["offset"]), int(entry["nbytes"])
        except (KeyError, TypeError, ValueError) as err:
            fail(f"tensor #{i} has a corrupt entry ({err})")
        if nbytes != math.prod(shape) * t.itemsize or offset < 0 or offset + nbytes > data_bytes:
            fail(f"tensor #{i} ({entry['dtype']}, shape {list(shape)}) does not fit the data section")
        entries.append((t, shape, offset))
    return structure, entries, base, base + data_bytes, digest


def _parse(data: memoryview, name: str, target, decode: bool = True):
    """The object in ``data`` (or, without ``decode``, the SHA-256 of what precedes the data
    section once the data is checked)."""
    def fail(why: str):
        raise CheckpointError(f"{name}: not a valid lezero checkpoint: {why}")

    if len(data) < len(MAGIC):
        fail(f"the file is {len(data)} bytes long, shorter than the header (truncated?)")
    magic = bytes(data[:len(MAGIC)])
    if magic not in (MAGIC, _MAGIC_V1):
        if magic[:-2] == MAGIC[:-2]:
            fail(f"format version {magic[-2:]!r} is not supported (expected {MAGIC[-2:]!r} or {_MAGIC_V1[-2:]!r})")
        fail("the magic bytes are missing (was it written by lz.save?)")
    structure, entries, base, end, expected = (_header_v2 if magic == MAGIC else _header_v1)(data, fail)
    if end > len(data):
        fail(f"the data section should hold {end - base} bytes but the file has {max(len(data) - base, 0)} "
             "(truncated?)")
    if end < len(data):
        fail(f"{len(data) - end} unexpected bytes after the data section")
    # every view of the (mapped) file is released before returning or raising
    with data[base:end] as payload:
        if hashlib.sha256(payload).digest() != expected:
            fail("the data does not match its checksum (the file is corrupt)")
        if not decode:
            with data[:base] as head:
                return hashlib.sha256(head).hexdigest()
        arrays = [_read_tensor(payload, t, shape, offset) for t, shape, offset in entries]
        tensors = [a if a.dtype in _NUMPY_ONLY else wrap(to_device(a, target)) for a in arrays]
    try:
        return _decode(structure, tensors)
    except (IndexError, TypeError, ValueError) as e:
        fail(f"the structure refers to data that is not there ({e})")
