"""The scalar-builder interface: the terms in which an op's definition says how it lowers.

An elementwise op's ``scalar`` facet computes one element of its result from one element of
each operand through a ``ScalarBuilder`` ``s``::

    unary("relu", _relu, NUMERIC, "max(x, 0)", scalar=lambda s, x: s.max(x, s.constant(0, x)))

Each code generator implements the builder (``lezero/codegen/llvm/scalar_builder.py`` emits LLVM
IR; a Triton backend emits Triton expressions), so an op is defined once and lowers everywhere.
Reductions say how they accumulate the same way (``combine``, ``identity``, ``finalize`` facets
in ``dialect/reduction.py``).

Values are the backend's own objects; each carries the element type of the lz value it stands for
(``s.dtype(x)``). Every primitive computes exactly what the numpy reference of the matching op
computes for that type: integer ``div`` truncates toward zero and gives 0 for ``x / 0``, integer
arithmetic wraps, ``max``/``min`` propagate nan, ``cmp`` is false for nan (``ne`` true), ``cast``
follows ``lz.cast``. f16 and bf16 compute in f32; the backend rounds each op's result to its type
(the reference rounds after every op too), not each primitive's. A backend that lacks a primitive
for a type raises ``NotImplementedError`` with the reason; the code generator turns that into
``failed to lower lz.foo with f16 for cpu: <why>``.
"""
from __future__ import annotations

from lezero.ir.types import ElementType


class ScalarBuilder:
    """The primitives a ``scalar`` facet may use. Binary primitives take two values of one
    element type."""

    def dtype(self, x) -> ElementType:
        raise NotImplementedError("dtype")

    def constant(self, value, like):
        """``value`` (a Python number) as a value of ``like``'s element type (an ``ElementType``
        or a value)."""
        raise NotImplementedError("constant")

    # --- arithmetic (numeric types) --------------------------------------------------------------
    def neg(self, x):
        raise NotImplementedError("neg")

    def abs(self, x):
        raise NotImplementedError("abs")

    def add(self, x, y):
        raise NotImplementedError("add")

    def sub(self, x, y):
        raise NotImplementedError("sub")

    def mul(self, x, y):
        raise NotImplementedError("mul")

    def div(self, x, y):
        """IEEE for floats; integers truncate toward zero and ``x / 0 == 0``."""
        raise NotImplementedError("div")

    def pow(self, x, y):
        """IEEE ``pow`` for floats; integers as ``lz.pow`` (wrapping, negative exponents)."""
        raise NotImplementedError("pow")

    def rem(self, x, y):
        """The remainder of truncated division (C's ``fmod``; the sign of ``x``): IEEE ``fmod`` for
        floats; integers give ``x % 0 == 0`` (and ``INT_MIN % -1 == 0``)."""
        raise NotImplementedError("rem")

    def umulhi(self, x, y):
        """The high half of the double-width product of two unsigned integers of one type
        (``ui32``: bits 32..63 of the 64-bit product; Philox's multiply-high)."""
        raise NotImplementedError("umulhi")

    def max(self, x, y):
        """The larger; nan if either is nan."""
        raise NotImplementedError("max")

    def min(self, x, y):
        """The smaller; nan if either is nan."""
        raise NotImplementedError("min")

    # --- logic --------------------------------------------------------------------------------------
    def and_(self, x, y):
        raise NotImplementedError("and")

    def or_(self, x, y):
        raise NotImplementedError("or")

    def not_(self, x):
        raise NotImplementedError("not")

    def shift_left(self, x, y):
        """``x << y`` on integers; 0 when ``y`` is at least the bit width (or negative)."""
        raise NotImplementedError("shift_left")

    def shift_right(self, x, y):
        """``x >> y`` on integers, arithmetic for signed types; a shift by at least the bit width
        (or a negative one) gives 0, or -1 for a negative signed ``x``."""
        raise NotImplementedError("shift_right")

    def cmp(self, predicate: str, x, y):
        """An i1: ``eq ne lt le gt ge``; nan compares unequal."""
        raise NotImplementedError("cmp")

    def select(self, condition, a, b):
        raise NotImplementedError("select")

    def cast(self, x, to: ElementType):
        """As ``lz.cast``: float -> int truncates, anything -> i1 is ``x != 0``, bf16 rounds to
        nearest even."""
        raise NotImplementedError("cast")

    def bitcast(self, x, to: ElementType):
        """As ``lz.bitcast``: the same bits (of the storage form) as ``to``."""
        raise NotImplementedError("bitcast")

    # --- float math ---------------------------------------------------------------------------------
    def sqrt(self, x):
        raise NotImplementedError("sqrt")

    def floor(self, x):
        raise NotImplementedError("floor")

    def ceil(self, x):
        raise NotImplementedError("ceil")

    def round_half_even(self, x):
        """To the nearest integer, ties to even (``np.round``): through ``floor`` here; a backend with
        the instruction overrides it (LLVM: ``llvm.roundeven``)."""
        f = self.floor(x)
        d = self.sub(x, f)
        half = self.constant(0.5, x)
        odd = self.cmp("ne", self.sub(f, self.mul(self.constant(2, x), self.floor(self.mul(f, half)))),
                       self.constant(0, x))
        up = self.or_(self.cmp("gt", d, half), self.and_(self.cmp("eq", d, half), odd))
        return self.select(up, self.add(f, self.constant(1, x)), f)

    def exp(self, x):
        raise NotImplementedError("exp")

    def log(self, x):
        raise NotImplementedError("log")

    def tanh(self, x):
        raise NotImplementedError("tanh")

    def sigmoid(self, x):
        """``1 / (1 + e^-x)``, accurate in both tails."""
        raise NotImplementedError("sigmoid")

    def erf(self, x):
        raise NotImplementedError("erf")

    def erfc(self, x):
        """``1 - erf(x)``, accurate (relative) for large x."""
        raise NotImplementedError("erfc")

    def normcdf(self, x):
        """The standard normal CDF ``erfc(-x / sqrt 2) / 2``, accurate (relative) in the lower
        tail (CUDA's libdevice has it as ``normcdf``)."""
        raise NotImplementedError("normcdf")

    def sin(self, x):
        raise NotImplementedError("sin")

    def cos(self, x):
        raise NotImplementedError("cos")
