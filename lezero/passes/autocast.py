"""autocast: mixed precision as a graph rewrite (PyTorch's ``torch.autocast`` lists, on lz IR).

``autocast{dtype=bf16 device=cuda}`` inserts ``lz.cast`` ops so that each op runs in the element
type ``AUTOCAST_POLICY`` gives it, then folds the casts that cancel.  It runs on a forward
function before the autodiff pass, so the gradient of each cast is the cast back and the backward
is mixed precision too; the function's signature is kept (its arguments, the f32 master weights,
are cast where an op wants them low, and its results are cast back to their declared types).

**One table, two users.**  ``AUTOCAST_POLICY[device][name]`` says what an op does under autocast,
by the name the eager engine and the IR share (``matmul`` is ``lz.matmul`` and the eager op of
it; ``linear``, ``nll_loss``, ``group_norm`` are eager ops only, which the eager hook
``lezero.eager.autocast`` casts at their inputs before they become lz ops).  The lists are
PyTorch's, per device type, because users expect ``torch.autocast``'s types: on the CPU only the
contractions go low and the losses and ``prod`` go to f32 (softmax, layer_norm, sum, exp stay in
their input's type, as ``torch.autocast("cpu")`` leaves them); on cuda, softmax, log_softmax,
layer/group norm, sum, cumsum, exp, log, pow, rsqrt and the losses run in f32.

- ``LOWER``: every float operand but f64 becomes the low type (matmul, conv, linear, bmm,
  attention); the contraction accumulates in f32 and rounds its result once (the kernels' and the
  reference's accumulator, ``lezero.ir.dialect.numerics``).
- ``FLOAT32``: f16/bf16 operands become f32, and so does the result.
- ``STATISTICS``: runs in f32 and gives its first result in its first operand's type
  (batch norm with f32 running statistics on a bf16 input, as PyTorch's kernels do).
- ``PROMOTE`` (also any op the table does not name whose float operands now differ, such as a
  bias ``add`` after a low matmul): the float operands become the widest of them.

Ops with regions (``lz.for``, ``lz.if``, ``lz.kernel``) keep the operand types their regions were
built for.  ``--debug=autocast`` logs each op's decision and why.
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.builder import Builder
from lezero.ir.core import FuncOp, ModuleOp, Operation, Value
from lezero.ir.diagnostics import IRError
from lezero.ir.opdef import OpError
from lezero.ir.types import BF16, F16, F32, F64, TensorType
from lezero.passes.dce import erase_dead_ops
from lezero.passes.pass_base import Pass, debug_channel, option

LOWER, FLOAT32, STATISTICS, PROMOTE = "lower", "float32", "statistics", "promote"

_LOWER_EVERYWHERE = ("matmul", "conv2d", "conv3d", "conv_transpose2d", "linear", "addmm", "baddbmm", "attention")
_PROMOTE_EVERYWHERE = ("add", "sub", "mul", "div", "max", "min", "rem", "select", "concat", "cat", "cmp")
_LOSSES = ("nll_loss", "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss", "kl_div",
           "huber_loss", "cross_entropy")

# device type -> {op name: what it does under autocast}; PyTorch's lists (aten/src/ATen/autocast_mode.cpp)
# restricted to the ops lezero has
AUTOCAST_POLICY: dict[str, dict[str, str]] = {
    "cpu": {**{n: LOWER for n in _LOWER_EVERYWHERE},
            **{n: PROMOTE for n in _PROMOTE_EVERYWHERE},
            **{n: FLOAT32 for n in _LOSSES + ("reduce_prod",)},
            **{n: STATISTICS for n in ("layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm")}},
    "cuda": {**{n: LOWER for n in _LOWER_EVERYWHERE + ("rnn_step", "lstm_step", "gru_step")},
             **{n: PROMOTE for n in _PROMOTE_EVERYWHERE},
             **{n: FLOAT32 for n in _LOSSES + (
                 "softmax", "log_softmax", "layer_norm", "group_norm", "reduce_sum", "reduce_prod", "cumulative",
                 "exp", "expm1", "log", "log1p", "pow", "rsqrt", "reciprocal", "acos", "asin", "cosh", "sinh",
                 "tan", "total_norm")},
             **{n: STATISTICS for n in ("batch_norm", "instance_norm")}},
}

LOW_TYPES = {"bf16": BF16, "f16": F16}
_WIDTH = {F16: 1, BF16: 1, F32: 2, F64: 3}
# (from, to) conversions that are exact, so casting back after them gives the value again
_EXACT_WIDENING = {(BF16, F32), (F16, F32), (BF16, F64), (F16, F64), (F32, F64)}

_log = debug_channel("autocast")


def policy_of(device: str, name: str) -> str | None:
    """What the op called ``name`` (``lz.`` prefix or not) does under ``device``'s autocast."""
    try:
        table = AUTOCAST_POLICY[device]
    except KeyError:
        raise ValueError(f"autocast: unknown device type '{device}' (known: {', '.join(AUTOCAST_POLICY)})") from None
    return table.get(name[3:] if name.startswith("lz.") else name)


