"""Converters of ONNX's recurrent layers: ``LSTM``, ``GRU`` and ``RNN``, each direction one
``lz.for`` over the time steps (a loop, not unrolled: the compile time does not grow with the
sequence).

ONNX Runtime's plan: the input projection of every step is one GEMM over the whole sequence
(``X @ W^T`` plus the biases that fold into it), outside the loop; the loop's body does only the
recurrent GEMM and the gates of one step.  The weights (transposed once, at import when they are
initializers) enter the body as invariant operands, the projected inputs as its scanned input.

ONNX's gate orders, which differ from PyTorch's: LSTM ``i, o, f, c`` (peepholes ``P`` are
``i, o, f``), GRU ``z, r, h``.  The GRU's ``linear_before_reset = 0`` applies ``R_h`` to
``r * H`` (a second recurrent GEMM per step, ``R_bh`` folded into the projection); ``= 1`` to
``H`` (one GEMM, ``R_bh`` inside ``r * (H R_h^T + R_bh)``).

``sequence_lens``: a scanned mask ``t < len`` per step; where it is false the state keeps its value
and the output is zero.  That is ONNX's semantics in both directions: the reverse loop starts each
sequence at its own last step, since the steps past its end leave the initial state as it was.
Every attribute of the operators is read: ``direction``, ``layout``, ``clip`` (on every gate's
pre-activation), ``input_forget`` (``f = 1 - i``), ``activations`` with ``activation_alpha``/``beta``
(consumed, as ONNX Runtime does, by the activations that take them, in order).
"""
from __future__ import annotations

import numpy as np

from lezero.ir.dialect.control_flow import INDEX_TYPE
from lezero.ir.types import I64, TensorType
from lezero.onnx.ops.control_flow import region, structured
from lezero.onnx.registry import converter

# name -> (number of parameters, their defaults, the function of (ctx, x, alpha, beta))
ACTIVATIONS = {
    "sigmoid": (0, (), lambda c, x, a, b: c.op("lz.sigmoid", x)),
    "tanh": (0, (), lambda c, x, a, b: c.op("lz.tanh", x)),
    "relu": (0, (), lambda c, x, a, b: c.op("lz.relu", x)),
    "affine": (2, (1.0, 0.0), lambda c, x, a, b: _affine(c, x, a, b)),
    "leakyrelu": (1, (0.01,), lambda c, x, a, b: c.op("lz.select", _gt0(c, x), x, _affine(c, x, a, 0.0))),
    "thresholdedrelu": (1, (1.0,), lambda c, x, a, b: c.op(
        "lz.select", c.op("lz.cmp", x, c.scalar(a, x), predicate="gt"), x, c.scalar(0.0, x))),
    "scaledtanh": (2, (1.0, 1.0), lambda c, x, a, b: _affine(c, c.op("lz.tanh", _affine(c, x, b, 0.0)), a, 0.0)),
    "hardsigmoid": (2, (0.2, 0.5), lambda c, x, a, b: c.op(
        "lz.max", c.op("lz.min", _affine(c, x, a, b), c.scalar(1.0, x)), c.scalar(0.0, x))),
    "elu": (1, (1.0,), lambda c, x, a, b: c.op(
        "lz.select", _gt0(c, x), x, _affine(c, c.op("lz.sub", c.op("lz.exp", x), c.scalar(1.0, x)), a, 0.0))),
    "softsign": (0, (), lambda c, x, a, b: c.op("lz.div", x, c.op("lz.add", c.op("lz.abs", x), c.scalar(1.0, x)))),
    "softplus": (0, (), lambda c, x, a, b: c.op("lz.log", c.op("lz.add", c.op("lz.exp", x), c.scalar(1.0, x)))),
}

# per operator: gates, default activations (per direction), the output count
LAYERS = {"LSTM": (4, ("Sigmoid", "Tanh", "Tanh"), 3), "GRU": (3, ("Sigmoid", "Tanh"), 2), "RNN": (1, ("Tanh",), 2)}


def _affine(ctx, x, alpha, beta):
    y = x if alpha == 1.0 else ctx.op("lz.mul", x, ctx.scalar(alpha, x))
    return y if beta == 0.0 else ctx.op("lz.add", y, ctx.scalar(beta, x))


def _gt0(ctx, x):
    return ctx.op("lz.cmp", x, ctx.scalar(0.0, x), predicate="gt")


