"""blocked-layout: convolutions of a float32 net over channel-blocked activations (issue 11 item 3).

Each ``lz.conv2d`` that the blocked kernel serves well (below) becomes one ``lz.kernel`` of kind
``conv_blocked`` holding an ``lz.conv2d_blocked`` with its epilogue: the chain

    y = lz.conv2d(x, w)                   w a constant, one group, no dilation, float32
    y = y + bias                          optional, a constant of O values broadcast over pixels
    y = y * scale [+ shift]               optional, repeated, constants of O values: a batch norm
                                          left unfolded (the light ONNX models'), folded into w, bias
    y = y + residual | residual + y       optional, any value of y's shape
    y = lz.relu(y)                        optional

each intermediate read by the next op only.  Its input and residual are converted to the blocked
layout (``dialect.blocked.to_blocked``) and its result back (``from_blocked``), both ordinary ops
that partition makes kernels of; but a value that is already the conversion of a blocked kernel's
result is read blocked, so a region of convs (ResNet's stages, their residual adds in the
epilogues) converts once where it starts and once where a reader outside it (pooling, the head)
needs NCHW.  A mean over the pixels of a blocked result (ResNet's global average pool) is taken
over the blocked tensor, and only its C values are converted back.  The conversions that nobody
reads any more are left for ``dce``.  The kernel is final: partition and fuse leave existing
kernels alone.

Max pools and channel concats of blocked values join their region (vgg's pools between its
stages, squeezenet's and inception's concats of branches), so the region does not end there: a
max pool becomes one kernel of ``lz.max_pool2d_blocked``, and a concat whose inputs' channels are
whole blocks an ``lz.concat`` of the blocked inputs over the ``C/c`` axis (the blocked form of the
NCHW concat; a concat of other channel counts stays NCHW, its reason logged).  A concat's input
that no blocked op makes (inception's branch after an NCHW average pool) is converted as a conv's
input is, and counts as a conversion of the region.

The choice is a rule from what ``benchmarks/conv_nchwc.py`` measured (chains of 4 convs, 1 thread,
Zen 4: 0.82-0.97x the NCHW kernels' time, 0.95-1.03x ORT's): a conv is blocked when padding its
input and output channels to whole blocks adds at most ``MAX_PADDED_LANES`` of work (the 3-channel
stem would compute 16 of 3) and its image is at least one tap wide.  Regions are not weighed
against their conversions yet.  ``--debug=layout`` logs the verdict and its reason for every conv.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lezero.ir.attributes import StringAttr
from lezero.ir.builder import Builder
from lezero.ir.core import Block, ModuleOp, Operation, Region, Value
from lezero.ir.dialect.axes import normalize_axis, reduction_axes
from lezero.ir.dialect.blocked import blocks, from_blocked, to_blocked
from lezero.ir.dialect.windows import window_output_size
from lezero.ir.types import F32
from lezero.passes.constant_fold import constant_value
from lezero.passes.fuse import KernelNamer
from lezero.passes.pass_base import Pass, debug_channel, option

LAYOUT_LOG = debug_channel("layout")
# A region of convs reading each other's outputs is blocked when it needs at most this many
# conversions (values converted in or out) per conv: each costs a pass over an activation, each conv
# gains ~10% (ResNet-18: 19 convs, 2 conversions; a mobile net's pointwise convs between depthwise
# ones: 1-2 convs, 2-4 conversions, which made mobilenet_v2 1.25x and efficientnet_b0 1.69x slower).
MAX_CONVERSIONS_PER_CONV = 0.5
# The most work that padding a conv's channels to whole blocks may add (1.25: 20 of 16 lanes).
MAX_PADDED_LANES = 1.25


@dataclass(frozen=True)
class ConvChain:
    """The ops of one conv and its epilogue, and what the blocked op reads."""

    ops: tuple
    x: Value
    w: Value
    bias: np.ndarray | None
    residual: Value | None
    relu: bool
    scale: np.ndarray | None = None  # per output channel, folded into the weights

    @property
    def output(self) -> Value:  # what the chain's readers read
        return self.ops[-1].result


def describe(conv: Operation) -> str:
    shape, w = conv.result.type.shape, conv.operands[1].type.shape
    return f"{w[2]}x{w[3]} {w[1]}->{w[0]} at {shape[2]}x{shape[3]}"


def reads(member) -> tuple:
    """The values a region's member reads: a chain's input and residual, a pool's or concat's operands."""
    if isinstance(member, ConvChain):
        return tuple(v for v in (member.x, member.residual) if v is not None)
    return tuple(member.operands)


def output(member) -> Value:
    return member.output if isinstance(member, ConvChain) else member.result


def regions(members: list) -> list[list]:
    """The members (conv chains, max pools, concats) in groups that read each other's outputs, in
    order."""
    index = {id(output(m)): i for i, m in enumerate(members)}
    parent = list(range(len(members)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for j, member in enumerate(members):
        for v in reads(member):
            if id(v) in index:
                parent[root(j)] = root(index[id(v)])
    groups: dict = {}
    for i, member in enumerate(members):
        groups.setdefault(root(i), []).append(member)
    return list(groups.values())


def _global_mean(op: Operation) -> bool:
    """Whether ``op`` is a mean over the pixels of NCHW (taken over the blocks: C values converted)."""
    return op.name == "lz.reduce_mean" and reduction_axes(op.definition.attrs(op).axes, 4) == (2, 3)


def region_conversions(region: list) -> int:
    """The conversions a region of blocked members needs: each value it reads from outside, and
    each output that something other than the region's members and global means reads."""
    outputs = {id(output(m)) for m in region}
    inside_reads = {id(op) for m in region for op in (m.ops if isinstance(m, ConvChain) else (m,))}
    reads_in = {id(v) for m in region for v in reads(m) if id(v) not in outputs}
    reads_out = sum(any(id(user) not in inside_reads and not _global_mean(user) for user in output(m).users)
                    or not output(m).users for m in region)
    return len(reads_in) + reads_out


