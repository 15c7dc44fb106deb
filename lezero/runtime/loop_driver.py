"""Loop programs: a plan's kernel launches, ``lz.for``, ``lz.while`` and ``lz.if`` run in machine code.

``BoundHostStep`` runs a region once per iteration (``lezero.runtime.cpu``); from Python that costs
~3 us per iteration and launch besides the kernels: for an LSTM step at batch 1 (a 12 us recurrent
GEMM and a 1 us gate kernel) a third of the time.  So a plan (``CpuPlan.native``) or a host step
(``BoundHostStep.native``) is encoded once as a *loop program*, which ``lz_run_program`` walks in
one call, and the same program runs in native executables (``lezero.runtime.native``: the walker
is linked beside the kernels, the program is a C table relocated when a model is created).  One
encoder (``ProgramEncoder``), one walker (``walker_ir``); where the addresses come from is the
caller's ``binding``: this process's memory here, relocations against the model's arena, weights,
status array and kernels in an executable.

A program is one int64 array: a *frame* (one word per buffer address: a plan's arguments and
results first, then every other buffer a host step or a copy names) and the *code*, a sequence of
entries ``[kind, size, ...]``:

- ``KERNEL fn work threads n (slot, word) * n table...``: write ``frame[word]`` into the inline
  pointer table's ``slot`` for each patch (the other slots hold fixed buffers), then call
  ``fn(table, 0, work)``, or the thread pool's native entry when ``threads > 1``;
- ``COPY bytes dst src``: ``memcpy(frame[dst], frame[src], bytes)`` (a result passed through);
- ``FOR n reverse index_word BLOCK``: for ``c`` in ``0..n-1``, ``i = reverse ? n-1-c : c``, store
  ``i`` at ``frame[index_word]``, bind the block's records, run its code;
- ``WHILE max go_word CBLOCK BBLOCK EBLOCK``: bind and run the condition, stop when the i1 at
  ``frame[go_word]`` is false (read in machine code, no return to Python), fail when the body has
  already run ``max`` times (``max`` -1: no bound), else bind and run the body; after an even
  number of body runs the epilogue copies the current carried values into the results;
- ``IF pred_word TBLOCK EBLOCK``: bind and run the block the i8 at ``frame[pred_word]`` picks.

A BLOCK is ``[records, length, (child, first, even, odd, stride) * records, code (length words)]``:
before iteration ``c`` each record sets ``frame[child] = frame[c == 0 ? first : c odd ? odd :
even] + i * stride``.  That covers invariants (one word), a scanned input's slice or a stacked
output's row (stride = the row's bytes) and the carried values' two alternating buffers, chosen
as ``BoundHostStep``'s Python loops choose them (the initial value read where it is; the last
``lz.for`` iteration writes the step's results).  Only the plan's own argument and result words
change per call.  ``lz_run_program`` returns 0, or ``pc + 1`` of a ``WHILE`` that ran past its
``max_trip_count``.  Bounds checks are read after the program (a kernel that sees a bad index reads
a clamped address, so what runs after it is safe).

A launch the plan splits over the thread pool runs on as many threads in a program, except inside
a loop's body, where ``BodyThreads`` chooses per call from the program's own times whether it
splits or runs on the calling thread (a batch-1 LSTM step's split GEMV loses on a shared machine).

A loop body whose kernel reads an invariant pre-packed (an LSTM's ``W_hh``: ``packed_inputs``,
laid out by Python once per run of the loop) is packed while encoding when the invariant is a
constant (a model's weight, through any depth of loops); otherwise the caller must lay it out
(``packed_outside``: a step run from Python does, before the call).  What a program cannot hold
(a collective's step, an invariant to pack that is computed at run time) raises ``IRError``
naming the op: a plan or step then runs from Python (``native_refusal`` says why), a native
executable fails to build.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import time

import numpy as np
from llvmlite import ir

from lezero.codegen.index_checks import initial_status, status_error
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.control_flow import exceeded_bound_message
from lezero.runtime.kernel_cache import default_cache
from lezero.runtime.plan import HostStep

KERNEL, COPY, FOR, WHILE, IF = range(5)
RECORD = 5  # child word, first, even, odd words, stride
WALKER = "lz_run_program"

_I8, _I64 = ir.IntType(8), ir.IntType(64)
_I8P, _I64P = _I8.as_pointer(), _I64.as_pointer()
_KERNEL_FN = ir.FunctionType(ir.VoidType(), [_I8P.as_pointer(), _I64, _I64])
_POOL_FN = ir.FunctionType(ir.VoidType(), [_I8P, _I8P, _I8P, _I64, _I64])
# (code, start, end, frame, pool state, pool entry, always through the entry) -> 0 or a WHILE's pc + 1
_WALKER_FN = ir.FunctionType(_I64, [_I64P, _I64, _I64, _I64P, _I8P, _POOL_FN.as_pointer(), _I64])


class _Builder(ir.IRBuilder):
    """llvmlite's builder with the few shapes the walker is made of.  A function's stack slots go
    into a block of their own ahead of its entry (``finish`` closes it), so that adding one never
    moves the instructions this builder is placing."""

    def __init__(self, function: ir.Function):
        slots, self.entry = function.append_basic_block("slots"), function.append_basic_block("entry")
        super().__init__(self.entry)
        self.slots = ir.IRBuilder(slots)

    def finish(self) -> None:
        self.slots.branch(self.entry)

    def const(self, value: int):
        return ir.Constant(_I64, value)

    def word(self, array, index):
        return self.load(self.gep(array, [index]))

    def field(self, code, pc, offset: int):
        return self.word(code, self.add(pc, self.const(offset)))

    def variable(self, initial):
        """An i64 stack slot in the entry block (mem2reg makes it a register)."""
        slot = self.slots.alloca(_I64)
        self.store(initial, slot)
        return slot

    @contextlib.contextmanager
    def below(self, slot, limit):
        """``while slot < limit``: yields the slot's value; the body stores the next one."""
        head, body, after = (self.append_basic_block(name) for name in ("head", "body", "after"))
        self.branch(head)
        self.position_at_end(head)
        value = self.load(slot)
        self.cbranch(self.icmp_signed("<", value, limit), body, after)
        self.position_at_end(body)
        yield value
        self.branch(head)
        self.position_at_end(after)

    @contextlib.contextmanager
    def counted(self, count):
        """``for k in range(count)``: yields ``k``."""
        counter = self.variable(self.const(0))
        with self.below(counter, count) as k:
            yield k
            self.store(self.add(k, self.const(1)), counter)

    def return_if_failed(self, rc):
        with self.if_then(self.icmp_signed("!=", rc, self.const(0))):
            self.ret(rc)


