"""``lz.nn.RNN``, ``LSTM``, ``GRU`` and their cells, with PyTorch's arguments, parameter names
and layouts (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, ``weight_hr_l0``,
``*_reverse``; gates stacked i,f,g,o for the LSTM and r,z,n for the GRU), initialization
(uniform on +-1/sqrt(hidden_size)) and input/return conventions.

How a layer runs (ONNX Runtime's plan): the input projection of every time step is one GEMM over
the whole sequence, both biases folded into it where the gate math allows (the GRU keeps ``b_hn``
inside ``r * (W_hn h + b_hn)``); then one step per time step does only the recurrent GEMM and the
gates, as one composite op (an ``EagerOp`` whose IR the compiler fuses: the matmul plus one
elementwise kernel, compiled once per shape and differentiated by the autodiff pass).  The time
loop is ``lz.scan`` (``lax.scan``'s ``step(carry, x) -> (carry, y)``): eagerly a Python loop
over the steps, under ``lz.jit.trace`` one ``lz.for`` op whose body is the step (not unrolled).

A PackedSequence is unpacked to a padded batch and run with a mask (``t < length``): a finished
sequence keeps its state (so the final state is the one at its last step, and a reverse direction
starts each sequence at its own last step) and outputs zeros.  Masking instead of shrinking the
batch step by step keeps every step the same shape, which a loop op's single body needs; the cost is
the recurrent GEMM on finished rows.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import apply
from lezero.eager.creation import empty, tensor, zeros
from lezero.eager.control_flow import scan
from lezero.eager.dispatch import EagerOp, constant_of
from lezero.eager.functions import cat, stack
from lezero.eager.tensor import Tensor
import lezero.nn.functional as F
import lezero.nn.init as init
from lezero.nn.module import Module, Parameter
from lezero.nn.utils.rnn import PackedSequence, lengths_of, packed_to_padded, padded_to_packed

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# --- one time step: the recurrent GEMM and the gates, one composite op per cell kind ----------------------
#
# Inputs: ``gx`` (the step's input projection, N x gates*H, with the biases that fold), the carried
# state, ``w_hh`` (gates*H x H_out, as stored: the GEMM reads it transposed, so no copy is made per
# call), then what the attributes ask for: ``b_hh`` (the GRU), ``w_hr`` (the LSTM's projection),
# ``mask`` (N x 1 bool: the rows still running).  Results: the next carried state; with a mask also
# the step's output, which is zero on finished rows while their state stays.

def _times_transposed(b, x, w):
    """``x @ w.T``, as ``F.linear`` emits it (fusion folds the transpose into the GEMM's packing)."""
    return b.op("lz.matmul", x, b.op("lz.transpose", w, perm=[1, 0]))


def _gate(b, gates, k: int, hidden: int):
    return b.op("lz.slice", gates, starts=[k * hidden], ends=[(k + 1) * hidden], axes=[1])


def _masked(b, carried_old: list, carried_new: list, output, *mask) -> list:
    """The next state, or with a mask (the rows still running) the state kept on finished rows and
    the output zeroed there."""
    if not mask:
        return carried_new
    mask = mask[0]
    kept = [b.op("lz.select", mask, new, old) for new, old in zip(carried_new, carried_old)]
    return kept + [b.op("lz.select", mask, output, constant_of(b, 0, output.type.element_type))]


def _emit_rnn_step(b, attrs, gx, h, w_hh, *mask):
    pre = b.op("lz.add", gx, _times_transposed(b, h, w_hh))
    h_next = b.op("lz.tanh" if attrs["nonlinearity"] == "tanh" else "lz.relu", pre)
    return _masked(b, [h], [h_next], h_next, *mask)


def _emit_lstm_step(b, attrs, gx, h, c, w_hh, *rest):
    hidden = attrs["hidden"]
    gates = b.op("lz.add", gx, _times_transposed(b, h, w_hh))
    i, f, g, o = (_gate(b, gates, k, hidden) for k in range(4))
    c_next = b.op("lz.add", b.op("lz.mul", b.op("lz.sigmoid", f), c),
                  b.op("lz.mul", b.op("lz.sigmoid", i), b.op("lz.tanh", g)))
    h_next = b.op("lz.mul", b.op("lz.sigmoid", o), b.op("lz.tanh", c_next))
    if attrs["projected"]:
        h_next = _times_transposed(b, h_next, rest[0])
        rest = rest[1:]
    return _masked(b, [h, c], [h_next, c_next], h_next, *rest)


def _emit_gru_step(b, attrs, gx, h, w_hh, *rest):
    hidden = attrs["hidden"]
    gh = _times_transposed(b, h, w_hh)
    if attrs["bias"]:
        gh = b.op("lz.add", gh, rest[0])
        rest = rest[1:]
    r = b.op("lz.sigmoid", b.op("lz.add", _gate(b, gx, 0, hidden), _gate(b, gh, 0, hidden)))
    z = b.op("lz.sigmoid", b.op("lz.add", _gate(b, gx, 1, hidden), _gate(b, gh, 1, hidden)))
    n = b.op("lz.tanh", b.op("lz.add", _gate(b, gx, 2, hidden), b.op("lz.mul", r, _gate(b, gh, 2, hidden))))
    h_next = b.op("lz.add", n, b.op("lz.mul", z, b.op("lz.sub", h, n)))  # (1 - z) * n + z * h
    return _masked(b, [h], [h_next], h_next, *rest)


_STEPS = {"RNN_TANH": EagerOp("rnn_step", _emit_rnn_step), "RNN_RELU": EagerOp("rnn_step", _emit_rnn_step),
          "LSTM": EagerOp("lstm_step", _emit_lstm_step, num_results=2),
          "GRU": EagerOp("gru_step", _emit_gru_step)}
_MASKED_STEPS = {"RNN_TANH": EagerOp("rnn_step", _emit_rnn_step, num_results=2),
                 "RNN_RELU": EagerOp("rnn_step", _emit_rnn_step, num_results=2),
                 "LSTM": EagerOp("lstm_step", _emit_lstm_step, num_results=3),
                 "GRU": EagerOp("gru_step", _emit_gru_step, num_results=2)}


def _nonlinearity(mode: str) -> str:
    return "relu" if mode == "RNN_RELU" else "tanh"


class _Recurrence:
    """One direction of one layer: its weights arranged for the steps (the biases that fold summed
    into the input projection's bias; the GRU's ``b_hh`` a step input)."""

    def __init__(self, mode: str, hidden: int, w_ih, w_hh, b_ih, b_hh, w_hr):
        self.mode, self.w_ih = mode, w_ih
        self.w_hh, self.w_hr = w_hh, w_hr
        self.extra = []  # step inputs after w_hh, before the projection and the mask
        if b_ih is None:
            self.input_bias = None
        elif mode == "GRU":
            self.input_bias = b_ih
            self.extra = [b_hh]
        else:
            self.input_bias = b_ih + b_hh
        self.attrs = (("hidden", hidden), ("nonlinearity", _nonlinearity(mode)), ("projected", w_hr is not None),
                      ("bias", b_ih is not None))

    def project(self, x: Tensor) -> Tensor:
        """The input projection of every step at once: one GEMM over ``T x N x I``."""
        return F.linear(x, self.w_ih, self.input_bias)

    def step(self, gx: Tensor, state: tuple, mask: Tensor | None = None) -> tuple:
        """``(next state, output)`` of one time step."""
        weights = [self.w_hh, *self.extra] + ([] if self.w_hr is None else [self.w_hr])
        if mask is None:
            out = apply(_STEPS[self.mode], self.attrs, gx, *state, *weights)
            state = out if isinstance(out, tuple) else (out,)
            return state, state[0]
        out = apply(_MASKED_STEPS[self.mode], self.attrs, gx, *state, *weights, mask)
        return tuple(out[:-1]), out[-1]

    def run(self, x: Tensor, state: tuple, mask: Tensor | None, reverse: bool) -> tuple:
        """``(final state, outputs T x N x H_out)`` over the sequence ``x`` (``T x N x I``)."""
        gx = self.project(x)
        if mask is None:
            return scan(lambda carry, xs: self.step(xs[0], carry), state, (gx,), reverse=reverse)
        return scan(lambda carry, xs: self.step(xs[0], carry, xs[1]), state, (gx, mask), reverse=reverse)


def _float_dtype(dtype):
    return _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()


class RNNBase(Module):
    """The multi-layer, optionally bidirectional recurrence shared by RNN, LSTM and GRU."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}")
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError("hidden_size must be an integer greater than zero")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError("num_layers must be an integer greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        d = _float_dtype(dtype)
        gate_size = GATES[mode] * hidden_size
        real_hidden = proj_size or hidden_size
        directions = 2 if bidirectional else 1
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * directions
            for suffix in ("", "_reverse")[:directions]:
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in shapes:
                    self.register_parameter(f"{name}_l{layer}{suffix}", Parameter(empty(*shape, dtype=d)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    @property
    def _flat_weights_names(self) -> list:
        return list(self._parameters)

    @property
    def all_weights(self) -> list:
        per_direction = len(self._parameters) // (self.num_layers * (2 if self.bidirectional else 1))
        weights = list(self._parameters.values())
        return [weights[i:i + per_direction] for i in range(0, len(weights), per_direction)]

    def flatten_parameters(self) -> None:
        """PyTorch's cuDNN weight packing: nothing to do here."""

    def _recurrence(self, layer: int, suffix: str) -> _Recurrence:
        p = self._parameters
        get = lambda name: p.get(f"{name}_l{layer}{suffix}")  # noqa: E731
        return _Recurrence(self.mode, self.hidden_size, get("weight_ih"), get("weight_hh"), get("bias_ih"),
                           get("bias_hh"), get("weight_hr"))

    def forward(self, input, hx=None):  # noqa: A002 - PyTorch's names
        """``input``: ``T x N x I`` (``N x T x I`` with ``batch_first``), ``T x I`` unbatched, or a
        PackedSequence; ``hx``: ``h0`` (the LSTM: ``(h0, c0)``), ``layers*directions x N x H``,
        zeros when omitted.  Returns the last layer's outputs (``T x N x directions*H_out``, in the
        input's form) and the final states of every layer and direction."""
        lstm = self.mode == "LSTM"
        packed = isinstance(input, PackedSequence)
        mask = sorted_indices = None
        if packed:
            batch_sizes = input.batch_sizes.numpy()
            x = packed_to_padded(input.data, batch_sizes)
            steps = np.arange(len(batch_sizes))[:, None, None]
            mask = tensor(steps < lengths_of(batch_sizes)[None, :, None])
            sorted_indices = input.sorted_indices
            unbatched = False
        else:
            if input.ndim not in (2, 3):
                raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D instead")
            unbatched = input.ndim == 2
            x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {x.shape[-1]}")
        state = self._initial_state(hx, x, unbatched, sorted_indices)
        directions = 2 if self.bidirectional else 1
        finals = [[] for _ in state]
        for layer in range(self.num_layers):
            outputs = []
            for d, suffix in enumerate(("", "_reverse")[:directions]):
                k = layer * directions + d
                final, ys = self._recurrence(layer, suffix).run(x, tuple(s[k] for s in state), mask, d == 1)
                for kept, s in zip(finals, final):
                    kept.append(s)
                outputs.append(ys)
            x = outputs[0] if directions == 1 else cat(outputs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        finals = [stack(f) for f in finals]
        if packed:
            output = PackedSequence(padded_to_packed(x, batch_sizes), input.batch_sizes, input.sorted_indices,
                                    input.unsorted_indices)
            if input.unsorted_indices is not None:
                finals = [f.index_select(1, input.unsorted_indices) for f in finals]
        elif unbatched:
            output, finals = x.squeeze(1), [f.squeeze(1) for f in finals]
        else:
            output = x.transpose(0, 1) if self.batch_first else x
        return output, (tuple(finals) if lstm else finals[0])

    def _initial_state(self, hx, x: Tensor, unbatched: bool, sorted_indices) -> list:
        """``[h0]`` or ``[h0, c0]``, batched (``layers*directions x N x H``), in the sorted order of a
        packed input."""
        directions = 2 if self.bidirectional else 1
        batch = x.shape[1]
        sizes = [self.proj_size or self.hidden_size] + ([self.hidden_size] if self.mode == "LSTM" else [])
        if hx is None:
            return [zeros(self.num_layers * directions, batch, n, dtype=x.dtype) for n in sizes]
        given = list(hx) if self.mode == "LSTM" else [hx]
        if self.mode == "LSTM" and len(given) != 2:
            raise ValueError("LSTM: hx must be a tuple (h0, c0)")
        state = []
        for name, h, n in zip(("h0", "c0"), given, sizes):
            if unbatched:
                if h.ndim != 2:
                    raise RuntimeError(f"For unbatched 2-D input, {name} should also be 2-D but got {h.ndim}-D tensor")
                h = h.unsqueeze(1)
            want = (self.num_layers * directions, batch, n)
            if tuple(h.shape) != want:
                raise RuntimeError(f"Expected hidden size {want}, got {tuple(h.shape)}")
            state.append(h if sorted_indices is None else h.index_select(1, sorted_indices))
        return state

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN: ``h_t = nonlinearity(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` (tanh or relu)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, proj_size: int = 0):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, proj_size, device, dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Gates i, f, g, o; ``c_t = f * c + i * g``, ``h_t = o * tanh(c_t)``, projected by
    ``weight_hr`` when ``proj_size > 0``.  Returns ``output, (h_n, c_n)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gates r, z, n; ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h_t = (1 - z) * n + z * h``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None, proj_size: int = 0):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


# --- cells: one step, the same step ops as the layers -----------------------------------------------------

class RNNCellBase(Module):
    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool, device=None, dtype=None):
        super().__init__()
        self.mode, self.input_size, self.hidden_size, self.bias = mode, input_size, hidden_size, bias
        d = _float_dtype(dtype)
        gate_size = GATES[mode] * hidden_size
        self.weight_ih = Parameter(empty(gate_size, input_size, dtype=d))
        self.weight_hh = Parameter(empty(gate_size, hidden_size, dtype=d))
        if bias:
            self.bias_ih = Parameter(empty(gate_size, dtype=d))
            self.bias_hh = Parameter(empty(gate_size, dtype=d))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    reset_parameters = RNNBase.reset_parameters

    def _step(self, input: Tensor, state: list):  # noqa: A002
        """The next state (a list) for ``input`` (``N x I`` or unbatched ``I``)."""
        if input.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[-1]} expected {self.input_size}")
        unbatched = input.ndim == 1
        x = input.unsqueeze(0) if unbatched else input
        n_states = 2 if self.mode == "LSTM" else 1
        if state is None:
            state = [zeros(x.shape[0], self.hidden_size, dtype=x.dtype)] * n_states
        else:
            state = [h.unsqueeze(0) if unbatched else h for h in state]
        recurrence = _Recurrence(self.mode, self.hidden_size, self.weight_ih, self.weight_hh, self.bias_ih,
                                 self.bias_hh, None)
        new_state, _ = recurrence.step(recurrence.project(x), tuple(state))
        return [h.squeeze(0) if unbatched else h for h in new_state]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        return s


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, bias,
                         device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        return self._step(input, None if hx is None else [hx])[0]


class LSTMCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx=None) -> tuple:  # noqa: A002
        return tuple(self._step(input, None if hx is None else list(hx)))


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        return self._step(input, None if hx is None else [hx])[0]