def joining_refusal(op: Operation, block: int) -> str | None:
    """Why a max pool or concat that reads a blocked value stays NCHW, or None."""
    x = op.operands[0]
    if x.type.element_type != F32 or not all(v.type.is_static for v in op.operands):
        return "not a static f32 tensor"
    attrs = op.definition.attrs(op)
    if op.name == "lz.max_pool2d":
        if tuple(attrs.dilations) != (1, 1):
            return f"dilations {list(attrs.dilations)}"
        (kh, kw), (sh, sw), (top, left, bottom, right) = attrs.kernel, attrs.strides, attrs.pads
        if op.result.type.shape[2:] != (window_output_size(x.type.shape[2], kh, sh, top, bottom),
                                        window_output_size(x.type.shape[3], kw, sw, left, right)):
            return "ceil mode adds a window"
        return None
    if x.type.rank != 4 or normalize_axis(attrs.axis, 4) != 1:
        return f"not over the channels of NCHW tensors (axis {attrs.axis} of rank {x.type.rank})"
    for i, v in enumerate(op.operands):
        if v.type.shape[1] % block:
            return f"input {i} has {v.type.shape[1]} channels, not whole blocks of {block}"
    return None


def refusal(conv: Operation, block: int) -> str | None:
    """Why ``conv`` stays NCHW, or None."""
    x, w = conv.operands
    attrs = conv.definition.attrs(conv)
    if x.type.element_type != F32:
        return f"{x.type.element_type}, not f32"
    if not x.type.is_static or x.type.shape[0] is None:
        return "dynamic shape"
    if attrs.groups != 1:
        return f"{attrs.groups} groups"
    if tuple(attrs.dilations) != (1, 1):
        return f"dilations {list(attrs.dilations)}"
    if constant_value(w) is None:
        return "weights not a constant"
    o, c = w.type.shape[:2]
    for what, channels in (("input", c), ("output", o)):
        if blocks(channels, block) * block > MAX_PADDED_LANES * channels:
            return f"{channels} {what} channels fill {channels} of {blocks(channels, block) * block} lanes"
    return None