def walker_ir() -> str:
    """The LLVM IR of ``lz_run_program`` (see the module docstring), target-neutral: the JIT
    compiles it for this process, ``lezero-compile`` links it beside an executable's kernels."""
    module = ir.Module(name=WALKER)
    memcpy = module.declare_intrinsic("llvm.memcpy", [_I8P, _I8P, _I64])
    bind = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64P, _I64, _I64, _I64, _I64P]), "lz_bind")
    bind.linkage = "internal"
    b = _Builder(bind)
    code, at, select, i, frame = bind.args
    with b.counted(b.word(code, at)) as r:  # frame[child] = frame[first/even/odd] + i * stride
        record = b.add(b.add(at, b.const(2)), b.mul(r, b.const(RECORD)))
        base = b.word(frame, b.word(code, b.add(b.add(record, b.const(1)), select)))
        value = b.add(base, b.mul(i, b.field(code, record, 4)))
        b.store(value, b.gep(frame, [b.word(code, record)]))
    b.ret_void()
    b.finish()

    run = ir.Function(module, _WALKER_FN, WALKER)
    code, start, end, frame, pool, pool_run, always = run.args
    b = _Builder(run)
    pc_slot = b.variable(start)

    def block_code(block):
        """(start, end) of a block's code."""
        first = b.add(b.add(block, b.const(2)), b.mul(b.word(code, block), b.const(RECORD)))
        return first, b.add(first, b.word(code, b.add(block, b.const(1))))

    def bound_run(block, select, i):
        b.call(bind, [code, block, select, i, frame])
        first, last = block_code(block)
        b.return_if_failed(b.call(run, [code, first, last, frame, pool, pool_run, always]))

    def parity_select(c):  # 0 at the first iteration, else 1 (even) or 2 (odd)
        alternate = b.add(b.and_(c, b.const(1)), b.const(1))
        return b.select(b.icmp_signed("==", c, b.const(0)), b.const(0), alternate)

    def byte_at(word):
        return b.load(b.inttoptr(b.word(frame, word), _I8P))

    with b.below(pc_slot, end) as pc:  # the entries in [start, end)
        advance = run.append_basic_block("advance")
        cases = {kind: run.append_basic_block(name) for kind, name in
                 ((KERNEL, "kernel"), (COPY, "copy"), (FOR, "for"), (WHILE, "while"), (IF, "if"))}
        switch = b.switch(b.word(code, pc), advance)
        for kind, block in cases.items():
            switch.add_case(ir.Constant(_I64, kind), block)

        b.position_at_end(cases[KERNEL])
        patches = b.field(code, pc, 5)
        table_at = b.add(b.add(pc, b.const(6)), b.mul(patches, b.const(2)))
        table = b.gep(code, [table_at])
        with b.counted(patches) as k:
            patch = b.add(b.add(pc, b.const(6)), b.mul(k, b.const(2)))
            b.store(b.word(frame, b.field(code, patch, 1)), b.gep(table, [b.word(code, patch)]))
        fn, work, threads = (b.field(code, pc, offset) for offset in (2, 3, 4))
        split = b.or_(b.icmp_signed(">", threads, b.const(1)), b.icmp_signed("!=", always, b.const(0)))
        with b.if_else(split) as (pooled, serial):
            with pooled:
                b.call(pool_run, [pool, b.inttoptr(fn, _I8P), b.bitcast(table, _I8P), work, threads])
            with serial:
                b.call(b.inttoptr(fn, _KERNEL_FN.as_pointer()), [b.bitcast(table, _I8P.as_pointer()), b.const(0), work])
        b.branch(advance)

        b.position_at_end(cases[COPY])
        nbytes, dst, src = (b.field(code, pc, offset) for offset in (2, 3, 4))
        b.call(memcpy, [b.inttoptr(b.word(frame, dst), _I8P), b.inttoptr(b.word(frame, src), _I8P), nbytes,
                        ir.Constant(ir.IntType(1), 0)])
        b.branch(advance)

        b.position_at_end(cases[FOR])
        n, reverse, index_word = (b.field(code, pc, offset) for offset in (2, 3, 4))
        with b.counted(n) as c:
            down = b.sub(b.sub(n, b.const(1)), c)
            i = b.select(b.icmp_signed("!=", reverse, b.const(0)), down, c)
            b.store(i, b.inttoptr(b.word(frame, index_word), _I64P))
            bound_run(b.add(pc, b.const(5)), parity_select(c), i)
        b.branch(advance)

        b.position_at_end(cases[WHILE])
        bound, go_word = b.field(code, pc, 2), b.field(code, pc, 3)
        condition = b.add(pc, b.const(4))
        body = block_code(condition)[1]
        epilogue = block_code(body)[1]
        count = b.variable(b.const(0))
        test, stopped = run.append_basic_block("while_test"), run.append_basic_block("while_stopped")
        b.branch(test)
        b.position_at_end(test)
        c = b.load(count)
        select = parity_select(c)
        bound_run(condition, select, b.const(0))
        going = b.icmp_signed("!=", byte_at(go_word), ir.Constant(_I8, 0))
        with b.if_then(b.not_(going)):
            b.branch(stopped)
        with b.if_then(b.icmp_signed("==", c, bound)):  # ran past max_trip_count
            b.ret(b.add(pc, b.const(1)))
        bound_run(body, select, b.const(0))
        b.store(b.add(c, b.const(1)), count)
        b.branch(test)
        b.position_at_end(stopped)
        with b.if_then(b.icmp_signed("==", b.and_(b.load(count), b.const(1)), b.const(0))):
            bound_run(epilogue, b.const(0), b.const(0))
        b.branch(advance)

        b.position_at_end(cases[IF])
        then = b.add(pc, b.const(3))
        otherwise = block_code(then)[1]
        picked = b.icmp_signed("!=", byte_at(b.field(code, pc, 2)), ir.Constant(_I8, 0))
        bound_run(b.select(picked, then, otherwise), b.const(0), b.const(0))
        b.branch(advance)

        b.position_at_end(advance)
        b.store(b.add(pc, b.field(code, pc, 1)), pc_slot)
    b.ret(b.const(0))
    b.finish()
    return str(module)