def _activations(ctx, op_type: str, num_directions: int) -> list:
    """One list of functions ``f(x)`` per direction, from ``activations``/``activation_alpha``/``beta``."""
    defaults = LAYERS[op_type][1]
    names = list(ctx.attr("activations", list(defaults) * num_directions))
    if len(names) != len(defaults) * num_directions:
        raise ctx.error(f"activations lists {len(names)} functions; {op_type} with {num_directions} direction(s) "
                        f"takes {len(defaults) * num_directions}")
    alphas, betas = list(ctx.attr("activation_alpha", [])), list(ctx.attr("activation_beta", []))
    functions = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise ctx.unsupported(f"activation '{name}' is not supported (supported: "
                                  f"{', '.join(sorted(ACTIVATIONS))})")
        count, params, fn = ACTIVATIONS[key]
        alpha = float(alphas.pop(0)) if count >= 1 and alphas else (params[0] if count >= 1 else 0.0)
        beta = float(betas.pop(0)) if count >= 2 and betas else (params[1] if count >= 2 else 0.0)
        functions.append(lambda x, fn=fn, alpha=alpha, beta=beta: fn(ctx, x, alpha, beta))
    per = len(defaults)
    return [functions[d * per:(d + 1) * per] for d in range(num_directions)]


def _direction_slice(ctx, v, d: int):
    """``v[d]`` of a per-direction tensor (``[num_directions, ...]``)."""
    return ctx.reshape(ctx.op("lz.slice", v, starts=[d], ends=[d + 1], axes=[0]), v.type.shape[1:])


def _columns(ctx, v, start: int, stop: int):
    return ctx.op("lz.slice", v, starts=[start], ends=[stop], axes=[ctx.rank(v) - 1])