def _blocked(v: Value, blocked_of: dict) -> Value | None:
    """The blocked value whose conversion ``v`` is, if a blocked kernel made it."""
    entry = blocked_of.get(id(v))
    return entry[1] if entry is not None and entry[0] is v else None


def _producer(v: Value, name: str) -> Operation | None:
    op = getattr(v, "op", None)
    return op if op is not None and op.name == name else None


def _perm(transpose: Operation) -> tuple | None:
    perm = transpose.definition.attrs(transpose).perm  # None: the dims reversed
    return tuple(perm) if perm is not None else None


def round_trip_source(transpose: Operation) -> Value | None:
    """v where ``transpose`` ends ``to_blocked(from_blocked(v))``, else None.  With channels cut
    and padded back (zeros) that is v only where v's padding channels are zeros: v must then be a
    blocked kernel's result."""
    if _perm(transpose) != (0, 1, 3, 4, 2):
        return None
    reshape = _producer(transpose.operands[0], "lz.reshape")
    if reshape is None:
        return None
    v = reshape.operands[0]
    pad = _producer(v, "lz.pad")
    v = pad.operands[0] if pad is not None else v
    cut = _producer(v, "lz.slice")
    v = cut.operands[0] if cut is not None else v
    inner = _producer(v, "lz.reshape")
    back = _producer(inner.operands[0], "lz.transpose") if inner is not None else None
    if back is None or _perm(back) != (0, 1, 4, 2, 3):
        return None
    source = back.operands[0]
    if source.type != transpose.result.type or back.result.type != reshape.result.type:
        return None
    if cut is not None or pad is not None:
        kernel = getattr(source, "op", None)
        if kernel is None or kernel.name != "lz.kernel" or kernel.definition.attrs(kernel).kind != "conv_blocked":
            return None
        cut_attrs = cut.definition.attrs(cut) if cut is not None else None
        if cut is None or tuple(cut_attrs.starts) != (0,) or tuple(cut_attrs.axes or ()) != (1,) \
                or cut_attrs.steps not in (None, (1,)):
            return None
        if pad is None or list(pad.definition.attrs(pad).pads) != \
                [0, 0, 0, 0, 0, source.type.shape[1] * source.type.shape[4] - cut.result.type.shape[1], 0, 0] \
                or pad.definition.attrs(pad).value != 0:
            return None
    return source


def global_mean_of_blocks(mean: Operation, blocked_of: dict) -> None:
    """A mean over the pixels of a blocked kernel's result (ResNet's global average pool) taken
    over the blocked tensor, so that only its C values are converted back, not C x H x W."""
    x = mean.operands[0]
    source = _blocked(x, blocked_of)
    attrs = mean.definition.attrs(mean)
    if source is None or reduction_axes(attrs.axes, x.type.rank) != (2, 3):
        return
    b = Builder.before(mean)
    y = from_blocked(b, b.op("lz.reduce_mean", source, axes=[2, 3], keepdims=True), x.type.shape[1])
    if not attrs.keepdims:
        y = b.op("lz.reshape", y, shape=list(mean.result.type.shape))
    LAYOUT_LOG.debug("blocked global mean at %s: %d values converted back", mean.location, x.type.shape[1])
    mean.result.replace_all_uses_with(y)
    mean.erase()


def _single_user(v: Value) -> Operation | None:
    users = v.users
    return users[0] if len(users) == 1 and len(v.uses) == 1 else None


