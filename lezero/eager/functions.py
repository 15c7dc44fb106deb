"""The function forms of tensor ops (``lz.exp(x)``, ``lz.cat([...], dim)``, ``lz.where(c, a, b)``),
as PyTorch spells them; most forward to the ``Tensor`` method of the same name."""
from __future__ import annotations

from lezero.eager import dtypes as _dt
from lezero.eager.core import Tensor, apply, axis_of, cast_to
from lezero.eager.creation import as_tensor
from lezero.eager.dispatch import EagerOp, constant_of  # issue 13: addmm, baddbmm
from lezero.eager.ops import CONCAT, SELECT
from lezero.eager.promotion import is_number, scalar


def _as_tensor(x) -> Tensor:
    """An argument as a tensor: arrays of other libraries shared (``as_tensor``), Python data copied."""
    if isinstance(x, Tensor):
        return x
    return as_tensor(x)


def cat(tensors, dim: int = 0) -> Tensor:
    """Join tensors along ``dim`` (their dtypes promoted to one)."""
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    target = _dt.result_type([t.dtype for t in tensors])
    tensors = [cast_to(t, target) for t in tensors]
    if len(tensors) == 1:
        return tensors[0]
    axis = axis_of(dim, tensors[0].ndim)
    return apply(CONCAT, (("axis", axis), ("stack", False), ("stacked_shape", None)), *tensors)


concat = concatenate = cat


def stack(tensors, dim: int = 0) -> Tensor:
    """Join same-shaped tensors along a new dim ``dim``."""
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tensors[0].shape
    for i, t in enumerate(tensors[1:], 1):
        if t.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                               f"{list(t.shape)} at entry {i}")
    target = _dt.result_type([t.dtype for t in tensors])
    tensors = [cast_to(t, target) for t in tensors]
    axis = axis_of(dim, len(shape) + 1)
    stacked = shape[:axis] + (1,) + shape[axis:]
    if len(tensors) == 1:
        return tensors[0].reshape(stacked)
    return apply(CONCAT, (("axis", axis), ("stack", True), ("stacked_shape", stacked)), *tensors)


def where(condition, input, other) -> Tensor:  # noqa: A002 - PyTorch's names
    """``input`` where ``condition`` holds, else ``other`` (tensors or numbers; they broadcast)."""
    condition = cast_to(_as_tensor(condition), _dt.bool_)
    input, other = (v if is_number(v) else _as_tensor(v) for v in (input, other))  # noqa: A001
    tensors = [v for v in (input, other) if isinstance(v, Tensor)]
    if not tensors:
        raise TypeError("where() needs at least one of input and other to be a tensor")
    dims = [t.dtype for t in tensors if t.ndim]
    zero = [t.dtype for t in tensors if not t.ndim]
    scalars = [v for v in (input, other) if is_number(v)]
    target = _dt.result_type(dims, zero, scalars)
    on = tensors[0]._data  # numbers go to the tensors' device
    a = cast_to(input, target) if isinstance(input, Tensor) else scalar(input, target.numpy, on)
    b = cast_to(other, target) if isinstance(other, Tensor) else scalar(other, target.numpy, on)
    return apply(SELECT, (), condition, a, b)


def maximum(a, b) -> Tensor:
    return _as_tensor(a).maximum(b)


def minimum(a, b) -> Tensor:
    return _as_tensor(a).minimum(b)


def matmul(a, b) -> Tensor:
    return _as_tensor(a).matmul(b)


mm = bmm = matmul


def clamp(x, min=None, max=None) -> Tensor:  # noqa: A002
    return x.clamp(min, max)


clip = clamp


def _method(name: str):
    def function(x, *args, **kwargs):
        return getattr(_as_tensor(x), name)(*args, **kwargs)
    function.__name__ = name
    function.__doc__ = f"``lz.{name}(x, ...)`` is ``x.{name}(...)``."
    return function