class _Layer:
    """What every direction of one node shares: sizes, inputs, attributes."""

    def __init__(self, ctx):
        self.ctx = ctx
        op_type = ctx.op_type
        self.gates = LAYERS[op_type][0]
        direction = ctx.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.unsupported(f"direction '{direction}' is not supported (forward, reverse, bidirectional)")
        self.directions = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
        self.layout = int(ctx.attr("layout", 0)) if ctx.opset >= 14 else 0
        if self.layout not in (0, 1):
            raise ctx.unsupported(f"layout {self.layout} is not supported (0 or 1)")
        self.hidden = int(ctx.attr("hidden_size"))
        self.clip = ctx.attr("clip", None)
        self.activations = _activations(ctx, op_type, len(self.directions))
        x = ctx.input(0, "X")
        if self.layout:
            x = ctx.transpose(x, [1, 0, 2])
        self.x = x
        self.steps, self.batch, _ = ctx.shape(x, "X")
        self.w, self.r, self.b = ctx.input(1, "W"), ctx.input(2, "R"), ctx.optional(3)
        self.mask = self._mask(ctx.optional(4))
        self.initial = [self._initial(ctx.optional(k)) for k in (5, 6)]

    def _mask(self, lengths):
        """``[T, B, 1]`` bool, ``t < sequence_lens[b]`` (None without ``sequence_lens``)."""
        ctx = self.ctx
        if lengths is None:
            return None
        known = ctx.constant_of(lengths)
        if known is not None and np.all(np.asarray(known) >= self.steps):
            return None  # every sequence is full: no mask
        steps = ctx.constant(np.arange(self.steps, dtype=np.int64).reshape(self.steps, 1), I64)
        lengths = ctx.reshape(ctx.cast(lengths, I64), [1, self.batch])
        return ctx.reshape(ctx.op("lz.cmp", steps, lengths, predicate="lt"), [self.steps, self.batch, 1])

    def _initial(self, v):
        if v is not None and self.layout:
            v = self.ctx.transpose(v, [1, 0, 2])
        return v

    def state(self, k: int, d: int, like):
        """Initial state ``k`` (0: h, 1: c) of direction ``d``: the input, or zeros."""
        v = self.initial[k]
        if v is None:
            return self.ctx.constant(np.zeros((self.batch, self.hidden)), like.type.element_type)
        return _direction_slice(self.ctx, v, d)

    def clipped(self, x):
        ctx = self.ctx
        if self.clip is None:
            return x
        return ctx.op("lz.max", ctx.op("lz.min", x, ctx.scalar(self.clip, x)), ctx.scalar(-self.clip, x))

    def projection(self, d: int, bias):
        """``X @ W_d^T + bias`` for every step at once: ``[T, B, gates*H]``."""
        ctx = self.ctx
        w_t = ctx.transpose(_direction_slice(ctx, self.w, d), [1, 0])
        flat = ctx.reshape(self.x, [self.steps * self.batch, self.x.type.shape[2]])
        projected = ctx.op("lz.matmul", flat, w_t)
        if bias is not None:
            projected = ctx.op("lz.add", projected, bias)
        return ctx.reshape(projected, [self.steps, self.batch, self.gates * self.hidden])

    def biases(self, d: int):
        """``(W_b, R_b)`` of direction ``d`` (None without ``B``)."""
        if self.b is None:
            return None, None
        ctx, n = self.ctx, self.gates * self.hidden
        b = _direction_slice(ctx, self.b, d)
        return _columns(ctx, b, 0, n), _columns(ctx, b, n, 2 * n)

    def run(self, d: int, invariants: list, carried: list, projected, step) -> list:
        """The loop of direction ``d``: ``step(invariants, carried, x_t) -> (next carried)`` per
        step, masked by ``sequence_lens``.  Returns the final carried values and ``Y_d``
        (``[T, B, H]``)."""
        ctx = self.ctx
        xs = [projected] + ([self.mask] if self.mask is not None else [])
        ni, nc = len(invariants), len(carried)

        def body(index, *args):
            inv, old, x_t = list(args[:ni]), list(args[ni:ni + nc]), args[ni + nc]
            new = step(inv, old, x_t)
            if self.mask is None:
                return new + [new[0]]
            keep = args[ni + nc + 1]
            new = [ctx.op("lz.select", keep, n, o) for n, o in zip(new, old)]
            return new + [ctx.op("lz.select", keep, new[0], ctx.scalar(0.0, new[0]))]

        slices = [TensorType(x.type.shape[1:], x.type.element_type) for x in xs]
        block = region(ctx, [INDEX_TYPE] + [v.type for v in invariants + carried] + slices, body)
        return structured(ctx, "lz.for", invariants + carried + xs, [block], trip_count=self.steps,
                          num_invariant=ni, num_carried=nc, reverse=self.directions[d])

    def outputs(self, per_direction: list, n_states: int) -> list:
        """``Y`` and the final states from each direction's ``[states..., Y_d]``."""
        ctx = self.ctx
        shape = [self.steps, 1, self.batch, self.hidden]
        ys = [ctx.reshape(r[-1], shape) for r in per_direction]
        y = ys[0] if len(ys) == 1 else ctx.op("lz.concat", *ys, axis=1)
        states = []
        for k in range(n_states):
            parts = [ctx.reshape(r[k], [1, self.batch, self.hidden]) for r in per_direction]
            states.append(parts[0] if len(parts) == 1 else ctx.op("lz.concat", *parts, axis=0))
        if self.layout:
            y = ctx.transpose(y, [2, 0, 1, 3])
            states = [ctx.transpose(s, [1, 0, 2]) for s in states]
        return [y] + states


@converter("LSTM", since=7)
def lstm(ctx):
    layer = _Layer(ctx)
    hidden = layer.hidden
    input_forget = bool(ctx.attr("input_forget", 0))
    peepholes = ctx.optional(7)
    results = []
    for d in range(len(layer.directions)):
        f, g, h = layer.activations[d]
        w_b, r_b = layer.biases(d)
        bias = None if w_b is None else ctx.op("lz.add", w_b, r_b)
        projected = layer.projection(d, bias)
        r_t = ctx.transpose(_direction_slice(ctx, layer.r, d), [1, 0])
        invariants = [r_t]
        if peepholes is not None:
            p = _direction_slice(ctx, peepholes, d)
            invariants += [_columns(ctx, p, k * hidden, (k + 1) * hidden) for k in range(3)]

        def step(inv, carried, x_t, f=f, g=g, h=h):
            h_prev, c_prev = carried
            gates = ctx.op("lz.add", x_t, ctx.op("lz.matmul", h_prev, inv[0]))
            pre = [_columns(ctx, gates, k * hidden, (k + 1) * hidden) for k in range(4)]  # i, o, f, c
            if len(inv) > 1:
                pre[0] = ctx.op("lz.add", pre[0], ctx.op("lz.mul", inv[1], c_prev))
                pre[2] = ctx.op("lz.add", pre[2], ctx.op("lz.mul", inv[3], c_prev))
            i = f(layer.clipped(pre[0]))
            forget = ctx.op("lz.sub", ctx.scalar(1.0, i), i) if input_forget else f(layer.clipped(pre[2]))
            c = ctx.op("lz.add", ctx.op("lz.mul", forget, c_prev), ctx.op("lz.mul", i, g(layer.clipped(pre[3]))))
            if len(inv) > 1:
                pre[1] = ctx.op("lz.add", pre[1], ctx.op("lz.mul", inv[2], c))
            o = f(layer.clipped(pre[1]))
            return [ctx.op("lz.mul", o, h(c)), c]

        carried = [layer.state(0, d, projected), layer.state(1, d, projected)]
        results.append(layer.run(d, invariants, carried, projected, step))
    return layer.outputs(results, 2)