def match_chain(conv: Operation, claimed: set = frozenset()) -> ConvChain:
    """``conv`` and the epilogue ops after it that the blocked op computes, none of ``claimed`` (ids
    of ops an earlier chain computes: ``conv2 + shortcut`` is the epilogue of one of the two)."""
    ops, bias, residual, relu = [conv], None, None, False
    o = conv.operands[1].type.shape[0]
    y = conv.result
    scale = None

    def _only_user(v):
        user = _single_user(v)
        return None if user is None or id(user) in claimed else user

    def per_channel(user, name):
        """The O values of ``user`` (an op ``name`` of y and a constant [1, O, 1, 1]), or None."""
        if user is None or user.name != name or user.result.type != y.type:
            return None
        other = user.operands[1] if user.operands[0] is y else user.operands[0]
        value = constant_value(other)
        if value is None or other.type.shape not in ((1, o, 1, 1), (o, 1, 1)):
            return None
        return np.asarray(value.array, np.float32).reshape(o)

    def take(op):
        nonlocal y, user
        ops.append(op)
        y = op.result
        user = _only_user(y)

    # conv [+ bias] [* scale [+ shift]]: a batch norm left unfolded (the light ONNX models'), its
    # scale folded into the weights, its shift into the bias
    user = _only_user(y)
    values = per_channel(user, "lz.add")
    if values is not None:
        bias = values
        take(user)
    values = per_channel(user, "lz.mul")
    while values is not None:  # more than one: a batch norm then a scale layer (light inception_v2's)
        scale, bias = values if scale is None else scale * values, None if bias is None else bias * values
        take(user)
        values = per_channel(user, "lz.add")
        if values is not None:
            bias = values if bias is None else bias + values
            take(user)
        values = per_channel(user, "lz.mul")
    if user is not None and user.name == "lz.add" and user.operands[0].type == user.operands[1].type == y.type \
            and not (user.operands[0] is y and user.operands[1] is y):
        residual = user.operands[1] if user.operands[0] is y else user.operands[0]
        take(user)
    if user is not None and user.name == "lz.relu":
        ops.append(user)
        relu = True
    return ConvChain(tuple(ops), conv.operands[0], conv.operands[1], bias, residual, relu, scale)


