"""Reading an ONNX model: a path, bytes or a ``ModelProto``, with its external data.

External data is read only from files inside the model's folder: a location that is absolute or
climbs out of the folder (``..``, a symbolic link pointing elsewhere) is refused with an error
naming the tensor, so a model file cannot make lezero read arbitrary files.
"""
from __future__ import annotations

import os
import pathlib

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from lezero.ir.location import NameLoc
from lezero.onnx.errors import OnnxError


def load_model(source, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """The model, with every external tensor's data read (from ``base_dir``, default the folder of
    the file ``source`` names).  A ``ModelProto`` is used as it is, not copied, unless it has
    external data to read."""
    if isinstance(source, onnx.ModelProto):
        model = source
        if base_dir is None and _has_external_data(model):
            raise OnnxError("the model has tensors stored as external data, but it was given as a "
                            "ModelProto without base_dir: pass the file's path (or base_dir) so the "
                            "data can be found")
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse(bytes(source), "<bytes>")
    elif isinstance(source, (str, os.PathLike)):
        path = pathlib.Path(source)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise OnnxError(f"cannot read ONNX model: {e.strerror or e}", NameLoc(str(path))) from None
        model = _parse(data, str(path))
        if base_dir is None:
            base_dir = path.parent
    else:
        raise TypeError(f"expected a path, bytes or an onnx.ModelProto, got {type(source).__name__}")
    if _has_external_data(model):
        model = _copy(model)
        _load_external_data(model, pathlib.Path(base_dir))
    return model


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    where = NameLoc(what)
    if not data:
        raise OnnxError("the file is empty, not an ONNX model", where)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise OnnxError(f"not a valid ONNX model (truncated or not protobuf): {e}", where) from None
    if not model.HasField("graph"):
        raise OnnxError("not an ONNX model: it has no graph", where)
    return model


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _tensors(model: onnx.ModelProto):
    """Every tensor that may hold external data: initializers and Constant-like attributes, in the
    main graph, subgraphs and functions."""
    yield from external_data_helper._get_all_tensors(model)


def _has_external_data(model: onnx.ModelProto) -> bool:
    return any(external_data_helper.uses_external_data(t) for t in _tensors(model))


def checked_external_path(tensor: onnx.TensorProto, base_dir: pathlib.Path) -> pathlib.Path:
    """The file holding ``tensor``'s data; ``OnnxError`` naming the tensor if its location is
    missing, absolute, or leads out of ``base_dir``."""
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location")
    if not location:
        raise OnnxError(f"tensor '{tensor.name}' is stored as external data without a location")
    if os.path.isabs(location) or pathlib.PurePosixPath(location).is_absolute() or \
            pathlib.PureWindowsPath(location).is_absolute() or pathlib.PureWindowsPath(location).drive:
        raise OnnxError(f"tensor '{tensor.name}' has external data at the absolute path {location!r}: "
                        "external data must be a relative path inside the model's folder")
    base = base_dir.resolve()
    target = (base / location).resolve()
    if ".." in pathlib.PurePath(location).parts or not target.is_relative_to(base):
        raise OnnxError(f"tensor '{tensor.name}' has external data at {location!r}, which is outside the "
                        f"model's folder {str(base)!r}")
    if not target.is_file():
        raise OnnxError(f"tensor '{tensor.name}': its external data file {location!r} does not exist in "
                        f"{str(base)!r}")
    offset, length = int(info.get("offset", 0) or 0), info.get("length")
    size = target.stat().st_size
    if offset < 0 or offset > size or (length is not None and offset + int(length) > size):
        raise OnnxError(f"tensor '{tensor.name}': external data range (offset {offset}, length {length}) "
                        f"is beyond the end of {location!r} ({size} bytes)")
    return target


def _load_external_data(model: onnx.ModelProto, base_dir: pathlib.Path) -> None:
    for tensor in _tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        checked_external_path(tensor, base_dir)
        try:
            external_data_helper.load_external_data_for_tensor(tensor, str(base_dir))
        except (OSError, ValueError) as e:
            raise OnnxError(f"tensor '{tensor.name}': cannot read its external data: {e}") from None
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
