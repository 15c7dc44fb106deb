"""The eager ops ``Tensor``'s methods run: one ``lz_op`` per lz op they use, and the composites
that are not a single lz op (``clamp``, indexing, ``cat``/``stack``, ``var``, ``floor_divide``, ...),
each an ``EagerOp`` whose ``emit`` builds its IR.

They live apart from the methods so that every module of the engine (the core, indexing, the
function forms, ``nn.functional``) names the same op object: the runner cache is keyed by it.
"""
from __future__ import annotations

import numpy as np

from lezero.eager.dispatch import EagerOp, constant_of, lz_op
from lezero.ir.dialect.data_movement import strided_positions
from lezero.ir.types import ELEMENT_TYPES


def _emit_clamp(b, attrs, x, *bounds):
    """Where ``x`` is below ``lo`` take ``lo``, above ``hi`` take ``hi``: the gradient reaches
    ``x`` on the closed interval, as PyTorch's."""
    bounds = list(bounds)
    if attrs["min"]:
        lo = bounds.pop(0)
        x = b.op("lz.select", b.op("lz.cmp", x, lo, predicate="lt"), lo, x)
    if attrs["max"]:
        hi = bounds.pop(0)
        x = b.op("lz.select", b.op("lz.cmp", x, hi, predicate="gt"), hi, x)
    return [x]


def _emit_index(b, attrs, x, *indices):
    """Basic indexing as one slice, an integer-array index as a gather, then the final shape."""
    if attrs["starts"]:
        x = b.op("lz.slice", x, starts=attrs["starts"], ends=attrs["ends"], axes=attrs["axes"],
                 steps=attrs["steps"])
    if indices:
        x = b.op("lz.gather", x, indices[0], axis=attrs["gather_axis"])
    if x.type.shape != attrs["shape"]:
        x = b.op("lz.reshape", x, shape=list(attrs["shape"]))
    return [x]


def _emit_concat(b, attrs, *xs):
    if attrs["stack"]:
        xs = [b.op("lz.reshape", x, shape=list(attrs["stacked_shape"])) for x in xs]
    return [b.op("lz.concat", *xs, axis=attrs["axis"])]


def _emit_var(b, attrs, x):
    """``sum((x - mean)^2) / (n - correction)`` over ``axes``."""
    axes = list(attrs["axes"])
    mean = b.op("lz.reduce_mean", x, axes=axes, keepdims=True)
    centered = b.op("lz.sub", x, mean)
    total = b.op("lz.reduce_sum", b.op("lz.mul", centered, centered), axes=axes, keepdims=attrs["keepdims"])
    divisor = max(attrs["count"] - attrs["correction"], 0)
    et = x.type.element_type
    d = constant_of(b, divisor, et)
    y = b.op("lz.div", total, d)
    if attrs["std"]:
        y = b.op("lz.sqrt", y)
    return [y]


def _emit_identity(b, attrs, x):
    return [x]


def _emit_floor_divide(b, attrs, x, y):
    if x.type.element_type.is_float:
        return [b.op("lz.floor", b.op("lz.div", x, y))]
    q = b.op("lz.div", x, y)  # truncates toward zero: step down where the signs differ and it was inexact
    r = b.op("lz.sub", x, b.op("lz.mul", q, y))
    zero = constant_of(b, 0, x.type.element_type)
    one = constant_of(b, 1, x.type.element_type)
    inexact = b.op("lz.cmp", r, zero, predicate="ne")
    signs = b.op("lz.cmp", b.op("lz.cmp", x, zero, predicate="lt"), b.op("lz.cmp", y, zero, predicate="lt"),
                 predicate="ne")
    return [b.op("lz.select", b.op("lz.and", inexact, signs), b.op("lz.sub", q, one), q)]


def _emit_remainder(b, attrs, x, y):
    (q,) = _emit_floor_divide(b, attrs, x, y)
    return [b.op("lz.sub", x, b.op("lz.mul", q, y))]


def _emit_any_all(b, attrs, x):
    et = ELEMENT_TYPES["i32"]
    nonzero = b.op("lz.cmp", x, constant_of(b, 0, x.type.element_type), predicate="ne")
    as_int = b.op("lz.cast", nonzero, to=et)
    reduce = "lz.reduce_max" if attrs["any"] else "lz.reduce_min"
    r = b.op(reduce, as_int, axes=list(attrs["axes"]) or None, keepdims=attrs["keepdims"])
    return [b.op("lz.cast", r, to=ELEMENT_TYPES["i1"])]