@functools.cache
def _walker():
    """``lz_run_program`` as a ctypes function (once per process, its object from the kernel cache's
    disk entry after the first: JIT-compiling it cost every process's first plan ~0.13 s of LLVM;
    calls release the GIL)."""
    engine, (address,) = default_cache().load_module(walker_ir(), (WALKER,))
    function = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address)
    function.keepalive = engine  # the engine owns the code
    return function


class ProgramEncoder:
    """Builds one loop program (see the module docstring).  ``binding`` gives the addresses, each
    ``(relocation kind or None, value)``: ``function(plan, launch, code_at)`` a kernel's code,
    ``table(plan, launch)`` its pointer table's fixed slots, ``fixed(plan, ref, type)`` an arena
    slot or constant of ``plan``, ``step_buffer(step, role, k, type)`` a host step's own buffers
    (``"spare"`` carried value ``k``, ``"index"``, ``"go"``); ``packed(plan, where, index, array)``
    stores a region's pre-packed invariant (argument ``where``, constant ``index``).  ``top_words``: the frame words the
    caller fills per call (the plan's or step's arguments and results).  ``packed_outside``: ids
    of region plans whose pre-packed invariants the caller lays out (a step run from Python)."""

    def __init__(self, binding, top_words: int, packed_outside=frozenset()):
        self.binding, self.packed_outside = binding, packed_outside
        self.frame: list[int] = [0] * top_words
        self.code: list[int] = []
        self.relocations: list[tuple[int, str]] = []  # (index into frame + code, kind), made at words()
        self._frame_relocations: list[tuple[int, str]] = []
        self._code_relocations: list[tuple[int, str]] = []
        self.kernels: list[tuple[int, object, bool]] = []  # (code position, Launch, in a loop's body) in code order
        self._loops = 0  # the loop bodies being encoded around the current position
        self.whiles: list[tuple[int, int]] = []  # (code position, max_trip_count)
        self._fixed: dict = {}
        self._constants: dict[int, np.ndarray] = {}  # frame word -> the constant it always holds

    def words(self) -> np.ndarray:
        """The program: the frame, then the code (``relocations`` index it)."""
        self.relocations = self._frame_relocations + [(len(self.frame) + at, kind)
                                                      for at, kind in self._code_relocations]
        return np.array(self.frame + self.code, np.int64)

    def _word(self, address) -> int:
        """A frame word holding a fixed ``address`` (one per address)."""
        if address not in self._fixed:
            kind, value = address
            self._fixed[address] = len(self.frame)
            if kind is not None:
                self._frame_relocations.append((len(self.frame), kind))
            self.frame.append(value)
        return self._fixed[address]

    def _emit(self, address) -> None:
        kind, value = address
        if kind is not None:
            self._code_relocations.append((len(self.code), kind))
        self.code.append(value)

    def _new_frame(self, plan) -> list[int]:
        """Words for a region's arguments and results (bound by its step's records)."""
        start = len(self.frame)
        self.frame += [0] * (len(plan.block.args) + len(plan.outputs))
        return list(range(start, len(self.frame)))

    def buffer_word(self, plan, frame: list[int], ref, t) -> int:
        if ref.kind == "input":
            return frame[ref.where]
        if ref.kind == "output":
            return frame[len(plan.block.args) + ref.where]
        word = self._word(self.binding.fixed(plan, ref, t))
        if ref.kind == "constant":
            self._constants[word] = plan.constants[ref.where]
        return word

    def plan(self, plan, frame: list[int], copy_outputs: bool) -> None:
        """``plan``'s launches; with ``copy_outputs`` (a region) also its pass-through results."""
        for launch in plan.launches:
            if isinstance(launch, HostStep):
                types = [v.type for v in launch.op.operands], [r.type for r in launch.op.results]
                self.step(launch, [self.buffer_word(plan, frame, ref, t) for ref, t in zip(launch.operands, types[0])],
                          [self.buffer_word(plan, frame, ref, t) for ref, t in zip(launch.results, types[1])])
            else:
                self._kernel(plan, launch, frame)
        if copy_outputs:
            args = len(plan.block.args)
            for i, (ref, t) in enumerate(zip(plan.outputs, plan.result_types)):
                if not plan.written_in_place(i):
                    self._copy(t.nbytes, frame[args + i], self.buffer_word(plan, frame, ref, t))

    def _kernel(self, plan, launch, frame: list[int]) -> None:
        at = len(self.code)
        patches = [(slot, self.buffer_word(plan, frame, ref, None)) for slot, ref in enumerate(launch.buffers)
                   if ref.kind in ("input", "output")]
        self.code += [KERNEL, 0]
        self._emit(self.binding.function(plan, launch, at))
        self.code += [launch.kernel.work_items, 1, len(patches)]
        for slot, word in patches:
            self.code += [slot, word]
        for address in self.binding.table(plan, launch):
            self._emit(address)
        self.code[at + 1] = len(self.code) - at
        self.kernels.append((at, launch, self._loops > 0))

    def _copy(self, nbytes: int, dst: int, src: int) -> None:
        self.code += [COPY, 5, nbytes, dst, src]

    def _block(self, records: list, body) -> None:
        at = len(self.code)
        self.code += [len(records), 0]
        for record in records:
            self.code += list(record)
            child, first, even, odd, stride = record
            if first == even == odd and stride == 0 and first in self._constants:  # an invariant constant
                self._constants[child] = self._constants[first]
        start = len(self.code)
        body()
        self.code[at + 1] = len(self.code) - start

    def _region(self, step, plan, sources: list[int]) -> list[int]:
        """A frame for region ``plan`` whose arguments come from the words ``sources`` (None where
        one changes per iteration); its pre-packed invariants packed here when they are constants."""
        for where, spec, index in plan.packed_inputs:
            constant = self._constants.get(sources[where])
            if constant is not None:
                self.binding.packed(plan, where, index, spec.pack(np.ascontiguousarray(constant)))
            elif id(plan) not in self.packed_outside:
                raise IRError(f"'{step.name}' op: a region reads its argument {where} pre-packed, and it is "
                              "computed at run time (the Python runtime lays it out once per run of the loop): "
                              "a loop program cannot run it", step.op.location)
        return self._new_frame(plan)

    def step(self, step, operands: list[int], results: list[int]) -> None:
        """A host step whose operand and result buffers are at frame words ``operands``, ``results``."""
        if step.name not in ("lz.for", "lz.while", "lz.if"):
            raise IRError(f"'{step.name}' op: a loop program runs kernels and control flow, not this step",
                          step.op.location)
        at = len(self.code)
        if step.name == "lz.for":
            self._for(step, operands, results)
        elif step.name == "lz.while":
            self._while(step, operands, results)
        else:
            self._if(step, operands, results)
        if len(self.code) > at and self.code[at] != COPY:
            self.code[at + 1] = len(self.code) - at

    def _spare(self, step, types: list) -> list[int]:
        return [self._word(self.binding.step_buffer(step, "spare", k, t)) for k, t in enumerate(types)]

    def _for(self, step, operands: list[int], results: list[int]) -> None:
        n, ni, nc = step.trip_count, step.num_invariant, step.num_carried
        invariants, inits, xs = operands[:ni], operands[ni:ni + nc], operands[ni + nc:]
        finals, ys = results[:nc], results[nc:]
        carried_types = [r.type for r in step.op.results[:nc]]
        if n == 0:
            for t, final, init in zip(carried_types, finals, inits):
                self._copy(t.nbytes, final, init)
            return
        body = step.region_plans[0]
        frame = self._region(step, body, [None] + invariants + [None] * (nc + len(xs)))
        spare = self._spare(step, carried_types)
        index = self._word(self.binding.step_buffer(step, "index", 0, body.block.args[0].type))

        def written(parity: int, k: int) -> int:  # iteration c of this parity writes value k here
            return (finals if (n - 1 - parity) % 2 == 0 else spare)[k]

        args = body.block.args
        records = [(frame[0], index, index, index, 0)]
        records += [(frame[1 + k], w, w, w, 0) for k, w in enumerate(invariants)]
        records += [(frame[1 + ni + k], inits[k], written(1, k), written(0, k), 0) for k in range(nc)]
        records += [(frame[1 + ni + nc + k], w, w, w, args[1 + ni + nc + k].type.nbytes) for k, w in enumerate(xs)]
        records += [(frame[len(args) + k], written(0, k), written(0, k), written(1, k), 0) for k in range(nc)]
        records += [(frame[len(args) + nc + k], w, w, w, body.result_types[nc + k].nbytes) for k, w in enumerate(ys)]
        self.code += [FOR, 0, n, int(step.reverse), index]
        self._loops += 1
        self._block(records, lambda: self.plan(body, frame, True))
        self._loops -= 1

    def _while(self, step, operands: list[int], results: list[int]) -> None:
        ni = step.num_invariant
        invariants, inits = operands[:ni], operands[ni:]
        condition, body = step.region_plans
        sources = invariants + [None] * len(inits)
        frames = [self._region(step, condition, sources), self._region(step, body, sources)]
        spare = self._spare(step, [r.type for r in step.op.results])
        go = self._word(self.binding.step_buffer(step, "go", 0, condition.result_types[0]))

        def arguments(frame: list[int]) -> list:  # the current carried values: init, outs (odd), spare
            return [(frame[k], w, w, w, 0) for k, w in enumerate(invariants)] + \
                [(frame[ni + k], init, spare[k], out, 0) for k, (init, out) in enumerate(zip(inits, results))]

        nargs = len(condition.block.args)
        bound = step.op.get_attr("max_trip_count")
        self.whiles.append((len(self.code), -1 if bound is None else bound.value))
        self.code += [WHILE, 0, -1 if bound is None else bound.value, go]
        self._loops += 1
        self._block(arguments(frames[0]) + [(frames[0][nargs], go, go, go, 0)],
                    lambda: self.plan(condition, frames[0], True))
        self._block(arguments(frames[1]) + [(frames[1][nargs + k], out, out, spare[k], 0)
                                            for k, out in enumerate(results)],
                    lambda: self.plan(body, frames[1], True))
        self._loops -= 1
        self._block([], lambda: [self._copy(r.type.nbytes, out, frames[0][ni + k])
                                 for k, (r, out) in enumerate(zip(step.op.results, results))])

    def _if(self, step, operands: list[int], results: list[int]) -> None:
        self.code += [IF, 0, operands[0]]
        for region in step.region_plans:
            frame = self._region(step, region, operands[1:])
            self._block([(frame[k], w, w, w, 0) for k, w in enumerate(operands[1:] + results)],
                        lambda region=region, frame=frame: self.plan(region, frame, True))


