"""``lz.nn.utils.rnn``: packed and padded sequences, as PyTorch has them.

A ``PackedSequence`` holds a batch of sequences sorted by length (longest first) time step by time
step: ``data`` is the rows of step 0 of every sequence, then the rows of step 1 of those at least 2
long, ...; ``batch_sizes[t]`` counts the sequences still running at step ``t``.  Packing and
unpacking are gathers (``index_select``) with host-computed indices, so gradients flow through
them.  The recurrent layers take a PackedSequence by unpacking it to a padded batch and masking the
finished sequences (see ``lezero.nn.rnn``)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.creation import full, tensor
from lezero.eager.functions import cat, stack
from lezero.eager.tensor import Tensor


class PackedSequence(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args, **kwargs) -> "PackedSequence":
        """The same sequences with ``data`` converted (dtype or device); the indices stay."""
        return self._replace(data=self.data.to(*args, **kwargs))

    def double(self) -> "PackedSequence":
        return self.to(_dt.float64)

    def float(self) -> "PackedSequence":
        return self.to(_dt.float32)

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda


def _host_ints(values, what: str) -> np.ndarray:
    array = values.numpy() if isinstance(values, Tensor) else np.asarray(values)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ValueError(f"{what} must be a 1-D sequence of integers, got {array.dtype} of shape {array.shape}")
    return array.astype(np.int64)


def batch_sizes_of(lengths: np.ndarray) -> np.ndarray:
    """``batch_sizes[t]``: how many of the (sorted) sequences are longer than ``t``."""
    steps = np.arange(int(lengths.max()) if len(lengths) else 0)
    return (lengths[None, :] > steps[:, None]).sum(1).astype(np.int64)


def lengths_of(batch_sizes: np.ndarray) -> np.ndarray:
    """The sorted lengths a packing's ``batch_sizes`` stand for."""
    batch = int(batch_sizes[0]) if len(batch_sizes) else 0
    return (batch_sizes[:, None] > np.arange(batch)[None, :]).sum(0).astype(np.int64)


def packed_to_padded(data: Tensor, batch_sizes: np.ndarray, padding_value: float = 0.0,
                     total_length: int | None = None) -> Tensor:
    """The ``T x N x *`` padded batch of a packing, in its sorted order: row ``(t, j)`` is
    ``data[offset[t] + j]`` while sequence ``j`` runs, else the padding (an extra row gathered)."""
    steps, batch = len(batch_sizes), int(batch_sizes[0])
    total = steps if total_length is None else total_length
    offsets = np.concatenate([[0], np.cumsum(batch_sizes)[:-1]])
    index = np.full((total, batch), data.shape[0], np.int64)
    for t in range(steps):
        index[t, :batch_sizes[t]] = offsets[t] + np.arange(batch_sizes[t])
    pad = full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype)
    rows = cat([data, pad]).index_select(0, tensor(index.reshape(-1)))
    return rows.reshape(total, batch, *data.shape[1:])


def padded_to_packed(padded: Tensor, batch_sizes: np.ndarray) -> Tensor:
    """The packed ``data`` of a ``T x N x *`` padded batch in sorted order (the inverse of
    ``packed_to_padded``)."""
    batch = padded.shape[1]
    index = np.concatenate([t * batch + np.arange(n) for t, n in enumerate(batch_sizes)])
    return padded.reshape(-1, *padded.shape[2:]).index_select(0, tensor(index.astype(np.int64)))


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    if permutation is None:
        return None
    order = permutation.numpy()
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return tensor(inverse)


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,  # noqa: A002 - PyTorch's names
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (``T x N x *``, or ``N x T x *`` with ``batch_first``) of sequences of
    ``lengths``.  With ``enforce_sorted`` the lengths must be decreasing; without, the batch is
    sorted here (stably) and ``sorted_indices``/``unsorted_indices`` say how."""
    lengths = _host_ints(lengths, "lengths")
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                               "sidestep this requirement if you do not need ONNX exportability.")
        sorted_indices = None
    else:
        sorted_indices = tensor(np.argsort(-lengths, kind="stable").astype(np.int64))
        lengths = lengths[sorted_indices.numpy()]
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if len(lengths) == 0 or lengths[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' that "
                           "is <= 0")
    if batch_first:
        input = input.transpose(0, 1)
    if lengths[0] > input.shape[0]:
        raise RuntimeError(f"the longest sequence ({lengths[0]}) is longer than the input ({input.shape[0]} steps)")
    batch_sizes = batch_sizes_of(lengths)
    data = padded_to_packed(input[:len(batch_sizes)], batch_sizes)
    return PackedSequence(data, tensor(batch_sizes), sorted_indices, invert_permutation(sorted_indices))


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple:
    """The padded batch of a packing, in the order it was packed from, and the lengths."""
    batch_sizes = sequence.batch_sizes.numpy()
    if total_length is not None and total_length < len(batch_sizes):
        raise ValueError(f"Expected total_length to be at least the length of the longest sequence in input, but "
                         f"got total_length={total_length} and max sequence length being {len(batch_sizes)}")
    padded = packed_to_padded(sequence.data, batch_sizes, padding_value, total_length)
    lengths = lengths_of(batch_sizes)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[sequence.unsorted_indices.numpy()]
    return (padded.transpose(0, 1) if batch_first else padded), tensor(lengths)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack sequences of different lengths (``L_i x *``) into ``T x N x *`` (``N x T x *`` with
    ``batch_first``), padded on ``padding_side``."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    sequences = list(sequences)
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - s.shape[0]
        if missing:
            pad = full((missing,) + tuple(s.shape[1:]), padding_value, dtype=s.dtype)
            s = cat([s, pad] if padding_side == "right" else [pad, s])
        padded.append(s)
    return stack(padded, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences (``L_i x *``)."""
    sequences = list(sequences)
    return pack_padded_sequence(pad_sequence(sequences), [s.shape[0] for s in sequences],
                                enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """The sequences of a padded batch, each cut to its length."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[i, :n] for i, n in enumerate(_host_ints(lengths, "lengths"))]


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    """The sequences of a packing, in the order they were packed from."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
