"""The terms in which an op's definition states its gradient rule (the autodiff facet).

An op's ``grad`` facet is one rule, written as IR-building code::

    grad(b: GradBuilder, op: Operation, attrs: Attrs, dy: Value) -> list[Value | None]

``op`` is the forward op (its operands and its one result are live values the rule may use),
``attrs`` its attributes with defaults filled in, ``dy`` the cotangent of its result (same type).
The rule returns one entry per operand: the operand's gradient (exactly the operand's type: a
broadcast operand gets ``b.sum_to(g, shape)``), or None where no gradient flows (an integer
operand such as ``gather``'s indices, or a function that is piecewise constant, such as
``floor``).  Table entries give it as a keyword facet, like the lowering::

    unary("exp", np.exp, FLOAT, "e^x", scalar=..., grad=lambda b, op, attrs, dy: [b.mul(dy, op.result)])

``no_gradient`` is the rule of ops through which nothing flows (comparisons, logic, rounding,
argmax, constants): their operands get no contribution, so an argument reached only through
them has a zero gradient, as in PyTorch.  An op whose definition has no rule (``grad = None``)
is a hard error when a gradient must pass through it: ``no gradient rule for lz.foo``.  Composite
ops need none: the autodiff pass decomposes them first.  ``backpropagate`` walks a
block's ops in reverse and sums the contributions (``lezero/passes/autodiff.py`` runs it on a
function's body, the control-flow ops' rules on their regions).  An op with several results
(``num_results = None``: ``lz.for``, ``lz.if``) gets ``dy`` as a list, one cotangent per result,
None where none flowed.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.builder import Builder
from lezero.ir.core import Operation, Value
from lezero.ir.diagnostics import IRError
from lezero.ir.opdef import OpError
from lezero.ir.types import ElementType, TensorType
from lezero.ir.verifier import types_compatible


def no_gradient(b, op, attrs, dy):
    """The rule of an op through which no gradient flows."""
    return [None] * len(op.operands)


class GradBuilder(Builder):
    """A builder with the few shorthands gradient rules read best with: arithmetic that takes
    Python numbers for rank-0 constants of the other operand's element type
    (``b.mul(dy, b.sub(1, b.mul(y, y)))``), ``sum_to`` for broadcasting, ``zeros``."""

    # --- constants -------------------------------------------------------------------------------
    def scalar(self, value, like: Value | ElementType) -> Value:
        """A rank-0 constant of ``like``'s element type (it broadcasts against anything)."""
        et = like if isinstance(like, ElementType) else like.type.element_type
        return self.constant(np.asarray(value, et.numpy_dtype), TensorType((), et))

    def zeros(self, t: TensorType) -> Value:
        """A splat zero of type ``t`` (static shapes only)."""
        if not t.is_static:
            raise OpError(f"autodiff needs a zero of {t}, whose shape is dynamic (bind the dims first)")
        return self.constant(np.zeros((), t.element_type.numpy_dtype), t)

    def _values(self, *xs):
        """Python numbers become rank-0 constants of the first Value's element type."""
        like = next(x for x in xs if isinstance(x, Value))
        return [x if isinstance(x, Value) else self.scalar(x, like) for x in xs]

    # --- arithmetic ----------------------------------------------------------------------------
    def add(self, x, y) -> Value:
        return self.op("lz.add", *self._values(x, y))

    def sub(self, x, y) -> Value:
        return self.op("lz.sub", *self._values(x, y))

    def mul(self, x, y) -> Value:
        return self.op("lz.mul", *self._values(x, y))

    def div(self, x, y) -> Value:
        return self.op("lz.div", *self._values(x, y))

    def neg(self, x) -> Value:
        return self.op("lz.neg", x)

    def cmp(self, predicate: str, x, y) -> Value:
        return self.op("lz.cmp", *self._values(x, y), predicate=predicate)

    def select(self, condition: Value, a, b) -> Value:
        return self.op("lz.select", condition, *self._values(a, b))

    def where_else_zero(self, condition: Value, a: Value) -> Value:
        """``a`` where ``condition`` holds, else 0 (shape: ``condition`` and ``a`` broadcast)."""
        return self.select(condition, a, 0)

    # --- shapes --------------------------------------------------------------------------------
    def reshape(self, x: Value, shape) -> Value:
        """``x`` reshaped to ``shape`` (one dynamic dim allowed: it becomes -1)."""
        shape = tuple(shape)
        if x.type.shape == shape:
            return x
        if sum(d is None for d in shape) > 1:
            raise OpError(f"autodiff cannot reshape {x.type} to a shape with several dynamic dims "
                          "(bind the dims first)")
        return self.op("lz.reshape", x, shape=[-1 if d is None else d for d in shape])

    def transpose(self, x: Value, perm) -> Value:
        perm = list(perm)
        return x if perm == list(range(len(perm))) else self.op("lz.transpose", x, perm=perm)

    def sum_to(self, g: Value, shape) -> Value:
        """Sum ``g`` back to ``shape`` after numpy broadcasting stretched ``shape`` to ``g``'s:
        the leading axes ``shape`` lacks are summed away, and so are the axes where ``shape`` has
        a 1 that was stretched.  A dynamic dim of ``shape`` is taken as not stretched (where it
        was 1 at run time, bind the dims before differentiating)."""
        shape = tuple(shape)
        src = g.type.shape
        lead = len(src) - len(shape)
        if lead < 0:
            raise OpError(f"cannot sum a gradient of shape {src} to the larger shape {shape}")
        inner = [lead + i for i, d in enumerate(shape) if d == 1 and src[lead + i] != 1]
        if not lead and not inner:
            return g
        if not lead:
            return self.op("lz.reduce_sum", g, axes=inner, keepdims=True)
        if not inner:
            return self.op("lz.reduce_sum", g, axes=list(range(lead)))
        if g.type.is_static:
            return self.reshape(self.op("lz.reduce_sum", g, axes=list(range(lead)) + inner), shape)
        g = self.op("lz.reduce_sum", g, axes=inner, keepdims=True)
        return self.op("lz.reduce_sum", g, axes=list(range(lead)))