class _ProcessBinding:
    """Addresses in this process: the bound plans' kernels, tables, arenas and constants, and the
    bound host steps' own buffers, found from the planned objects (``ProgramEncoder``'s binding)."""

    def __init__(self):
        self.plans, self.launches = {}, {}

    def add_plan(self, bound) -> None:
        self.plans[id(bound.plan)] = bound
        for planned, launch in zip(bound.plan.launches, bound.launches):
            self.add_launch(planned, launch)

    def add_launch(self, planned, launch) -> None:
        self.launches[id(planned)] = launch
        for region in getattr(launch, "regions", ()):
            self.add_plan(region.plan)

    def function(self, plan, launch, at):
        return None, ctypes.cast(self.launches[id(launch)].function, ctypes.c_void_p).value

    def table(self, plan, launch):
        return [(None, pointer or 0) for pointer in self.launches[id(launch)].pointers]

    def fixed(self, plan, ref, t):
        bound = self.plans[id(plan)]
        if ref.kind == "arena":
            return None, bound.arena.ctypes.data + ref.where
        return None, bound.plan.constants[ref.where].ctypes.data

    def step_buffer(self, step, role, k, t):
        bound = self.launches[id(step)]
        return None, (bound.spare[k] if role == "spare" else getattr(bound, role)).ctypes.data

    def packed(self, plan, where, index, array):
        for packed in self.plans[id(plan)].packed_inputs:
            if packed.where == where:
                np.copyto(packed.packed, array)


