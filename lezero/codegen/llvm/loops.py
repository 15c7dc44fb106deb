"""The kernel function and its loops, as LLVM IR.

Every kernel has the ABI ``void @name(i8** buffers, i64 begin, i64 end)`` (operands, then
results; ``[begin, end)`` a range of work items).  It loads the buffer pointers and calls
``@name.body(ptr noalias %b0, ..., i64 begin, i64 end)``, which is always inlined: LLVM turns the
``noalias`` parameters into alias scopes on the inlined loads and stores, so the loop vectorizer
needs no runtime overlap checks.  ``noalias`` holds because buffers never overlap, except an
in-place result (memory-plan), which an elementwise kernel only writes at the index it reads.
"""
from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()


def i64(value) -> ir.Value:
    return value if isinstance(value, ir.Value) else ir.Constant(I64, int(value))


class KernelFunction:
    """The ABI function and its always-inlined body; ``builder`` is positioned in the body."""

    def __init__(self, module: ir.Module, name: str, num_buffers: int):
        outer = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64]), name)
        outer.attributes.add("nounwind")
        body = ir.Function(module, ir.FunctionType(VOID, [PTR] * num_buffers + [I64, I64]), f"{name}.body")
        body.linkage = "internal"
        body.attributes.add("alwaysinline")
        body.attributes.add("nounwind")
        for arg in body.args[:num_buffers]:
            arg.add_attribute("noalias")
            arg.add_attribute("nocapture")
        b = ir.IRBuilder(outer.append_basic_block("entry"))
        pointers = [b.load(b.gep(outer.args[0], [i64(k)], source_etype=PTR), typ=PTR, align=8)
                    for k in range(num_buffers)]
        b.call(body, pointers + [outer.args[1], outer.args[2]])
        b.ret_void()
        self.function = body
        self.entry = body.append_basic_block("entry")
        start = body.append_basic_block("start")
        self.builder = ir.IRBuilder(start)
        self.buffers = list(body.args[:num_buffers])
        self.begin, self.end = body.args[num_buffers], body.args[num_buffers + 1]
        self._start = start

    def alloca(self, element_type: ir.Type, count: int, name: str = "acc") -> ir.Value:
        """A stack array in the entry block (static, so LLVM can promote it to registers)."""
        b = ir.IRBuilder(self.entry)
        return b.alloca(element_type, size=count, name=name)

    def finish(self) -> None:
        ir.IRBuilder(self.entry).branch(self._start)
        self.builder.ret_void()


@contextmanager
def for_range(b: ir.IRBuilder, start, stop, name: str = "i"):
    """``for i in range(start, stop)`` (i64); yields ``i``.  The builder continues after the loop."""
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
    b.cbranch(b.icmp_signed("<", following, stop), body, exit_)
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