# --- the reverse walk ------------------------------------------------------------------------------

def backpropagate(b: GradBuilder, ops: list[Operation], outputs: list[Value], cotangents: list,
                  wrt: list[Value]) -> dict[Value, Value]:
    """Build, with ``b``, the gradient of ``ops`` (a block's ops in program order): the
    ``cotangents`` (a Value or None per entry of ``outputs``) flow back, op by op in reverse order,
    to every value a ``wrt`` value reaches.  Returns value -> its summed gradient (the entries of
    ``wrt`` that got one among them)."""
    active = _active_values(ops, wrt)
    gradients: dict[Value, Value] = {}

    def accumulate(value: Value, contribution: Value) -> None:
        existing = gradients.get(value)
        gradients[value] = contribution if existing is None else b.op("lz.add", existing, contribution)

    for output, cotangent in zip(outputs, cotangents):
        if cotangent is not None and output in active:
            accumulate(output, cotangent)
    for op in reversed(ops):
        if not any(r in gradients for r in op.results):
            continue
        for operand, g in zip(op.operands, _operand_gradients(b, op, gradients)):
            if g is not None and operand in active:
                accumulate(operand, g)
    return gradients


def _is_float_tensor(v: Value) -> bool:
    return isinstance(v.type, TensorType) and v.type.element_type.is_float


def _active_values(ops: list[Operation], seeds: list[Value]) -> set[Value]:
    """The values a gradient may flow through: the seeds, and float results of ops reading one."""
    active = set(seeds)
    for op in ops:
        if any(v in active for v in op.operands):
            active.update(r for r in op.results if _is_float_tensor(r))
    return active


def _operand_gradients(b: GradBuilder, op: Operation, gradients: dict) -> list:
    """Run ``op``'s gradient rule on its results' accumulated cotangents; check what it returns."""
    definition = op.definition
    rule = definition.grad if definition is not None else None
    several = definition is not None and definition.num_results is None
    if rule is None or (len(op.results) != 1 and not several):
        raise IRError(f"no gradient rule for {op.name}", op.location)
    b.location = op.location
    dy = [gradients.get(r) for r in op.results] if several else gradients[op.result]
    try:
        grads = list(rule(b, op, definition.attrs(op), dy))
    except OpError as e:
        raise IRError(f"'{op.name}' op gradient: {e}", op.location) from None
    if len(grads) != len(op.operands):
        raise IRError(f"the gradient rule of {op.name} returned {len(grads)} gradients for "
                      f"{len(op.operands)} operands", op.location)
    for i, (operand, g) in enumerate(zip(op.operands, grads)):
        if g is not None and not types_compatible(operand.type, g.type):
            raise IRError(f"the gradient rule of {op.name} returned {g.type} for operand #{i} of type "
                          f"{operand.type}", op.location)
    return grads