class BodyThreads:
    """Whether a program's loop bodies split their launches over the thread pool, chosen by timing
    the program's own calls (issue 17).  An LSTM step at batch 1 is one GEMV of 13-60 us split in
    two and a gate kernel: on a quiet AMD EPYC (znver4, 2 cores) the split ran b1 h256 in 2.6 ms
    against 4.8 on one thread, but while another process held the second core (load ~2) its median
    was 7.8 ms: a worker descheduled after claiming its half holds up each step, 256 times a call.
    So a program whose loop bodies split starts by alternating the two settings (``TRIALS`` calls
    each), then runs the one whose latest ``WINDOW`` times have the lower median, and every
    ``REVISIT``-th call runs the other, so that a change of load shows.  Launches outside loops
    (the input projections: milliseconds each) always split as the plan says."""

    TRIALS = 3
    WINDOW = 5
    REVISIT = 16

    def __init__(self):
        self.times: tuple[list, list] = ([], [])  # seconds of the latest calls: bodies split, bodies whole
        self.calls = 0

    def whole(self) -> bool:
        """The setting of the next call: True runs the loop bodies' launches on the calling thread."""
        split, whole = self.times
        if len(split) < self.TRIALS or len(whole) < self.TRIALS:
            return len(whole) < len(split)
        best = _median(whole) < _median(split)
        return best != (self.calls % self.REVISIT == self.REVISIT - 1)

    def record(self, whole: bool, seconds: float) -> None:
        times = self.times[whole]
        times.append(seconds)
        del times[:-self.WINDOW]
        self.calls += 1