_METHODS = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "neg", "sign", "floor", "ceil",
            "square", "erf", "sin", "cos", "reciprocal", "log1p", "expm1", "sum", "mean", "prod", "var", "std",
            "max", "min", "amax", "amin", "argmax", "argmin", "any", "all", "softmax", "log_softmax", "logsumexp",
            "norm", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "permute", "transpose", "t",
            "expand", "chunk", "split", "narrow", "unbind", "select", "index_select", "add", "sub", "mul", "div",
            "pow", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "clone", "detach", "lerp", "masked_fill",
            "repeat", "numel")
_ALIASES = {"subtract": "sub", "multiply": "mul", "divide": "div", "negative": "neg", "swapaxes": "transpose"}
for _name in _METHODS:
    globals()[_name] = _method(_name)
for _alias, _name in _ALIASES.items():
    globals()[_alias] = _method(_name)

__all__ = ["cat", "concat", "concatenate", "stack", "where", "maximum", "minimum", "matmul", "mm", "bmm", "clamp",
           "clip", *_METHODS, *_ALIASES]


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)


__all__.append("is_tensor")


# --- issue 19's selection, scan and mask functions (lezero.eager.selection), as PyTorch spells them -----
_SELECTION_METHODS = ("topk", "sort", "argsort", "msort", "gather", "take_along_dim", "scatter", "scatter_add",
                      "scatter_reduce", "masked_select", "nonzero", "argwhere", "multinomial", "cumsum", "cumprod",
                      "cummax", "cummin", "logcumsumexp", "triu", "tril", "isnan", "isinf", "isposinf", "isneginf",
                      "isfinite")
for _name in _SELECTION_METHODS:
    globals()[_name] = _method(_name)
__all__ += _SELECTION_METHODS


# --- rearrangements and whole-tensor comparisons (lezero.eager.rearrange) ----------------------------------
_REARRANGE_METHODS = ("flip", "fliplr", "flipud", "roll", "repeat_interleave", "diag", "outer", "ger", "allclose",
                      "equal")
for _name in _REARRANGE_METHODS:
    globals()[_name] = _method(_name)
__all__ += _REARRANGE_METHODS


# --- issue 13: addmm and baddbmm (PyTorch's fused bias-plus-product, on autocast's low list) ---------------
def _emit_add_product(b, attrs, bias, m1, m2):
    """``beta * bias + alpha * (m1 @ m2)``; ``beta = 0`` ignores ``bias`` (its nan and inf too), as
    PyTorch's."""
    product = b.op("lz.matmul", m1, m2)
    et = product.type.element_type
    if attrs["alpha"] != 1:
        product = b.op("lz.mul", product, constant_of(b, attrs["alpha"], et))
    if attrs["beta"] == 0:
        return [product]
    if attrs["beta"] != 1:
        bias = b.op("lz.mul", bias, constant_of(b, attrs["beta"], et))
    return [b.op("lz.add", bias, product)]


ADDMM = EagerOp("addmm", _emit_add_product)
BADDBMM = EagerOp("baddbmm", _emit_add_product)


def _add_product(op: EagerOp, rank: int, input, mat1, mat2, beta, alpha) -> Tensor:
    input, mat1, mat2 = _as_tensor(input), _as_tensor(mat1), _as_tensor(mat2)
    if mat1.ndim != rank or mat2.ndim != rank:
        raise RuntimeError(f"{op.name}: expected {rank}-D matrices, got {mat1.ndim}-D and {mat2.ndim}-D")
    if not input.dtype == mat1.dtype == mat2.dtype:
        raise RuntimeError(f"{op.name}: expected the same dtype for all arguments, got {input.dtype}, "
                           f"{mat1.dtype} and {mat2.dtype}")
    return apply(op, (("alpha", alpha), ("beta", beta)), input, mat1, mat2)


def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    """``beta * input + alpha * (mat1 @ mat2)``, ``mat1`` and ``mat2`` 2-D (torch.addmm)."""
    return _add_product(ADDMM, 2, input, mat1, mat2, beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    """``beta * input + alpha * (batch1 @ batch2)``, batches of matrices (torch.baddbmm)."""
    return _add_product(BADDBMM, 3, input, batch1, batch2, beta, alpha)


__all__ += ["addmm", "baddbmm"]