@dataclass
class BlockedLayout(Pass):
    name = "blocked-layout"
    summary = "Run float32 convs over channel-blocked activations (NCHW16c), one kernel each with its epilogue"

    block: int = option(16, "channels per block: the target's float vector width (16 AVX-512, 8 AVX2)")

    def run(self, module: ModuleOp) -> None:
        names = KernelNamer(module)
        for f in module.functions:
            blocked_of: dict[int, tuple] = {}  # id of a from_blocked result -> (it, the blocked value)
            members, claimed, outputs = [], set(), set()  # in program order: chains, pools, concats
            for op in f.entry_block.ops:
                if op.name in ("lz.max_pool2d", "lz.concat") and any(id(v) in outputs for v in op.operands):
                    why = joining_refusal(op, self.block)
                    if why is not None:
                        LAYOUT_LOG.debug("NCHW %s at %s: %s", op.name, op.location, why)
                        continue
                    members.append(op)
                elif op.name == "lz.conv2d":
                    why = refusal(op, self.block)
                    if why is not None:
                        LAYOUT_LOG.debug("NCHW conv %s at %s: %s", describe(op), op.location, why)
                        continue
                    members.append(match_chain(op, claimed))
                    claimed.update(id(o) for o in members[-1].ops)
                else:
                    continue
                outputs.add(id(output(members[-1])))
            taken = set()
            for region in regions(members):
                conversions, convs = region_conversions(region), sum(isinstance(m, ConvChain) for m in region)
                verdict = "blocked" if conversions <= convs * MAX_CONVERSIONS_PER_CONV else "NCHW"
                LAYOUT_LOG.debug("%s region of %d convs and %d pools or concats from %s: %d conversions (at most "
                                 "%.2f per conv)", verdict, convs, len(region) - convs, region[0].ops[0].location,
                                 conversions, MAX_CONVERSIONS_PER_CONV)
                if verdict == "blocked":
                    taken.update(id(m) for m in region)
            for member in members:
                if id(member) not in taken:
                    continue
                if not isinstance(member, ConvChain):
                    self.rewrite_joining(member, names, blocked_of)
                    continue
                chain = match_chain(member.ops[0])  # its input and residual: the blocked chains' conversions now
                LAYOUT_LOG.debug("blocked conv %s at %s (epilogue %s), input %s", describe(chain.ops[0]),
                                 chain.ops[0].location, " ".join(o.name for o in chain.ops[1:]) or "none",
                                 "blocked already" if _blocked(chain.x, blocked_of) else "converted")
                self.rewrite(chain, names, blocked_of)
            for op in list(f.entry_block.ops):
                if op.parent is not None and op.name == "lz.transpose":
                    source = round_trip_source(op)
                    if source is not None:  # a residual converted before its conv was blocked
                        op.result.replace_all_uses_with(source)
                elif op.parent is not None and op.name == "lz.reduce_mean":
                    global_mean_of_blocks(op, blocked_of)

    def blocked(self, v: Value, blocked_of: dict, location) -> Value:
        """v blocked: a blocked op's result, or its conversion (once, right after v is defined, so
        that every reader of v may read it)."""
        found = _blocked(v, blocked_of)
        if found is None:
            owner = getattr(v, "op", None)
            block = owner.parent if owner is not None else v.block
            at = Builder(block, block.index_of(owner) + 1 if owner is not None else 0, location)
            found = to_blocked(at, v, self.block)
            blocked_of[id(v)] = (v, found)
        return found

    def rewrite_joining(self, op: Operation, names: KernelNamer, blocked_of: dict) -> None:
        """A max pool as one kernel of ``lz.max_pool2d_blocked``, a concat as the concat of its
        blocked inputs; their readers read the conversion of the result."""
        sources = [self.blocked(v, blocked_of, op.location) for v in op.operands]
        b = Builder.before(op)
        if op.name == "lz.concat":
            result = b.op("lz.concat", *sources, axis=1)
            LAYOUT_LOG.debug("blocked concat of %d inputs at %s", len(sources), op.location)
        else:
            attrs = op.definition.attrs(op)
            body = Block()
            inner = Builder.at_end(body, op.location)
            pooled = inner.op("lz.max_pool2d_blocked", body.add_argument(sources[0].type), kernel=list(attrs.kernel),
                              strides=list(attrs.strides), pads=list(attrs.pads))
            inner.create("lz.yield", [pooled], result_types=[])
            kernel = Operation("lz.kernel", sources, [pooled.type],
                               {"kind": StringAttr("single"), "name": StringAttr(names.next("lz_max_pool2d_blocked"))},
                               [Region([body])], op.location)
            b.insert(kernel)
            result = kernel.result
            LAYOUT_LOG.debug("blocked max pool %s at %s", "x".join(map(str, attrs.kernel)), op.location)
        plain = from_blocked(b, result, op.result.type.shape[1])
        blocked_of[id(plain)] = (plain, result)
        op.result.replace_all_uses_with(plain)
        op.erase()

    def rewrite(self, chain: ConvChain, names: KernelNamer, blocked_of: dict) -> None:
        c = self.block
        conv = chain.ops[0]

        def blocked(v: Value) -> Value:
            return self.blocked(v, blocked_of, conv.location)

        o = chain.w.type.shape[0]
        bias = np.zeros(blocks(o, c) * c, np.float32)
        if chain.bias is not None:
            bias[:o] = chain.bias
        sources = [blocked(chain.x)] + ([blocked(chain.residual)] if chain.residual is not None else [])
        b = Builder.before(chain.ops[-1])  # after the conversions the lines above may have inserted
        w = chain.w
        if chain.scale is not None:
            w = b.constant(np.asarray(constant_value(w).array, np.float32) * chain.scale.reshape(o, 1, 1, 1))
        operands = [sources[0], w, b.constant(bias)] + sources[1:]
        attrs = conv.definition.attrs(conv)
        body = Block()
        args = [body.add_argument(v.type) for v in operands]
        inner = Builder.at_end(body, conv.location)
        result = inner.op("lz.conv2d_blocked", *args, strides=list(attrs.strides), pads=list(attrs.pads),
                          relu=chain.relu)
        inner.create("lz.yield", [result], result_types=[])
        kernel = Operation("lz.kernel", operands, [result.type],
                           {"kind": StringAttr("conv_blocked"), "name": StringAttr(names.next("lz_conv2d_blocked"))},
                           [Region([body])], conv.location)
        b.insert(kernel)
        plain = from_blocked(b, kernel.result, o)
        blocked_of[id(plain)] = (plain, kernel.result)
        chain.output.replace_all_uses_with(plain)
        for op in reversed(chain.ops):
            op.erase()