def _median(values: list) -> float:
    return sorted(values)[len(values) // 2]


class LoopProgram:
    """An encoded program in this process: ``run(addresses, pool)`` fills the top frame words (the
    plan's or step's argument and result addresses) and makes the one call.  Where its loop bodies
    hold launches the plan splits, ``BodyThreads`` picks per call whether they split."""

    def __init__(self, encoder: ProgramEncoder, binding: _ProcessBinding):
        self.words = encoder.words()
        self.code_at, self.length = len(encoder.frame), len(encoder.code)
        self.base = self.words.ctypes.data
        self.threads_at = [(self.code_at + at + 4, launch.kernel.work_items, launch.split_over_threads, in_loop)
                           for at, launch, in_loop in encoder.kernels]
        self.checked = [binding.launches[id(launch)] for _, launch, _ in encoder.kernels
                        if launch.index_checks is not None]
        self.kernels = len(encoder.kernels)
        self.body_threads = BodyThreads() if any(p and in_loop for _, _, p, in_loop in self.threads_at) else None
        self.setting = None  # (threads, loop bodies whole) the words hold
        self.keepalive = binding  # the bound plans whose tables, arenas and constants the words point at

    def _use_threads(self, threads: int, bodies_whole: bool) -> None:
        """Each launch's thread count on a pool of ``threads`` (set when that changes)."""
        for at, items, parallel, in_loop in self.threads_at:
            self.words[at] = min(threads, items) if parallel and not (bodies_whole and in_loop) else 1
        self.setting = (threads, bodies_whole)

    def run(self, addresses: list, pool) -> None:
        threads = pool.num_threads
        choice = self.body_threads if threads > 1 else None
        whole = choice is not None and choice.whole()
        if self.setting != (threads, whole):
            self._use_threads(threads, whole)
        # asked per call: the workers (and their state) are new after a fork or a close()
        pool_run, pool_state = pool.native_entry() if threads > 1 else (None, None)
        self.words[:len(addresses)] = addresses
        start = time.perf_counter()
        failed = _walker()(self.base + 8 * self.code_at, 0, self.length, self.base, pool_state, pool_run, 0)
        if choice is not None:
            choice.record(whole, time.perf_counter() - start)
        if self.checked:
            _raise_first_failed_check(self.checked)
        if failed:
            raise RuntimeError(exceeded_bound_message(int(self.words[self.code_at + failed - 1 + 2])))

    def run_once(self, inputs: list, results: list, pool) -> None:
        """A plan's program: ``inputs`` and ``results`` (None where no kernel writes a result)."""
        self.run([a.ctypes.data for a in inputs] + [0 if r is None else r.ctypes.data for r in results], pool)


def native_plan(plan) -> LoopProgram | None:
    """A whole ``CpuPlan`` as one program run once per call: its launches, and its host steps'
    loops, without returning to Python; None for a plan of one launch (nothing to save) or one the
    encoder refuses (a collective, a region packing an invariant: those run from Python)."""
    if len(plan.launches) < 2:
        return None
    binding = _ProcessBinding()
    binding.add_plan(plan)
    encoder = ProgramEncoder(binding, len(plan.plan.block.args) + len(plan.outputs))
    try:
        encoder.plan(plan.plan, list(range(len(encoder.frame))), copy_outputs=False)
    except IRError:
        return None
    return LoopProgram(encoder, binding)


def native_step(step) -> tuple[LoopProgram | None, str | None]:
    """``(program, None)`` for a ``BoundHostStep`` whose whole run (every iteration, nested loops
    included) can be one program, else ``(None, why not)``.  Its own regions' pre-packed
    invariants are laid out by the step before the call (``BoundHostStep.run``)."""
    binding = _ProcessBinding()
    binding.add_launch(step.step, step)
    operands, results = len(step.step.operands), len(step.step.results)
    encoder = ProgramEncoder(binding, operands + results, {id(region.plan.plan) for region in step.regions})
    try:
        encoder.step(step.step, list(range(operands)), list(range(operands, operands + results)))
    except IRError as e:
        return None, f"{e.message}: it runs in Python"
    return LoopProgram(encoder, binding), None


def _raise_first_failed_check(launches) -> None:
    """The ``IndexError`` of the first of ``launches`` (in launch order) whose status says a check
    failed; every failed status is cleared for the next run."""
    first = None
    for launch in launches:
        message = status_error(launch.checks, launch.status)
        if message is not None:
            launch.status[:] = initial_status(launch.checks)
            first = first or message
    if first is not None:
        raise IndexError(first)
