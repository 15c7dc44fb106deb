"""bucket-all-reduce: a function's ``lz.all_reduce`` ops as DDP's buckets of start/wait pairs.

A compiled data-parallel training step says which values every rank averages (its gradients:
one ``lz.all_reduce {op = "avg"}`` each, in parameter order); this pass decides how and when:

1. **Buckets, DDP's**: the all-reduces in reverse program order (reverse parameter order, the
   order the backward pass produces the gradients in), a new bucket when the next one would
   take it over ``bucket-bytes`` (PyTorch's ``bucket_cap_mb``, 25 MiB) or has another element
   type or reduction; a bucket of several values is one flat array (``lz.reshape`` to 1-d, an
   ``lz.concat``): one collective per bucket, as DDP's flat bucket views.
2. **The start right after the last producer**: the bucket's concat and its
   ``lz.all_reduce_start`` go right after the op that computes the last of its values (in
   program order; the kernels' schedule keeps that place: a start's topological generation is
   the one after its producer's).
3. **The wait right before the first consumer**: ``lz.all_reduce_wait`` and the slices giving
   each value back its shape go right before the first op reading any of the bucket's results
   (the optimizer's update).  Each wait also takes the token of the last start before it, so
   every bucket is in flight before any wait blocks (what DDP's end of backward does): without it
   the schedule's topological generations would put a wait right after its start, and nothing
   would overlap.

``bucket-order`` is the bucket index of each start in order (``tag = "bucket<k>"``, the name the
process group's mismatch check shows).  After this pass the memory planner keeps each bucket's
flat buffer alive from its start to its wait (the wait reads it), and the runtime reduces it in
place meanwhile (``lezero/ir/dialect/collective.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.builder import Builder
from lezero.ir.core import Block, ModuleOp, Operation, Value
from lezero.ir.dialect.collective import ALL_REDUCE, START, WAIT
from lezero.passes.pass_base import Pass, option

DEFAULT_BUCKET_BYTES = 25 * 2 ** 20  # DDP's bucket_cap_mb=25


def _buckets(reduces: list[Operation], cap: int) -> list[list[Operation]]:
    """DDP's bucketing of ``reduces`` (given in parameter order): reverse order, split at ``cap``
    bytes, at a change of element type or reduction."""
    buckets: list[list[Operation]] = []
    size = 0
    for op in reversed(reduces):
        t = op.operands[0].type
        if not buckets or size + t.nbytes > cap or _kind(buckets[-1][-1]) != _kind(op):
            buckets.append([])
            size = 0
        buckets[-1].append(op)
        size += t.nbytes
    return buckets


def _kind(op: Operation) -> tuple:
    return op.operands[0].type.element_type, op.attributes["op"].value if "op" in op.attributes else "sum"


def bucket_function_reduces(block: Block, cap: int) -> list[Operation]:
    """Rewrite the ``lz.all_reduce`` ops of ``block`` (see the module docstring); the starts made,
    in bucket order."""
    reduces = [op for op in block.ops if op.name == ALL_REDUCE]
    if not reduces:
        return []
    position = {id(op): i for i, op in enumerate(block.ops)}

    def produced_at(v: Value) -> int:
        return position[id(v.owner)] if isinstance(v.owner, Operation) and id(v.owner) in position else -1

    starts = []
    plans = []
    for k, bucket in enumerate(_buckets(reduces, cap)):
        values = [op.operands[0] for op in bucket]
        last = max(values, key=produced_at)
        anchor = last.owner if produced_at(last) >= 0 else None
        b = Builder(block, block.index_of(anchor) + 1 if anchor is not None else 0, bucket[0].location)
        if len(values) == 1:
            flat = values[0]
        else:
            flat = b.op("lz.concat", *[v if v.type.rank == 1 else b.op("lz.reshape", v, shape=[v.type.num_elements])
                                       for v in values], axis=0)
        attrs = bucket[0].attributes
        token = b.op(START, flat, op=attrs["op"].value if "op" in attrs else "sum", tag=f"bucket{k}")
        starts.append(token.owner)
        plans.append((bucket, flat, token))
    position = {id(op): i for i, op in enumerate(block.ops)}
    for bucket, flat, token in plans:
        readers = [u.op for op in bucket for u in op.result.uses]
        first = min(readers, key=lambda o: position[id(o)]) if readers else block.terminator
        before = position[id(first)]
        earlier = [s for s in starts if s is not token.owner and position[id(s)] < before]
        after = [max(earlier, key=lambda s: position[id(s)]).result] if earlier else []
        b = Builder.before(first, bucket[0].location)
        reduced = b.op(WAIT, token, flat, *after)
        offset = 0
        for op in bucket:
            t = op.result.type
            value = reduced
            if len(bucket) > 1:
                value = b.op("lz.slice", reduced, starts=[offset], ends=[offset + t.num_elements], axes=[0])
                value = value if t.rank == 1 else b.op("lz.reshape", value, shape=list(t.shape))
            offset += t.num_elements
            op.result.replace_all_uses_with(value)
        for op in bucket:  # after the inserts: erasing shifts the builder's place
            op.erase()
    return starts


@dataclass
class BucketAllReduce(Pass):
    name = "bucket-all-reduce"
    summary = ("Group a function's lz.all_reduce ops into DDP's buckets: a start after each bucket's last "
               "producer, a wait before its first consumer")

    bucket_bytes: int = option(DEFAULT_BUCKET_BYTES, "the bytes of a bucket (DDP's bucket_cap_mb * 2**20)")

    def run(self, module: ModuleOp) -> None:
        for func in module.functions:
            bucket_function_reduces(func.entry_block, self.bucket_bytes)

