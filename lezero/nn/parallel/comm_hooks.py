"""Gradient communication hooks for ``DistributedDataParallel.register_comm_hook(state, hook)``.

torch's ``ddp_comm_hooks`` under their names: ``allreduce_hook``, ``fp16_compress_hook``,
``bf16_compress_hook`` (the bucket travels in 16 bits: half the bytes), ``PowerSGDState`` and
``powerSGD_hook`` (Vogels et al.: each gradient matrix M, plus the error the last step's
approximation left, becomes the rank-r product P Q^T of two all-reduced thin matrices; the error is
fed back into the next step), and ``TopKState``/``topk_hook`` (each rank sends the k = ratio x n
largest entries of gradient plus error, as index and value, by all-gather; the rest is kept as
error).  A hook returns a ``lz.distributed.Future`` of the bucket's averaged flat gradient; the
math runs in numpy on the bucket's flat array, the communication through ``lz.distributed`` (whose
``bytes_sent`` counts what each hook saves).
"""
from __future__ import annotations

import math

import numpy as np

import lezero.distributed as dist
from lezero.eager.core import Tensor, wrap
from lezero.eager.dtypes import BFLOAT16_STORAGE
from lezero.nn.parallel.distributed import GradBucket, _allreduce_hook

allreduce_hook = _allreduce_hook


def _compress_hook(bucket: GradBucket, dtype: np.dtype, label: str) -> dist.Future:
    compressed = wrap((bucket.array / dist.get_world_size()).astype(dtype))  # divided first: no 16-bit overflow
    work = dist.all_reduce(compressed, dist.ReduceOp.SUM, async_op=True, name=f"{bucket.describe()} as {label}")

    def decompress(_future) -> object:
        np.copyto(bucket.array, compressed._data.astype(bucket.array.dtype))
        return bucket.buffer()
    return work.get_future().then(decompress)


def fp16_compress_hook(_state, bucket: GradBucket) -> dist.Future:
    """All-reduce the bucket in float16 (half the bytes), back to its own dtype after."""
    return _compress_hook(bucket, np.dtype(np.float16), "float16")


def bf16_compress_hook(_state, bucket: GradBucket) -> dist.Future:
    """All-reduce the bucket in bfloat16 (float32's range, half the bytes)."""
    return _compress_hook(bucket, BFLOAT16_STORAGE, "bfloat16")


class PowerSGDState:
    """torch's ``PowerSGDState``: the rank, when to start compressing (plain all-reduce before
    ``start_powerSGD_iter``), which matrices are worth it, and the per-matrix error and Q."""

    def __init__(self, process_group=None, matrix_approximation_rank: int = 1, start_powerSGD_iter: int = 10,
                 min_compression_rate: float = 2.0, use_error_feedback: bool = True, warm_start: bool = True,
                 random_seed: int = 0):
        if process_group is not None:
            raise ValueError("PowerSGDState: only the default process group is supported; process_group must be None")
        self.matrix_approximation_rank = matrix_approximation_rank
        self.start_powerSGD_iter, self.min_compression_rate = start_powerSGD_iter, min_compression_rate
        self.use_error_feedback, self.warm_start = use_error_feedback, warm_start
        self.rng = np.random.default_rng(random_seed)  # the same seed on every rank: the same first Q
        self.iter = 0
        self.errors: dict = {}
        self.qs: dict = {}

    # issue 15: a resumed run continues with the same error feedback, Q and random draws
    def state_dict(self) -> dict:
        return {"iter": self.iter, "rng": self.rng.bit_generator.state, "errors": dict(self.errors),
                "qs": dict(self.qs)}

    def load_state_dict(self, state: dict) -> None:
        self.iter = int(state["iter"])
        self.rng.bit_generator.state = state["rng"]
        self.errors = {tuple(k): _host_array(v) for k, v in state["errors"].items()}
        self.qs = {tuple(k): _host_array(v) for k, v in state["qs"].items()}

    def compressible(self, shape: tuple) -> bool:
        if len(shape) < 2:
            return False
        n, m = shape[0], int(np.prod(shape[1:]))
        return n * m >= self.min_compression_rate * (n + m) * self.matrix_approximation_rank


def _orthonormal_columns(a: np.ndarray) -> np.ndarray:
    q, _ = np.linalg.qr(a)
    return np.ascontiguousarray(q, dtype=a.dtype)


