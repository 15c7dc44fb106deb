"""Symbolic index arithmetic: affine forms over loop variables with known ranges.

The code generators compute "the value of ``v`` at index ``(i0, i1, ...)``" by walking the ops of
a kernel, and every index component is an ``Affine``: ``const + sum(coef * term)``, where a term
is a loop ``Var`` (range ``[0, extent)``), an opaque value (a loaded gather index, a clamped pad
index) or a ``Derived`` ``floor(a / c)`` / ``a mod c`` that did not simplify.  Keeping indices
symbolic until a load needs an address lets the reshape of a contiguous buffer fold back into a
plain offset (``(3*i + j) // 3 == i`` when ``0 <= j < 3``) and lets the loop builder see every
address as coefficients on its loop variables, which is how it merges loops (``loop_coalescing``).

A coefficient, constant or extent may be a ``RunTimeSize``: an int that is a polynomial of a length
the kernel reads at run time (a sequence form's, ``lezero/codegen/row_generic.py``), valued at the
length it was made for.  Every decision the lowering takes on it sees that value; the backend emits
its polynomial of the loaded length where it meets one (``IndexMaterializer.size``).  An operation
that cannot keep the polynomial (a division that does not divide it) gives a plain int, which the
code then names as a constant: the sequence form's proof (lowered at two lengths, equal code)
refuses such code.

Backend-neutral: nothing here emits code (``lezero/codegen/llvm/value_at_index.py`` does, for LLVM).
"""
from __future__ import annotations

import itertools


