"""Loops in LLVM IR: a counted loop whose induction variable LLVM's vectorizer recognizes, and
index helpers (constants, minima, unravelled coordinates, an IR value as an affine index form,
functions declared once per module)."""
from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

from lezero.codegen.affine import Affine, Var
from lezero.codegen.llvm.ir_types import I64


def i64(value) -> ir.Value:
    return value if isinstance(value, ir.Value) else ir.Constant(I64, int(value))


def loop_hints(module: ir.Module, **hints):
    """A loop ID (``!llvm.loop``) carrying ``llvm.loop.<hint>`` values, e.g. ``interleave_count=2``:
    a self-referential node, made unique by a serial number."""
    operands = [module.add_metadata([ir.MetaDataString(module, "llvm.loop." + k.replace("_", ".")),
                                     ir.Constant(ir.IntType(32), v)]) for k, v in hints.items()]
    serial = len(module.metadata)
    operands.append(module.add_metadata([ir.MetaDataString(module, "lz.loop"), ir.Constant(ir.IntType(32), serial)]))
    node = module.add_metadata(operands)
    node.operands = (node,) + tuple(node.operands)
    return node


@contextmanager
def for_range(b: ir.IRBuilder, start, stop, name: str = "i", **hints):
    """``for i in range(start, stop)`` (i64); yields ``i``.  The builder continues after the loop.
    ``hints`` go to LLVM's loop optimizer (``loop_hints``)."""
    start, stop = i64(start), i64(stop)
    fn = b.function
    body = fn.append_basic_block(f"{name}.body")
    exit_ = fn.append_basic_block(f"{name}.exit")
    if isinstance(start, ir.Constant) and isinstance(stop, ir.Constant) and start.constant < stop.constant:
        b.branch(body)
    else:
        b.cbranch(b.icmp_signed("<", start, stop), body, exit_)
    entry = b.block
    b.position_at_end(body)
    i = b.phi(I64, name=name)
    i.add_incoming(start, entry)
    yield i
    following = b.add(i, i64(1), flags=["nuw", "nsw"])
    i.add_incoming(following, b.block)
    branch = b.cbranch(b.icmp_signed("<", following, stop), body, exit_)
    if hints:
        branch.set_metadata("llvm.loop", loop_hints(b.module, **hints))
    b.position_at_end(exit_)


def min_i64(b: ir.IRBuilder, x, y):
    x, y = i64(x), i64(y)
    return b.select(b.icmp_signed("<", x, y), x, y)


def unravel_values(b: ir.IRBuilder, flat, extents) -> list:
    """Row-major coordinates of ``flat`` in ``extents`` (constant divisors: multiplies, shifts)."""
    out = []
    for k in reversed(range(len(extents))):
        if k == 0:
            out.append(flat)
        else:
            out.append(b.urem(flat, i64(extents[k])))
            flat = b.udiv(flat, i64(extents[k]))
    return list(reversed(out))


def affine_value(value: ir.Value, extent: int | None = None, name: str = "v") -> Affine:
    """An IR value as an index form (a variable of ``extent`` values whose payload it is)."""
    return Affine.of(Var(name, extent, payload=value))


def declare(module: ir.Module, name: str, return_type, arg_types) -> ir.Function:
    """The function ``name`` of ``module`` (``malloc``, an intrinsic), declared on first use."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(return_type, arg_types), name)
