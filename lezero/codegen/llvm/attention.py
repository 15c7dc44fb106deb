"""Kernels of kind ``attention``: one ``lz.attention`` (float32) as a flash-attention style loop
nest, so the ``Sq x Sk`` scores never reach memory (issue 11).

A work item is one batch index (``[*batch]`` flattened: batch x heads) and a chunk of its query
rows.  A call packs each batch index's keys transposed, ``kT[d][j]`` (D x Sk rounded up to a
vector; the keys past Sk repeat the last one, their scores are masked), into a ``malloc``'d
workspace, once for the consecutive chunks of one batch index in its range; every query tile
reuses it.  Then per tile of ``mr`` query rows (the GEMM's register tile, ``gemm.register_tile``:
6 rows on AVX-512, at most Sq) and per key block of up to ``KEY_BLOCK`` keys:

1. **scores**: ``S = q kT`` by a register-tiled product (mr x nv vectors of accumulators, the
   GEMM micro-kernel's shape: one broadcast of q[r, d] and nv loads of kT per d), then the scale,
   the mask (vector loads along the keys, or a broadcast), keys past Sk set to -inf; the block's
   running row maximum is taken on the vectors; S goes to a stack block of mr x KEY_BLOCK floats
   (L1);
2. **online softmax** per row: ``m' = max(m, block max)``, ``p = exp(S - m')`` stored over S,
   ``l = l e^(m - m') + sum p`` (a loop LLVM vectorizes: exp is inline code, the sum reassociates);
3. **P V**: the row's output accumulators (mr x Dv, stack) scaled by ``e^(m - m')`` and
   accumulated with ``p[r, j] v[j, :]`` in a register tile of mr rows x up to nv vectors of v.

At the end each row is divided by its ``l`` and stored.  Rows past Sq in the last tile compute
on the last row (clamped reads) and are not stored.  q and k are read with any strides (the
exports' transposes, absorbed by ``fuse-attention``), v's rows and the output's rows must be
contiguous (the pass keeps them so); the output is written with the strides of the layout the
kernel yields (a transpose after the attention folded into the store).  A row whose every key is
masked with -inf gives nan, as the reference's softmax does.

A sequence form (``row_generic.sequence_form``: the kernel marked ``SEQUENCE_ATTR``, issue 11)
reads the sequence length, its queries' and keys', at run time from its sizes buffer: the loops
over query tiles, key blocks and score tiles run to it (the last key block and tile masked past
it, the last tile in as few vectors as it needs), and every offset or stride of the form
that is a constant times a power of the length (a row stride of ``[b, s, h]``: ``s h``; of the
mask ``[b, 1, s, s]``: ``s^2``) is computed from it.  Which are is read off the form at a second
length (``_fitted``); anything else is a lowering error, and the probe keeps the kernel per length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import llvmlite.ir as ir

from lezero.codegen.llvm.gemm import register_tile
from lezero.codegen.llvm.ir_types import FLOAT, I64, PTR, VOID
from lezero.codegen.llvm.loops import declare, i64, unravel_values
from lezero.codegen.llvm.scalar_builder import Scalar
from lezero.codegen.llvm.vectors import (call_intrinsic, counted_loop, lane_mask, load_vector, select_min, splat,
                                        store_vector, transpose_square)
from lezero.codegen.row_generic import SEQUENCE_ATTR, SEQUENCE_PROBES, sequence_form
from lezero.ir.core import Operation
from lezero.ir.types import F32
from lezero.passes.attention import VIEW_OPS, reshaped_strides, view_of
from lezero.passes.fusion_cost import row_major

KEY_BLOCK = 256  # keys per online-softmax step: the score block, mr x 256 floats, stays in L1
MIN_WORK_ITEMS = 16  # query rows are split into chunks until batches x chunks reaches this


def _operand_view(body, v, failure):
    """(argument index, element offset, element strides per dim) of ``v``, a block argument of
    ``body`` through views."""
    root = v
    while isinstance(root.owner, Operation) and root.owner.name in VIEW_OPS:
        root = root.owner.operands[0]
    if root not in body.args:
        raise failure(f"operand {v.type} is not read from memory through views")
    view = view_of(v, root)
    if view is None:
        raise failure(f"operand {v.type} needs a copy to be read (a reshape of a strided view)")
    return (body.args.index(root),) + view


def _output_strides(yields, result, failure):
    """Element strides of ``result`` in the yielded buffer (through a transpose and reshape)."""
    (yielded,) = yields
    chain = []
    v = yielded
    while v is not result:
        chain.append(v.owner)
        v = v.owner.operands[0]
    shape, strides = yielded.type.shape, row_major(yielded.type.shape)
    for op in chain:  # from the yield back to the result: each view inverted
        source = op.operands[0].type.shape
        if op.name == "lz.reshape":
            strides = reshaped_strides(shape, strides, source)
        else:
            perm = op.definition.attrs(op).perm
            inverse = [0] * len(perm)
            for j, p in enumerate(perm):
                inverse[p] = strides[j]
            strides = tuple(inverse)
        if strides is None:
            raise failure("the output view needs a copy")
        shape = source
    return strides


def _geometry(kernel_op: Operation, failure) -> dict:
    """Where the attention of ``kernel_op`` reads and writes, in elements: per buffer (``q``, ``k``,
    ``v``, ``mask``: None without one, ``out``) its (buffer index, offset, strides), the mask's
    broadcast to the scores ``[*batch, sq, sk]``."""
    body = kernel_op.regions[0].blocks[0]
    (op,) = [o for o in body.ops if o.name == "lz.attention"]
    q, k, v = op.operands[:3]
    views = {name: _operand_view(body, x, failure) for name, x in zip("qkv", (q, k, v))}
    mask = None
    if len(op.operands) == 4:
        m = op.operands[3]
        if m not in body.args:
            raise failure("the mask is read from memory")
        mask = (body.args.index(m), 0, _broadcast_strides(m.type.shape, q.type.shape[:-2] + (q.type.shape[-2],
                                                                                                v.type.shape[-2])))
    return {**views, "mask": mask, "out": (0, 0, _output_strides(list(body.terminator.operands), op.result, failure))}


def _fitted(x: int, y: int, size: int, other: int) -> tuple[int, int] | None:
    """``(c, p)`` with ``x = c size^p`` and ``y = c other^p`` (``p`` = 0: the same at both lengths),
    or None."""
    for p in range(4):
        c, r = divmod(x, size ** p)
        if r == 0 and c * other ** p == y:
            return c, p
    return None


def _broadcast_strides(shape, target):
    strides = row_major(shape)
    lead = len(target) - len(shape)
    return tuple(0 if d < lead or shape[d - lead] == 1 else strides[d - lead] for d in range(len(target)))


@dataclass(frozen=True)
class Operand:
    """A buffer the kernel reads or writes: its pointer, the element offset of the view's first
    element, and the element step along each dim of the view."""

    pointer: ir.Value
    offset: int
    strides: tuple


@dataclass(frozen=True)
class Tiling:
    """The loop nest's static sizes (module docstring): ``w`` floats a vector, ``mr`` query rows
    by ``nv`` vectors a register tile, ``tile_keys = nv * w`` keys a score tile, ``key_block``
    keys an online-softmax step, ``sk_pad`` the packed keys' row length, ``dv_pad`` the output
    accumulators' row length, and ``chunks`` x ``tiles_per_chunk`` query tiles per batch index."""

    w: int
    mr: int
    nv: int
    key_block: int
    sk_pad: int
    dv_pad: int
    chunks: int
    tiles_per_chunk: int

    @property
    def tile_keys(self) -> int:
        return self.nv * self.w

    @staticmethod
    def of(cpu, batches: int, sq: int, sk: int, dv: int) -> "Tiling":
        w = cpu.vector_bytes // 4
        mr, nv = register_tile(cpu.vector_registers, cpu.has_fma)
        mr = min(mr, sq)  # decode shapes (a few query rows): no rows computed for nothing
        tile_keys = nv * w
        tiles = -(-sq // mr)
        chunks = min(tiles, max(1, -(-MIN_WORK_ITEMS // batches)))
        per_chunk = -(-tiles // chunks)
        return Tiling(w, mr, nv, tile_keys * max(1, KEY_BLOCK // tile_keys), -(-sk // w) * w,
                      -(-dv // w) * w, -(-tiles // per_chunk), per_chunk)


def lower_attention(ctx) -> int:
    """Emit the kernel (module docstring); returns its work items."""
    (op,) = [o for o in ctx.body.ops if o.name == "lz.attention"]
    if op.result.type.element_type != F32:
        raise ctx.failure(f"attention runs float32 only, not {op.result.type.element_type}")
    return AttentionEmitter(ctx, op).emit()


class AttentionEmitter:
    """The loop nest of one attention kernel; each method emits one stage of a key block."""

    def __init__(self, ctx, op: Operation):
        self.ctx, self.b, self.fn = ctx, ctx.b, ctx.fn
        q, k, v = op.operands[:3]
        self.batch_shape = q.type.shape[:-2]
        sq, self.d = q.type.shape[-2:]
        sk, self.dv = v.type.shape[-2:]
        geometry = _geometry(ctx.kernel, ctx.failure)
        # the lengths as LLVM values: constants, or a sequence form's run-time length
        self.sq, self.sk = i64(sq), i64(sk)
        self.keys = sk  # an int, None where it is read at run time
        self.dynamic = SEQUENCE_ATTR in ctx.kernel.attributes
        if self.dynamic:
            geometry = self._run_time_geometry(geometry, sq, sk)
        buffers = ctx.operand_buffers
        self.q, self.k, self.v = (Operand(buffers[i].pointer, offset, strides)
                                  for i, offset, strides in (geometry[x] for x in "qkv"))
        if self.dv > 1 and self.v.strides[-1] != 1:
            raise ctx.failure("v's rows must be contiguous")
        self.mask = None if geometry["mask"] is None else Operand(buffers[geometry["mask"][0]].pointer,
                                                                  *geometry["mask"][1:])
        self.out = Operand(ctx.result_buffers[0].pointer, *geometry["out"][1:])
        if self.dv > 1 and self.out.strides[-1] != 1:
            raise ctx.failure("the output's rows must be contiguous")
        self.scale = op.definition.attrs(op).scale
        self.t = Tiling.of(ctx.cpu, math.prod(self.batch_shape), sq, sk, self.dv)
        t, fn, b = self.t, self.fn, self.b
        if self.dynamic:
            self.sk_pad = b.mul(b.udiv(b.add(self.sk, i64(t.w - 1)), i64(t.w)), i64(t.w))
            self.tiles = b.udiv(b.add(self.sq, i64(t.mr - 1)), i64(t.mr))
            self.tiles_per_chunk = b.udiv(b.add(self.tiles, i64(t.chunks - 1)), i64(t.chunks))
        else:
            self.sk_pad, self.tiles, self.tiles_per_chunk = i64(t.sk_pad), i64(-(-sq // t.mr)), i64(t.tiles_per_chunk)
        self.sk_last, self.sq_last = (b.sub(self.sk, i64(1)), b.sub(self.sq, i64(1))) if self.dynamic else \
            (i64(sk - 1), i64(sq - 1))
        self.vec = ir.VectorType(FLOAT, t.w)
        self.scores = self._stack(t.mr * t.key_block, "scores")  # the block's S, then P
        self.acc = self._stack(t.mr * t.dv_pad, "out_acc")  # the rows' output, unnormalized
        self.row_max = self._stack(t.mr, "row_max")
        self.row_sum = self._stack(t.mr, "row_sum")
        self.correction = self._stack(t.mr, "correction")  # e^(m - m') of the last step
        self.vmax = [fn.alloca(self.vec, 1, f"vmax{r}") for r in range(t.mr)]
        self.tile = [[fn.alloca(self.vec, 1, f"tile{r}_{c}") for c in range(t.nv)] for r in range(t.mr)]

    def _run_time_geometry(self, geometry: dict, sq: int, sk: int) -> dict:
        """A sequence form's ``geometry`` with the length read from the sizes buffer: each offset and
        stride that is a constant times a power of it computed from it (module docstring)."""
        ctx, b = self.ctx, self.b
        size = ctx.kernel.attributes[SEQUENCE_ATTR].value
        if not sq == sk == size:
            raise ctx.failure(f"a sequence form of length {size} has {sq} queries and {sk} keys")
        other_size = next(p for p in SEQUENCE_PROBES if p != size)
        other = sequence_form(ctx.kernel, size, other_size)
        if other is None:
            raise ctx.failure(f"the sequence form does not resize from {size} to {other_size}")
        at_other = _geometry(other, ctx.failure)
        length = b.load(ctx.sizes, typ=I64, align=8)
        self.sq = self.sk = length
        self.keys = None
        powers = [i64(1), length]

        def power(p):
            while len(powers) <= p:
                powers.append(b.mul(powers[-1], length))
            return powers[p]

        def fitted(x, y):
            found = _fitted(x, y, size, other_size)
            if found is None:
                raise ctx.failure(f"an offset or stride ({x} at length {size}, {y} at {other_size}) is not a "
                                  "constant times a power of the length")
            c, p = found
            return c if p == 0 else b.mul(i64(c), power(p))

        out = {}
        for name, here in geometry.items():
            there = at_other[name]
            if here is None:
                out[name] = None
                continue
            out[name] = (here[0], fitted(here[1], there[1]), tuple(fitted(x, y) for x, y in zip(here[2], there[2])))
        return out

    def _stack(self, count: int, name: str) -> ir.Value:
        slot = self.fn.alloca(FLOAT, count, name)
        slot.type = PTR  # opaque, so vector and float accesses share the address (vectors.opaque_alloca)
        return slot

    # --- small helpers ------------------------------------------------------------------------
    def at(self, pointer, index) -> ir.Value:
        return self.b.gep(pointer, [index], inbounds=True, source_etype=FLOAT)

    def load(self, pointer, index) -> ir.Value:
        return self.b.load(self.at(pointer, index), typ=FLOAT, align=4)

    def store(self, value, pointer, index) -> None:
        self.b.store(value, self.at(pointer, index), align=4)

    def offset(self, coords, strides, base) -> ir.Value:
        """``base + sum(coords * strides)``; a stride is an int, or a value of the run-time length."""
        total = base
        for c, s in zip(coords, strides):
            if not isinstance(s, int):
                total = self.b.add(total, self.b.mul(c, s))
            elif s:
                total = self.b.add(total, self.b.mul(c, i64(s)))
        return total

    @staticmethod
    def value(x) -> ir.Value:
        """An offset or stride (an int, or a value of the run-time length) as a value."""
        return i64(x) if isinstance(x, int) else x

    def fma_into(self, slot, x, y) -> None:
        t = self.b.load(slot, typ=self.vec, align=4)
        self.b.store(call_intrinsic(self.b, "llvm.fmuladd", x, y, t), slot, align=4)

    # --- the loop nest ------------------------------------------------------------------------
    def emit(self) -> int:
        b, t = self.b, self.t
        malloc = declare(self.ctx.module, "malloc", PTR, [I64])
        free = declare(self.ctx.module, "free", VOID, [PTR])
        self.kt = b.call(malloc, [b.mul(i64(self.d * 4), self.sk_pad) if self.dynamic else i64(self.d * t.sk_pad * 4)])
        packed = self.fn.alloca(I64, 1, "packed_batch")  # whose keys kT holds: a range's chunks of one batch share them
        b.store(i64(-1), packed)
        with counted_loop(b, self.fn.begin, self.fn.end, 1, "item") as item:
            batch = b.udiv(item, i64(t.chunks))
            coords = unravel_values(b, batch, self.batch_shape) if self.batch_shape else []
            self.q_base, self.k_base, self.v_base, self.o_base = (
                self.offset(coords, x.strides[:-2], self.value(x.offset)) for x in (self.q, self.k, self.v, self.out))
            self.m_base = self.offset(coords, self.mask.strides[:-2], i64(0)) if self.mask else None
            with b.if_then(b.icmp_signed("!=", b.load(packed), batch)):
                self.pack_keys()
                b.store(batch, packed)
            first = b.mul(b.urem(item, i64(t.chunks)), self.tiles_per_chunk)
            stop = b.add(first, self.tiles_per_chunk)
            tiles = self.tiles
            with counted_loop(b, first, b.select(b.icmp_signed("<", tiles, stop), tiles, stop), 1, "tile") as tile:
                self.query_tile(b.mul(tile, i64(t.mr)))
        b.call(free, [self.kt])
        self.fn.finish()
        return math.prod(self.batch_shape) * t.chunks

    def pack_keys(self) -> None:
        """kT[dd * sk_pad + j] = k[j, dd] (keys past sk repeat the last one: their scores are
        masked).  Keys with contiguous rows go w x w blocks at a time through registers
        (``transpose_square``, as the GEMM packs a transposed B); others an element at a time."""
        b, k, t = self.b, self.k, self.t
        if k.strides[-1] != 1:
            with counted_loop(b, i64(0), self.sk_pad, 1, "pack_j") as j:
                row = self.offset([select_min(b, j, self.sk_last)], k.strides[-2:-1], self.k_base)
                with counted_loop(b, i64(0), i64(self.d), 1, "pack_d") as dd:
                    x = self.load(k.pointer, self.offset([dd], k.strides[-1:], row))
                    self.store(x, self.kt, b.add(b.mul(dd, self.sk_pad), j))
            return
        with counted_loop(b, i64(0), self.sk_pad, t.w, "pack_j") as j0:
            rows = [self.offset([select_min(b, b.add(j0, i64(i)), self.sk_last)], k.strides[-2:-1], self.k_base)
                    for i in range(t.w)]
            for d0 in range(0, self.d, t.w):
                dims = min(t.w, self.d - d0)
                lanes = None if dims == t.w else lane_mask(b, 0, i64(dims), t.w)
                block = [load_vector(b, self.at(k.pointer, b.add(row, i64(d0))), t.w, lanes) for row in rows]
                for dd, column in enumerate(transpose_square(b, block)[:dims]):
                    store_vector(b, column, self.at(self.kt, b.add(b.mul(i64(d0 + dd), self.sk_pad), j0)), None)

    def query_tile(self, r0) -> None:
        """Rows r0 .. r0 + mr (the last ones clamped to the last row, computed and not stored)."""
        b, t = self.b, self.t
        self.rows = [b.select(b.icmp_signed("<", b.add(r0, i64(r)), self.sq), b.add(r0, i64(r)), self.sq_last)
                     for r in range(t.mr)]
        self.q_rows = [self.offset([row], self.q.strides[-2:-1], self.q_base) for row in self.rows]
        for r in range(t.mr):
            self.store(ir.Constant(FLOAT, float("-inf")), self.row_max, i64(r))
            self.store(ir.Constant(FLOAT, 0.0), self.row_sum, i64(r))
        with counted_loop(b, i64(0), i64(t.mr * t.dv_pad), 1, "zero") as z:
            self.store(ir.Constant(FLOAT, 0.0), self.acc, z)
        if self.keys is None:  # key blocks up to the run-time length, the last one partial
            with counted_loop(b, i64(0), self.sk, t.key_block, "kb") as kb0:
                self.key_block(kb0, select_min(b, b.sub(self.sk, kb0), i64(t.key_block)))
        full_blocks, tail = divmod(self.keys or 0, t.key_block)
        if full_blocks:
            with counted_loop(b, i64(0), i64(full_blocks * t.key_block), t.key_block, "kb") as kb0:
                self.key_block(kb0, t.key_block)
        if tail:
            self.key_block(i64(full_blocks * t.key_block), tail)
        for r in range(t.mr):
            with b.if_then(b.icmp_signed("<", b.add(r0, i64(r)), self.sq)):
                total = self.load(self.row_sum, i64(r))
                o_row = self.offset([self.rows[r]], self.out.strides[-2:-1], self.o_base)
                with counted_loop(b, i64(0), i64(self.dv), 1, f"store{r}") as c:
                    x = self.load(self.acc, b.add(i64(r * t.dv_pad), c))
                    column = b.mul(c, self.value(self.out.strides[-1]))
                    self.store(b.fdiv(x, total), self.out.pointer, b.add(o_row, column))

    def key_block(self, kb0, keys) -> None:
        """One online-softmax step over the ``keys`` keys from ``kb0`` (an int, or a run-time value
        of at most a key block: its score tiles then all whole, the keys past the length masked)."""
        b, t = self.b, self.t
        neg_inf = splat(b, ir.Constant(FLOAT, float("-inf")), t.w)
        for r in range(t.mr):
            b.store(neg_inf, self.vmax[r], align=4)
        if not isinstance(keys, int):
            # whole tiles, then the last keys in as few vectors as they need: one branch per count
            whole = b.mul(b.udiv(keys, i64(t.tile_keys)), i64(t.tile_keys))
            with counted_loop(b, i64(0), whole, t.tile_keys, "kc") as c0:
                self.score_tile(kb0, c0, t.nv)
            vectors = b.udiv(b.add(b.sub(keys, whole), i64(t.w - 1)), i64(t.w))
            for count in range(1, t.nv + 1):
                with b.if_then(b.icmp_signed("==", vectors, i64(count))):
                    self.score_tile(kb0, whole, count)
            self.softmax_step(keys)
            self.accumulate_pv(kb0, keys)
            return
        full_chunks, tail = divmod(keys, t.tile_keys)
        if full_chunks:
            with counted_loop(b, i64(0), i64(full_chunks * t.tile_keys), t.tile_keys, "kc") as c0:
                self.score_tile(kb0, c0, t.nv)
        if tail:  # the last keys: as few vectors as they need
            self.score_tile(kb0, i64(full_chunks * t.tile_keys), -(-tail // t.w))
        self.softmax_step(i64(keys))
        self.accumulate_pv(kb0, i64(keys))

    def score_tile(self, kb0, c0, vectors: int) -> None:
        """S[r, c0 + j] for ``vectors`` vectors of keys, scaled and masked (-inf past sk), and each
        row's running vector maximum: a register tile of mr x ``vectors`` accumulators."""
        b, t, vec = self.b, self.t, self.vec
        neg_inf = splat(b, ir.Constant(FLOAT, float("-inf")), t.w)
        j0 = b.add(kb0, c0)
        for r in range(t.mr):
            for c in range(vectors):
                b.store(ir.Constant(vec, [0.0] * t.w), self.tile[r][c], align=4)
        with counted_loop(b, i64(0), i64(self.d), 1, "qk_d") as dd:
            k_row = b.add(b.mul(dd, self.sk_pad), j0)
            keys = [load_vector(b, self.at(self.kt, b.add(k_row, i64(c * t.w))), t.w, None) for c in range(vectors)]
            for r in range(t.mr):
                x = splat(b, self.load(self.q.pointer, self.offset([dd], self.q.strides[-1:], self.q_rows[r])), t.w)
                for c in range(vectors):
                    self.fma_into(self.tile[r][c], x, keys[c])
        scale = splat(b, ir.Constant(FLOAT, self.scale), t.w)
        for c in range(vectors):
            first = b.add(j0, i64(c * t.w))
            in_keys = lane_mask(b, 0, b.sub(self.sk, first), t.w)
            for r in range(t.mr):
                s = b.fmul(b.load(self.tile[r][c], typ=vec, align=4), scale)
                if self.mask is not None:
                    s = b.fadd(s, self.mask_vector(r, first, in_keys))
                s = b.select(in_keys, s, neg_inf)
                running = b.load(self.vmax[r], typ=vec, align=4)
                b.store(call_intrinsic(b, "llvm.maxnum", s, running), self.vmax[r], align=4)
                store_vector(b, s, self.at(self.scores, b.add(i64(r * t.key_block), b.add(c0, i64(c * t.w)))), None)

    def mask_vector(self, r: int, first, in_keys) -> ir.Value:
        """The mask of row r at keys first .. first + w (a broadcast when it is one per row)."""
        b, m = self.b, self.mask
        row = self.offset([self.rows[r]], m.strides[-2:-1], self.m_base)
        if m.strides[-1] == 0:  # (a row-major operand broadcast: its last stride is 1 or 0)
            return splat(b, self.load(m.pointer, row), self.t.w)
        return load_vector(b, self.at(m.pointer, b.add(row, first)), self.t.w, in_keys)

    def softmax_step(self, valid) -> None:
        """Per row: the new running max m', p = exp(S - m') over S, the running sum l and the
        factor e^(m - m') the accumulated output is rescaled by (0 where m' is -inf: all keys so
        far hidden)."""
        b, s, t = self.b, self.ctx.s, self.t
        neg_inf, zero = ir.Constant(FLOAT, float("-inf")), ir.Constant(FLOAT, 0.0)
        for r in range(t.mr):
            block_max = self.lanes_max(b.load(self.vmax[r], typ=self.vec, align=4))
            old = self.load(self.row_max, i64(r))
            new = b.select(b.fcmp_ordered(">", block_max, old), block_max, old)
            base = b.select(b.fcmp_ordered("==", new, neg_inf), zero, new)
            factor = s.exp(Scalar(b.fsub(old, base), F32)).value
            self.store(new, self.row_max, i64(r))
            self.store(factor, self.correction, i64(r))
            total = self.fn.alloca(FLOAT, 1, f"sum{r}")
            b.store(zero, total, align=4)
            with counted_loop(b, i64(0), valid, 1, f"exp{r}") as j:
                slot = b.add(i64(r * t.key_block), j)
                p = s.exp(Scalar(b.fsub(self.load(self.scores, slot), base), F32)).value
                self.store(p, self.scores, slot)
                b.store(b.fadd(b.load(total, typ=FLOAT, align=4), p, flags=("reassoc",)), total, align=4)
            previous = self.load(self.row_sum, i64(r))
            self.store(b.fadd(b.fmul(previous, factor), b.load(total, typ=FLOAT, align=4)), self.row_sum, i64(r))

    def lanes_max(self, v) -> ir.Value:
        """The largest lane of ``v`` (maxnum's: a nan lane only where all are), by halving: a tree of
        log2(w) vector maxima.  (``llvm.vector.reduce.fmax`` without ``nnan`` is a serial chain of
        scalar max, compare and blend per lane on x86: w - 1 steps of latency per row.)"""
        b = self.b
        width = v.type.count
        while width > 1:
            width //= 2
            halves = [b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), width),
                                                         list(range(first, first + width)))) for first in (0, width)]
            v = call_intrinsic(b, "llvm.maxnum", *halves)
        return b.extract_element(v, ir.Constant(ir.IntType(32), 0))

    def accumulate_pv(self, kb0, valid) -> None:
        """acc[r, :] = acc[r, :] e^(m - m') + sum_j p[r, j] v[j, :], nv vectors of v at a time."""
        b, t = self.b, self.t
        factors = [splat(b, self.load(self.correction, i64(r)), t.w) for r in range(t.mr)]
        for c_first in range(0, t.dv_pad, t.nv * t.w):
            count = min(t.nv, (t.dv_pad - c_first) // t.w)
            lanes = [None if c_first + (c + 1) * t.w <= self.dv else lane_mask(b, 0, i64(self.dv - c_first - c * t.w), t.w)
                     for c in range(count)]
            for r in range(t.mr):
                for c in range(count):
                    slot = self.at(self.acc, i64(r * t.dv_pad + c_first + c * t.w))
                    b.store(b.fmul(load_vector(b, slot, t.w, None), factors[r]), self.tile[r][c], align=4)
            with counted_loop(b, i64(0), valid, 1, "pv_j") as j:
                v_row = b.add(self.v_base, b.mul(b.add(kb0, j), self.value(self.v.strides[-2])))
                values = [load_vector(b, self.at(self.v.pointer, b.add(v_row, i64(c_first + c * t.w))), t.w, lanes[c])
                          for c in range(count)]
                for r in range(t.mr):
                    p = splat(b, self.load(self.scores, b.add(i64(r * t.key_block), j)), t.w)
                    for c in range(count):
                        self.fma_into(self.tile[r][c], p, values[c])
            for r in range(t.mr):
                for c in range(count):
                    store_vector(b, b.load(self.tile[r][c], typ=self.vec, align=4),
                                 self.at(self.acc, i64(r * t.dv_pad + c_first + c * t.w)), None)