def _emit_log1p(b, attrs, x):
    one = constant_of(b, 1, x.type.element_type)
    return [b.op("lz.log", b.op("lz.add", x, one))]


def _emit_expm1(b, attrs, x):
    one = constant_of(b, 1, x.type.element_type)
    return [b.op("lz.sub", b.op("lz.exp", x), one)]


RESHAPE = lz_op("lz.reshape")
CAST = lz_op("lz.cast")
CLAMP = EagerOp("clamp", _emit_clamp)
INDEX = EagerOp("index", _emit_index)
CONCAT = EagerOp("cat", _emit_concat)
VAR = EagerOp("var", _emit_var)
CLONE = EagerOp("clone", _emit_identity)
FLOOR_DIVIDE = EagerOp("floor_divide", _emit_floor_divide)
REMAINDER = EagerOp("remainder", _emit_remainder)
ANY_ALL = EagerOp("any_all", _emit_any_all)
LOG1P = EagerOp("log1p", _emit_log1p)
EXPM1 = EagerOp("expm1", _emit_expm1)

ADD, SUB, MUL, DIV, POW = (lz_op(f"lz.{n}") for n in ("add", "sub", "mul", "div", "pow"))
MAX, MIN, AND, OR = (lz_op(f"lz.{n}") for n in ("max", "min", "and", "or"))
CMP, SELECT, MATMUL, TRANSPOSE = (lz_op(f"lz.{n}") for n in ("cmp", "select", "matmul", "transpose"))
BROADCAST, ARGMAX = lz_op("lz.broadcast_to"), lz_op("lz.argmax")
SOFTMAX, LOG_SOFTMAX = lz_op("lz.softmax"), lz_op("lz.log_softmax")
SWAP_2D = (("perm", (1, 0)),)
CMP_ATTRS = {p: (("predicate", p),) for p in ("eq", "ne", "lt", "le", "gt", "ge")}
UNARY = {n: lz_op(f"lz.{n}") for n in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu",
                                         "erf", "sin", "cos", "floor", "ceil", "sign", "reciprocal", "not")}
REDUCE = {n: lz_op(f"lz.reduce_{n}") for n in ("sum", "mean", "max", "min", "prod")}


# --- views (lezero.eager.core.view_of): a view read from its base, and an in-place write into one -------
# A view's geometry (``shape``, ``strides``, ``offset``) is in its base's memory, whose layout is
# the base's dims in ``order`` (None: row-major; a base may be a permutation of a C-contiguous
# array, as an elementwise op on ``x.t()`` returns): the memory's elements are the base value
# transposed to ``order``, read row-major.

def _memory(b, base, order):
    return base if order is None else b.op("lz.transpose", base, perm=list(order))


def _emit_memory_view(b, attrs, base):
    """The view of ``base``'s memory (PyTorch's ``as_strided``)."""
    return [b.op("lz.as_strided", _memory(b, base, attrs["order"]), shape=list(attrs["shape"]),
                 strides=list(attrs["strides"]), offset=attrs["offset"])]


def _emit_copy_slices(b, attrs, base, src):
    """``base`` with the elements of its view replaced by ``src``: the new value of a base after
    an in-place op on a view of it (PyTorch's ``CopySlices``, its ``as_strided_scatter``), as a
    scatter into the base's memory, flattened."""
    count = int(np.prod(attrs["shape"], dtype=np.int64))
    if count == 0:
        return [base]
    order = attrs["order"]
    memory = _memory(b, base, order)
    positions = strided_positions(attrs["shape"], attrs["strides"], attrs["offset"]).reshape(count, 1)
    flat = b.op("lz.reshape", memory, shape=[int(np.prod(memory.type.shape, dtype=np.int64))])
    flat = b.op("lz.scatter_nd", flat, b.constant(positions), b.op("lz.reshape", src, shape=[count]))
    out = b.op("lz.reshape", flat, shape=list(memory.type.shape))
    return [out if order is None else b.op("lz.transpose", out, perm=[order.index(d) for d in range(len(order))])]


AS_STRIDED = lz_op("lz.as_strided")
MEMORY_VIEW = EagerOp("as_strided", _emit_memory_view)
COPY_SLICES = EagerOp("copy_slices", _emit_copy_slices)