def operand_types_for(policy: str | None, types: list, low) -> list:
    """The element type each operand should have before the op runs (``None``: not a float, or left
    as it is), for operand element types ``types`` (``None`` for a non-tensor) and low type ``low``."""
    floats = {t for t in types if t is not None and t.is_float}
    if policy == LOWER:
        return [low if t in floats and t != F64 else None for t in types]
    if policy in (FLOAT32, STATISTICS):
        return [F32 if t in (F16, BF16) else None for t in types]
    if policy == PROMOTE or len(floats) > 1:  # an op the table leaves alone runs in one float type too
        widest = max(floats, key=_WIDTH.__getitem__, default=None)
        if widest in (F16, BF16) and {F16, BF16} <= floats:
            widest = F32  # neither half type holds the other: PyTorch promotes them to f32
        return [widest if t in floats else None for t in types]
    return [None] * len(types)


def cast_to(b: Builder, value: Value, element_type) -> Value:
    if value.type.element_type == element_type:
        return value
    return b.op("lz.cast", value, to=element_type)


def autocast_function(func: FuncOp, low, device: str) -> int:
    """Rewrite ``func`` in place (see the module docstring); return how many ops changed type.

    Values whose type changed are cast back to their old type where something that cannot take
    another type reads them: ``func.return`` (the signature is kept), an op with regions, an op
    inside a region (it was built for the old type)."""
    block = func.entry_block
    original = {r: r.type for op in block.ops for r in op.results}
    casts: dict = {}  # (value, element type) -> its cast, made once (a weight read by two matmuls)
    changed = sum(_autocast_op(op, low, device, casts) for op in list(block.ops)
                  if op.name != "func.return" and not op.regions)
    for op in list(block.ops):
        for result in op.results:
            old = original.get(result)
            if old is None or result.type == old:
                continue
            fixed = [u for u in list(result.uses) if u.op.parent is not block or u.op.regions]
            if fixed:
                back = Builder(block, block.index_of(op) + 1, op.location).op("lz.cast", result, to=old.element_type)
                for use in fixed:
                    use.op.set_operand(use.index, back)
    returned = func.return_op
    b = Builder.before(returned)
    returned.set_operands([cast_to(b, v, t.element_type) if isinstance(t, TensorType) else v
                           for v, t in zip(returned.operands, func.function_type.results)])
    fold_casts(func)
    erase_dead_ops(func)
    return changed


def _autocast_op(op: Operation, low, device: str, casts: dict) -> int:
    """Cast ``op``'s operands as its policy says and infer its results again; 1 if it changed."""
    definition = op.definition
    if definition is None or not op.results:
        return 0
    policy = policy_of(device, op.name)
    types = [v.type.element_type if isinstance(v.type, TensorType) else None for v in op.operands]
    wanted = operand_types_for(policy, types, low)
    b = Builder.before(op)
    for i, (v, w) in enumerate(zip(op.operands, wanted)):
        if w is not None and w != v.type.element_type:
            if (v, w) not in casts:
                casts[v, w] = cast_to(b, v, w)
            op.set_operand(i, casts[v, w])
    before = [r.type for r in op.results]
    try:  # also for an op whose operands an earlier op's new type reached (a relu after a low matmul)
        inferred = definition.infer([v.type for v in op.operands], definition.attrs(op))
    except OpError as e:
        raise IRError(f"autocast: '{op.name}' op cannot run on {', '.join(str(v.type) for v in op.operands)} "
                      f"({policy or 'no policy'}): {e}", op.location) from None
    for result, t in zip(op.results, inferred):
        if isinstance(result.type, TensorType) and isinstance(t, TensorType):
            result.type = result.type.with_element_type(t.element_type)  # the declared shape stays
    if [r.type for r in op.results] == before and all(w is None or w == t for w, t in zip(wanted, types)):
        return 0
    first = op.results[0]
    if policy == STATISTICS and types[0] is not None and first.type.element_type != types[0]:
        uses = list(first.uses)
        block = op.parent
        back = Builder(block, block.index_of(op) + 1, op.location).op("lz.cast", first, to=types[0])
        for use in uses:
            use.op.set_operand(use.index, back)
    _log.debug("%s at %s: runs in %s (%s)", op.name, op.location,
               ", ".join(str(w or t) for w, t in zip(wanted, types) if t is not None),
               policy or "operand types differ: promoted to the widest")
    return 1


def fold_casts(func: FuncOp) -> int:
    """Remove the casts that cancel: a cast to the type its operand has, and the outer of two
    casts whose inner one is exact (bf16 -> f32 -> bf16 is the value again; f32 -> bf16 -> f32 is
    not, it rounds)."""
    folded = 0
    for op in list(func.walk()):
        if op.name != "lz.cast" or op.parent is None:
            continue
        source = op.operands[0]
        inner = getattr(source, "op", None)
        if inner is not None and inner.name == "lz.cast":
            origin = inner.operands[0]
            if (origin.type.element_type, source.type.element_type) in _EXACT_WIDENING:
                op.set_operand(0, origin)
                source = origin
                folded += 1
        if source.type.element_type == op.results[0].type.element_type and source.type == op.results[0].type:
            op.results[0].replace_all_uses_with(source)
            folded += 1
    return folded


@dataclass
class Autocast(Pass):
    name = "autocast"
    summary = "Mixed precision: cast each op's operands to the type PyTorch's autocast lists give it"
    dtype: str = option("bf16", "the low type: bf16 or f16")
    device: str = option("cuda", "whose lists: cpu or cuda (torch.autocast's device_type)")

    def run(self, module: ModuleOp) -> None:
        low = LOW_TYPES.get(self.dtype)
        if low is None:
            raise IRError(f"autocast: dtype must be one of {', '.join(LOW_TYPES)}, got '{self.dtype}'")
        policy_of(self.device, "")  # an unknown device fails here
        for func in module.functions:
            autocast_function(func, low, self.device)