class RunTimeSize(int):
    """An int equal to ``sum(coefs[p] x length^p)`` at the ``length`` it was made for (module
    docstring); ``+``, ``-``, ``*`` and exact division by an int keep the polynomial, everything else
    is the int's own arithmetic.  A polynomial of no power above 0 is a plain int."""

    def __new__(cls, length: int, coefs: tuple = (0, 1)):
        coefs = tuple(int(c) for c in coefs)
        while len(coefs) > 1 and coefs[-1] == 0:
            coefs = coefs[:-1]
        value = sum(c * length ** p for p, c in enumerate(coefs))
        if len(coefs) <= 1:
            return value
        self = super().__new__(cls, value)
        self._parts = (coefs, int(length))
        return self

    @property
    def coefs(self) -> tuple:
        return self._parts[0]

    @property
    def length(self) -> int:
        return self._parts[1]

    @staticmethod
    def _coefs_of(x) -> tuple:
        return x.coefs if isinstance(x, RunTimeSize) else (int(x),)

    def _length_with(self, other) -> int:
        if isinstance(other, RunTimeSize) and other.length != self.length:
            raise ValueError(f"sizes of two lengths ({self.length}, {other.length}) combined")
        return self.length

    def __add__(self, other):
        if not isinstance(other, int):
            return NotImplemented
        a, b = self.coefs, self._coefs_of(other)
        n = max(len(a), len(b))
        return RunTimeSize(self._length_with(other), tuple((a[k] if k < len(a) else 0) + (b[k] if k < len(b) else 0)
                                                           for k in range(n)))

    __radd__ = __add__

    def __neg__(self):
        return RunTimeSize(self.length, tuple(-c for c in self.coefs))

    def __sub__(self, other):
        return self + (-other) if isinstance(other, int) else NotImplemented

    def __rsub__(self, other):
        return (-self) + other if isinstance(other, int) else NotImplemented

    def __mul__(self, other):
        if not isinstance(other, int):
            return NotImplemented
        a, b = self.coefs, self._coefs_of(other)
        out = [0] * (len(a) + len(b) - 1)
        for i, x in enumerate(a):
            for j, y in enumerate(b):
                out[i + j] += x * y
        return RunTimeSize(self._length_with(other), tuple(out))

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if type(other) is int and other > 0 and all(c % other == 0 for c in self.coefs):
            return RunTimeSize(self.length, tuple(c // other for c in self.coefs))
        return int(self) // other

    def __repr__(self) -> str:  # printed as its value: a type of a sequence form prints as the form's
        return int.__repr__(self)

    __str__ = __repr__

    def __reduce__(self):
        return RunTimeSize, (self.length, self.coefs)


def _integer(x) -> int:
    """``x`` as an int, a ``RunTimeSize`` kept as it is."""
    return x if isinstance(x, RunTimeSize) else int(x)


class Var:
    """An index symbol over ``[0, extent)``; ``extent`` None means unknown.  ``payload`` is the
    backend's value for an opaque symbol (a loaded index), None for loop variables (bound when
    the loop is built)."""

    __slots__ = ("name", "extent", "payload", "serial")
    _counter = itertools.count()

    def __init__(self, name: str, extent: int | None, payload=None):
        self.name = name
        self.extent = extent
        self.payload = payload
        self.serial = next(Var._counter)

    def bounds(self):
        return None if self.extent is None else (0, self.extent - 1)

    def __repr__(self) -> str:
        return self.name


class Derived:
    """``floor(operand / divisor)`` (op ``div``) or ``operand mod divisor`` (``mod``), divisor > 0."""

    __slots__ = ("op", "operand", "divisor", "_key")

    def __init__(self, op: str, operand: "Affine", divisor: int):
        self.op = op
        self.operand = operand
        self.divisor = divisor
        self._key = (op, operand, divisor)

    def __eq__(self, other) -> bool:
        return isinstance(other, Derived) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def bounds(self):
        if self.op == "mod":
            return (0, self.divisor - 1)
        b = self.operand.bounds()
        return None if b is None else (b[0] // self.divisor, b[1] // self.divisor)

    def __repr__(self) -> str:
        return f"({self.operand!r} {'//' if self.op == 'div' else '%'} {self.divisor})"


class Affine:
    """``const + sum(coef * term)``; immutable, hashable, compares by value."""

    __slots__ = ("terms", "const", "_key")

    def __init__(self, terms: dict | None = None, const: int = 0):
        self.terms = {t: c for t, c in (terms or {}).items() if c != 0}
        self.const = _integer(const)
        self._key = (frozenset(self.terms.items()), self.const)

    @staticmethod
    def of(value) -> "Affine":
        if isinstance(value, Affine):
            return value
        if isinstance(value, (Var, Derived)):
            return Affine({value: 1})
        return Affine(None, int(value))

    def __eq__(self, other) -> bool:
        return isinstance(other, Affine) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coef(self, term) -> int:
        return self.terms.get(term, 0)

    def __add__(self, other) -> "Affine":
        other = Affine.of(other)
        terms = dict(self.terms)
        for t, c in other.terms.items():
            terms[t] = terms.get(t, 0) + c
        return Affine(terms, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> "Affine":
        return self * -1

    def __sub__(self, other) -> "Affine":
        return self + (-Affine.of(other))

    def __rsub__(self, other) -> "Affine":
        return Affine.of(other) - self

    def __mul__(self, k: int) -> "Affine":
        k = _integer(k)
        return Affine({t: c * k for t, c in self.terms.items()}, self.const * k)

    __rmul__ = __mul__

    def bounds(self):
        """``(lo, hi)``, inclusive, or None when a term's range is unknown."""
        lo = hi = self.const
        for t, c in self.terms.items():
            b = t.bounds()
            if b is None:
                return None
            lo += min(c * b[0], c * b[1])
            hi += max(c * b[0], c * b[1])
        return lo, hi

    def _split(self, divisor: int):
        """``self == divisor * quotient + rest``, the terms whose coefficient ``divisor`` divides
        going to ``quotient``."""
        q_terms, r_terms = {}, {}
        for t, c in self.terms.items():
            if c % divisor == 0:
                q_terms[t] = c // divisor
            else:
                r_terms[t] = c
        q_const, r_const = divmod(self.const, divisor)
        return Affine(q_terms, q_const), Affine(r_terms, r_const)

    def floordiv(self, divisor: int) -> "Affine":
        if divisor <= 0:
            raise ValueError(f"divisor must be positive, got {divisor}")
        if divisor == 1:
            return self
        quotient, rest = self._split(divisor)
        b = rest.bounds()
        if b is not None and 0 <= b[0] and b[1] < divisor:
            return quotient
        return quotient + Affine.of(Derived("div", rest, divisor))

    def mod(self, divisor: int) -> "Affine":
        if divisor <= 0:
            raise ValueError(f"divisor must be positive, got {divisor}")
        if divisor == 1:
            return Affine()
        _, rest = self._split(divisor)
        b = rest.bounds()
        if b is not None and 0 <= b[0] and b[1] < divisor:
            return rest
        return Affine.of(Derived("mod", rest, divisor))

    def recombined(self) -> "Affine":
        """The same form with each pair ``m * c * floor(a / c) + m * (a mod c)`` written ``m * a``
        (an index that ``unravel`` split, laid out row-major again)."""
        terms, whole = dict(self.terms), Affine()
        for t, coef in self.terms.items():
            if isinstance(t, Derived) and t.op == "div" and t in terms:
                mod = Derived("mod", t.operand, t.divisor)
                m = terms.get(mod, 0)
                if m and coef == m * t.divisor:
                    del terms[t], terms[mod]
                    whole = whole + t.operand * m
        return self if not whole.terms and not whole.const else Affine(terms, self.const) + whole

    def vars(self) -> set:
        """Every ``Var`` this form depends on, also inside derived terms."""
        out = set()
        for t in self.terms:
            if isinstance(t, Var):
                out.add(t)
            else:
                out |= t.operand.vars()
        return out

    def __repr__(self) -> str:
        parts = [(f"{c}*" if c != 1 else "") + repr(t) for t, c in self.terms.items()]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


def linear_index(index, shape) -> Affine:
    """The row-major position of ``index`` in ``shape`` (``recombined``: the position of an index
    split by ``unravel`` or by a caller's floordiv and mod is the form it was split from)."""
    out, stride = Affine(), 1
    for i, d in zip(reversed(index), reversed(shape)):
        out = out + Affine.of(i) * stride
        stride *= d
    return out.recombined()


def unravel(linear: Affine, shape) -> tuple:
    """The index in ``shape`` at row-major position ``linear`` (which must lie in the shape)."""
    out, stride = [], 1
    strides = []
    for d in reversed(shape):
        strides.append(stride)
        stride *= d
    strides.reverse()
    for k, (d, s) in enumerate(zip(shape, strides)):
        q = linear.floordiv(s)
        out.append(q if k == 0 else q.mod(d))  # the outermost needs no mod: linear < size
    return tuple(out)