def powerSGD_hook(state: PowerSGDState, bucket: GradBucket) -> dist.Future:
    """Rank-r PowerSGD with error feedback (one power iteration per step, warm-started Q)."""
    if bucket.is_last():
        state.iter += 1
    if state.iter <= state.start_powerSGD_iter:
        return _allreduce_hook(state, bucket)
    r, world = state.matrix_approximation_rank, dist.get_world_size()
    matrices, vectors = [], []
    for i, p in enumerate(bucket.parameters()):
        (matrices if state.compressible(p.shape) else vectors).append(i)
    if vectors:  # biases and small matrices: all-reduced as they are, in one flat array
        flat = np.concatenate([bucket.slice_of(i).reshape(-1) for i in vectors])
        dist.all_reduce(wrap(flat), dist.ReduceOp.AVG, name=f"{bucket.describe()} uncompressed")
        for i, part in zip(vectors, np.split(flat, np.cumsum([bucket.slice_of(i).size for i in vectors])[:-1])):
            bucket.slice_of(i)[...] = part.reshape(bucket.slice_of(i).shape)
    if not matrices:
        return dist.Future.completed(bucket.buffer())
    ms, keys = [], []
    for i in matrices:
        key = (bucket.index(), i)
        m = bucket.slice_of(i).reshape(bucket.slice_of(i).shape[0], -1).copy()
        if state.use_error_feedback:
            m += state.errors.get(key, 0)
        if key not in state.qs or not state.warm_start:
            state.qs[key] = _orthonormal_columns(state.rng.standard_normal((m.shape[1], r)).astype(m.dtype))
        ms.append(m)
        keys.append(key)
    ps = _all_reduced_concatenation([m @ state.qs[k] for m, k in zip(ms, keys)], dist.ReduceOp.SUM,
                                    f"{bucket.describe()} PowerSGD P")
    ps = [_orthonormal_columns(p) for p in ps]
    qs = _all_reduced_concatenation([m.T @ p for m, p in zip(ms, ps)], dist.ReduceOp.SUM,
                                    f"{bucket.describe()} PowerSGD Q")
    for i, key, m, p, q in zip(matrices, keys, ms, ps, qs):
        approximation = p @ (q / world).T  # P P^T mean(M): the rank-r estimate of the average
        if state.use_error_feedback:
            state.errors[key] = m - approximation  # torch's feedback: what this rank's M and the estimate differ by
        state.qs[key] = q
        bucket.slice_of(i)[...] = approximation.reshape(bucket.slice_of(i).shape)
    return dist.Future.completed(bucket.buffer())


def _all_reduced_concatenation(arrays: list, op: str, name: str) -> list:
    flat = np.concatenate([a.reshape(-1) for a in arrays])
    dist.all_reduce(wrap(flat), op, name=name)
    return [part.reshape(a.shape) for a, part in zip(arrays, np.split(flat, np.cumsum([a.size for a in arrays])[:-1]))]


class TopKState:
    """Top-k sparsification: the fraction ``ratio`` of each bucket's entries a rank sends per step."""

    def __init__(self, ratio: float = 0.01, use_error_feedback: bool = True):
        if not 0 < ratio <= 1:
            raise ValueError(f"TopKState: ratio must be in (0, 1], got {ratio}")
        self.ratio, self.use_error_feedback = ratio, use_error_feedback
        self.errors: dict = {}

    # issue 15: a resumed run continues with the same error feedback
    def state_dict(self) -> dict:
        return {"errors": dict(self.errors)}

    def load_state_dict(self, state: dict) -> None:
        self.errors = {int(k): _host_array(v) for k, v in state["errors"].items()}


def _host_array(value) -> np.ndarray:
    """A checkpoint's tensor (``lz.load`` gives ``lz.Tensor``) as the numpy array a hook keeps."""
    return np.array(value.numpy() if isinstance(value, Tensor) else value)


def topk_hook(state: TopKState, bucket: GradBucket) -> dist.Future:
    """Each rank all-gathers its k largest (by magnitude) entries of gradient plus error, as int32
    indices and values; the average is their sum over the ranks over the world size; the rest
    stays in the error."""
    world = dist.get_world_size()
    accumulated = bucket.array + state.errors.get(bucket.index(), 0)
    k = max(1, math.ceil(state.ratio * accumulated.size))
    top = np.sort(np.argpartition(np.abs(accumulated), accumulated.size - k)[accumulated.size - k:]).astype(np.int32)
    values = accumulated[top]
    every_index = [wrap(np.empty(k, np.int32)) for _ in range(world)]
    every_value = [wrap(np.empty(k, accumulated.dtype)) for _ in range(world)]
    dist.all_gather(every_index, wrap(top), name=f"{bucket.describe()} top-k indices")
    dist.all_gather(every_value, wrap(values), name=f"{bucket.describe()} top-k values")
    if state.use_error_feedback:
        accumulated[top] = 0
        state.errors[bucket.index()] = accumulated
    bucket.array[...] = 0
    for index, value in zip(every_index, every_value):  # rank order: the same sums on every rank
        np.add.at(bucket.array, index._data, value._data)
    bucket.array /= world
    return dist.Future.completed(bucket.buffer())
