"""The LLVM side of a kernel being lowered: the function every kind of kernel is built in, and
the context its lowering works with (``lezero/codegen/kernel.py``'s, plus the function, the IR
builder, the scalar builder and the value-at-index walk emitting LLVM IR).

Every kernel has the ABI ``void @name(i8** buffers, i64 begin, i64 end)`` (operands, then
results; ``[begin, end)`` a range of work items).  It loads the buffer pointers and calls
``@name.body(ptr noalias %b0, ..., i64 begin, i64 end)``, which is always inlined: LLVM turns the
``noalias`` parameters into alias scopes on the inlined loads and stores, so the loop vectorizer
needs no runtime overlap checks.  ``noalias`` holds because buffers never overlap, except an
in-place result (memory-plan), which shares the buffer of an operand that an elementwise kernel
reads only at the index it writes; the kernel computes every result of an index (all its loads)
before it stores any.  Strictly, ``noalias`` would let LLVM move such a load below such a store;
its passes do not (no gain in it), and ``test_in_place_result`` checks the machine code's answer.

A sequence form (``lezero/codegen/row_generic.py``) has one more buffer after the results, the
int64 sizes it reads at run time (``sizes``).  A kernel with bounds checks
(``lezero/codegen/index_checks.py``) has one more buffer, its status, after those; the emitter's
accumulated checks go to it just before the body returns.
"""
from __future__ import annotations

import llvmlite.ir as ir

from lezero.codegen import kernel
from lezero.codegen.llvm.ir_types import I64, PTR, VOID
from lezero.codegen.llvm.loops import i64
from lezero.codegen.llvm.scalar_builder import LLVMScalarBuilder, storage_type
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.codegen.llvm.value_at_index import IndexMaterializer, LLVMValueAtIndex
from lezero.ir.core import Operation


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
        b = ir.IRBuilder(outer.append_basic_block("entry"))
        pointers = [b.load(b.gep(outer.args[0], [i64(k)], source_etype=PTR), typ=PTR, align=8)
                    for k in range(num_buffers)]
        b.call(body, pointers + [outer.args[1], outer.args[2]])
        b.ret_void()
        self.function = body
        self.entry = body.append_basic_block("entry")
        self._start = body.append_basic_block("start")
        self.builder = ir.IRBuilder(self._start)
        self.buffers = list(body.args[:num_buffers])
        self.begin, self.end = body.args[num_buffers], body.args[num_buffers + 1]
        self.before_return: list = []  # callables emitting code at the end of the body

    def alloca(self, element_type: ir.Type, count: int, name: str = "acc") -> ir.Value:
        """A stack array in the entry block (static, so LLVM can promote it to registers)."""
        return ir.IRBuilder(self.entry).alloca(element_type, size=count, name=name)

    def finish(self) -> None:
        for emit in self.before_return:
            emit()
        ir.IRBuilder(self.entry).branch(self._start)
        self.builder.ret_void()


class KernelContext(kernel.KernelContext):
    """One kernel being lowered into ``module``: its function, buffers and emitters."""

    def __init__(self, kernel_op: Operation, module: ir.Module, name: str, target: str = "cpu",
                 cpu: CpuTarget | None = None):
        super().__init__(kernel_op, name, target)
        self.module = module
        self.cpu = cpu_target(cpu)  # what vector widths and tiles are chosen for
        self.fn = KernelFunction(module, name,
                                 len(kernel_op.operands) + len(kernel_op.results) + self.run_time_sizes
                                 + (self.checks is not None))
        self.b = self.fn.builder
        self.s = LLVMScalarBuilder(self.b)
        self.index = IndexMaterializer(self.b)
        pointers = self.fn.buffers
        self.bind_buffers(pointers)
        self.status = pointers[-1] if self.checks is not None else None
        self.sizes = pointers[len(kernel_op.operands) + len(kernel_op.results)] if self.run_time_sizes else None
        if self.sizes is not None:  # where the index forms' run-time sizes come from
            self.index.run_time_length = (self.fn.entry, self.sizes)
        self.emitter = LLVMValueAtIndex(self.s, self.index, dict(zip(self.body.args, self.operand_buffers)),
                                        target=target, checks=self.checks, status=self.status)
        self.fn.before_return.append(self.emitter.flush_index_checks)
        # constant operands the kernel reads pre-packed (packed_operands.PackedGemmA), set by the lowering
        self.packed_operands: tuple = ()


def element_address(b: ir.IRBuilder, buffer, index, dtype) -> ir.Value:
    """The address of element ``index`` (flat, i64) of ``buffer``, holding ``dtype``'s storage."""
    return b.gep(buffer.pointer, [index], inbounds=True, source_etype=storage_type(dtype))