@converter("GRU", since=7)
def gru(ctx):
    layer = _Layer(ctx)
    hidden = layer.hidden
    before_reset = bool(ctx.attr("linear_before_reset", 0))
    results = []
    for d in range(len(layer.directions)):
        f, g = layer.activations[d]
        w_b, r_b = layer.biases(d)
        r_t = ctx.transpose(_direction_slice(ctx, layer.r, d), [1, 0])   # [H, 3H]: z, r, h
        if w_b is None:
            bias, r_bh = None, None
        elif before_reset:  # R_bh stays inside r * (H R_h^T + R_bh)
            bias = ctx.op("lz.add", w_b, ctx.op("lz.concat", _columns(ctx, r_b, 0, 2 * hidden),
                                                ctx.constant(np.zeros(hidden), r_b.type.element_type), axis=0))
            r_bh = _columns(ctx, r_b, 2 * hidden, 3 * hidden)
        else:
            bias, r_bh = ctx.op("lz.add", w_b, r_b), None
        projected = layer.projection(d, bias)
        if before_reset:
            invariants = [r_t] + ([r_bh] if r_bh is not None else [])
        else:
            invariants = [_columns(ctx, r_t, 0, 2 * hidden), _columns(ctx, r_t, 2 * hidden, 3 * hidden)]

        def step(inv, carried, x_t, f=f, g=g):
            (h_prev,) = carried
            x_zr, x_h = _columns(ctx, x_t, 0, 2 * hidden), _columns(ctx, x_t, 2 * hidden, 3 * hidden)
            recurrent = ctx.op("lz.matmul", h_prev, inv[0])
            zr = ctx.op("lz.add", x_zr, _columns(ctx, recurrent, 0, 2 * hidden))
            z = f(layer.clipped(_columns(ctx, zr, 0, hidden)))
            r = f(layer.clipped(_columns(ctx, zr, hidden, 2 * hidden)))
            if before_reset:
                h_lin = _columns(ctx, recurrent, 2 * hidden, 3 * hidden)
                if len(inv) > 1:
                    h_lin = ctx.op("lz.add", h_lin, inv[1])
                reset = ctx.op("lz.mul", r, h_lin)
            else:
                reset = ctx.op("lz.matmul", ctx.op("lz.mul", r, h_prev), inv[1])
            n = g(layer.clipped(ctx.op("lz.add", x_h, reset)))
            # (1 - z) * n + z * h = n + z * (h - n)
            return [ctx.op("lz.add", n, ctx.op("lz.mul", z, ctx.op("lz.sub", h_prev, n)))]

        results.append(layer.run(d, invariants, [layer.state(0, d, projected)], projected, step))
    return layer.outputs(results, 1)


@converter("RNN", since=7)
def rnn(ctx):
    layer = _Layer(ctx)
    results = []
    for d in range(len(layer.directions)):
        (f,) = layer.activations[d]
        w_b, r_b = layer.biases(d)
        projected = layer.projection(d, None if w_b is None else ctx.op("lz.add", w_b, r_b))
        r_t = ctx.transpose(_direction_slice(ctx, layer.r, d), [1, 0])

        def step(inv, carried, x_t, f=f):
            return [f(layer.clipped(ctx.op("lz.add", x_t, ctx.op("lz.matmul", carried[0], inv[0]))))]

        results.append(layer.run(d, [r_t], [layer.state(0, d, projected)], projected, step))
    return layer.outputs(results, 1)
