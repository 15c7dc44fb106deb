"""``lz.nn.parallel.DistributedDataParallel``: PyTorch's DDP on ``lz.distributed``.

- **Same start**: parameters and buffers are broadcast from rank 0 when the module is wrapped,
  and with ``broadcast_buffers`` the buffers (BatchNorm's running statistics) again before every
  forward, so every rank computes with rank 0's.
- **Buckets in one fixed order**: the parameters, in reverse registration order (roughly the order
  backward produces their gradients), fill buckets of ``bucket_cap_mb`` (25 MiB); each bucket is
  one flat array.  A parameter's gradient hook copies its gradient (plus what ``.grad`` held: an
  accumulation after ``no_sync``) into its slice and makes ``.grad`` a view of that slice; a bucket
  whose parameters are all ready is handed to the communication thread, in bucket order only (bucket
  k waits for buckets before it), so every rank issues the same collectives in the same order
  and none hangs on another's order.  The last hook waits for every bucket: when ``backward()``
  returns, each ``.grad`` holds the average over the ranks.
- **Overlap**: the eager ``backward()`` computes all gradients in one compiled function, then runs
  the hooks; a bucket's all-reduce then runs on the communication thread while later hooks copy
  and launch the next buckets.
- **Unused parameters**: with ``find_unused_parameters=True`` the forward's output graph is walked
  and the parameters it does not reach count as ready (zeros in their slice).  Without it, a
  backward that leaves some parameter without a gradient leaves its bucket unreduced, and the next
  forward raises PyTorch's "Expected to have finished reduction" error naming those parameters.
- **The collective is the IR op** (issue 14: one definition of its semantics for eager and compiled
  training): the default hook launches a bucket as the eager engine's one-op ``lz.all_reduce_start
  {op = "avg"}`` on its flat array (compiled once per bucket, cached like any eager op; the runtime
  runs it as a host step that queues the all-reduce on the communication thread and gives a request
  token), and the last hook's wait for it is the one-op ``lz.all_reduce_wait`` -- the same ops, runtime
  steps and process-group calls as ``compile_train_step``'s ``bucket-all-reduce``.  The start reduces
  a copy of the bucket (an eager op's argument is not its own to write), which the wait copies back.
- **Comm hooks** (``register_comm_hook(state, hook)``): ``hook(state, bucket) -> Future`` of the
  bucket's averaged flat gradient (``comm_hooks.py``: fp16/bf16 compression, PowerSGD, top-k).  They
  keep their Python path through ``lz.distributed``'s collectives: they change what is sent (a
  compressed array, low-rank factors, an all-gather of indices), which the IR op does not express.
"""
from __future__ import annotations

import contextlib

import numpy as np

import lezero.distributed as dist
from lezero.eager.autograd import walk
from lezero.eager.core import Mode, Tensor, wrap
from lezero.eager.device_arrays import contiguous
from lezero.eager.dispatch import lz_op, run_op
from lezero.ir.dialect.collective import START, WAIT
from lezero.nn.module import Module

DEFAULT_BUCKET_CAP_MB = 25


class GradBucket:
    """torch's ``dist.GradBucket``: one flat gradient array and the parameters whose slices it holds."""

    def __init__(self, index: int, params: list, names: list[str], dtype: np.dtype):
        self._index, self._params, self.names = index, params, names
        sizes = [int(np.prod(p.shape)) for p in params]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        self.array = np.zeros(int(self.offsets[-1]), dtype)
        self._is_last = False
        self.ready: set[int] = set()  # the parameters whose slice is final for this backward
        self.local: set[int] = set()  # of those, the ones this rank's backward gave a gradient
        self.work = None

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._is_last

    def buffer(self) -> Tensor:
        """The flat gradients (the same memory: a hook may write its result into it)."""
        return wrap(self.array)

    def parameters(self) -> list:
        return list(self._params)

    def slice_of(self, i: int) -> np.ndarray:
        """Parameter ``i``'s gradient: a view of the flat array, in the parameter's shape."""
        return self.array[self.offsets[i]:self.offsets[i + 1]].reshape(self._params[i].shape)

    def gradients(self) -> list[Tensor]:
        return [wrap(self.slice_of(i)) for i in range(len(self._params))]

    def describe(self) -> str:
        """What the mismatch check compares between ranks: the bucket and its parameters."""
        return f"bucket {self._index} [{', '.join(self.names)}]"


def _allreduce_hook(_state, bucket: GradBucket) -> dist.Future:
    """torch's default: the bucket's average, through the collective IR ops run eagerly (the module
    docstring).  The tag names the bucket for the ranks' mismatch check (``all_reduce bucket 0 [...]``)."""
    (request,) = run_op(lz_op(START), (("op", dist.ReduceOp.AVG), ("tag", bucket.describe())), [bucket.array])
    return dist.Future(lambda: wrap(run_op(lz_op(WAIT), (), [request, bucket.array])[0]))


class DistributedDataParallel(Module):
    """Data parallel training: each rank runs ``module`` on its part of the batch, the gradients
    are averaged over the ranks during ``backward()`` (see the module docstring)."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None, bucket_cap_mb: float | None = None,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False):
        super().__init__()
        if process_group is not None:
            raise ValueError("DistributedDataParallel: only the default process group "
                             "(lz.distributed.init_process_group) is supported; process_group must be None")
        if not dist.is_initialized():
            raise RuntimeError("DistributedDataParallel: the default process group is not initialised: call "
                               "lz.distributed.init_process_group() first")
        self.module = module
        self.broadcast_buffers, self.find_unused_parameters = broadcast_buffers, find_unused_parameters
        self.require_backward_grad_sync = True
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._param_names = {id(p): n for n, p in named}
        self._sync_module_states([t for _, t in module.named_parameters()] + list(module.buffers()),
                                 [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()])
        if not named:
            raise ValueError("DistributedDataParallel is not needed when a module doesn't have any parameter that "
                             "requires a gradient")
        cap = (DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb) * 2 ** 20
        self.bucket_cap_bytes = int(cap)  # compile_train_step's bucket-all-reduce takes the same buckets
        self._buckets = self._make_buckets(list(reversed(named)), cap)
        self._buckets[-1]._is_last = True
        self._slot = {id(p): (b, i) for b in self._buckets for i, p in enumerate(b._params)}
        self._comm_hook, self._comm_state = _allreduce_hook, None
        self._expected: set[int] = set()  # parameters whose gradients this backward will reduce
        self._next_bucket = 0
        self._handles = [p.register_hook(self._gradient_hook(p)) for _, p in named]

    # --- setup ------------------------------------------------------------------------------------------
    @staticmethod
    def _make_buckets(named: list, cap_bytes: float) -> list[GradBucket]:
        groups: list[list] = []
        size = 0
        for name, p in named:
            nbytes = p.numel() * p._data.dtype.itemsize
            full = groups and size + nbytes > cap_bytes
            if not groups or full or groups[-1][-1][1]._data.dtype != p._data.dtype:
                groups.append([])
                size = 0
            groups[-1].append((name, p))
            size += nbytes
        return [GradBucket(k, [p for _, p in g], [n for n, _ in g], g[0][1]._data.dtype) for k, g in enumerate(groups)]

    @staticmethod
    def _sync_module_states(tensors: list, names: list[str]) -> None:
        if dist.get_world_size() == 1:
            return
        works = [dist.broadcast(t.data, src=0, async_op=True, name=n) for t, n in zip(tensors, names)]
        for w in works:
            w.wait()

    @property
    def has_comm_hook(self) -> bool:
        return self._comm_hook is not _allreduce_hook

    def register_comm_hook(self, state, hook) -> None:
        """``hook(state, bucket) -> Future`` of the bucket's averaged flat gradient replaces the all-reduce."""
        if self._comm_hook is not _allreduce_hook:
            raise RuntimeError("register_comm_hook can only be called once")
        self._comm_hook, self._comm_state = hook, state

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally (no communication); the first one
        after it reduces the sum."""
        previous, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    # --- forward ----------------------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        self.before_forward()
        output = self.module(*inputs, **kwargs)
        if Mode.grad and self.require_backward_grad_sync:
            reached = None
            if self.find_unused_parameters:
                outputs = [t for t in _tensors_in(output) if t.requires_grad]
                reached = {id(t) for t in walk(outputs, stop_at_constants=True).args} if outputs else set()
            self.prepare_reduction(reached)
        return output

    def before_forward(self) -> None:
        """What precedes every forward (eager or compiled): the check that the last backward
        reduced everything, and rank 0's buffers."""
        if self._expected:
            self._unfinished_reduction_error()
        if self.broadcast_buffers and dist.get_world_size() > 1:
            self._sync_module_states(list(self.module.buffers()), [n for n, _ in self.module.named_buffers()])

    def prepare_reduction(self, used: set[int] | None = None) -> None:
        """Expect a gradient for each parameter (by ``id``) in ``used`` (all when None) in the
        coming backward; the others count as ready with zeros."""
        self._next_bucket = 0
        for b in self._buckets:
            b.ready.clear()
            b.local.clear()
            b.work = None
        self._expected = set(self._slot)
        for key in [k for k in self._slot if used is not None and k not in used]:
            b, i = self._slot[key]
            b.slice_of(i)[...] = 0
            self._mark_ready(key)

    def _unfinished_reduction_error(self):
        missing = sorted(self._param_names[k] for k in self._expected)
        raise RuntimeError("Expected to have finished reduction in the prior iteration before starting a new one. "
                           "This error indicates that your module has parameters that were not used in producing "
                           "loss (or backward() was not called). Pass find_unused_parameters=True to "
                           "DistributedDataParallel, or make sure every parameter takes part in the loss. "
                           f"Parameters that did not receive a gradient on rank {dist.get_rank()}: "
                           + ", ".join(missing))

    # --- backward: the gradient hooks ---------------------------------------------------------------------
    def _gradient_hook(self, p: Tensor):
        key = id(p)

        def hook(grad: Tensor):
            if key not in self._expected:
                return None  # no_sync, or a backward this DDP did not prepare: plain local accumulation
            total = contiguous(grad._data)
            if p.grad is not None:  # what earlier backward passes accumulated (no_sync): reduced with it
                total = total + contiguous(p.grad._data)
                p.grad = None  # autograd now sets .grad to the returned view instead of adding to it
            return wrap(self.gradient_ready(p, total))
        return hook

    def gradient_ready(self, p: Tensor, gradient: np.ndarray) -> np.ndarray:
        """Put ``p``'s gradient for this backward in its bucket slice (returned), launching the
        buckets that are complete now, in order; the last one waits for every bucket."""
        key = id(p)
        if key not in self._expected:
            raise RuntimeError(f"DistributedDataParallel: a second gradient for {self._param_names[key]} in one "
                               "backward pass (or a backward without a forward through the DDP module)")
        b, i = self._slot[key]
        view = b.slice_of(i)
        np.copyto(view, gradient)
        b.local.add(i)
        self._mark_ready(key)
        return view

    def _mark_ready(self, key: int) -> None:
        b, i = self._slot[key]
        b.ready.add(i)
        self._expected.discard(key)
        while self._next_bucket < len(self._buckets) and \
                len(self._buckets[self._next_bucket].ready) == len(self._buckets[self._next_bucket]._params):
            launched = self._buckets[self._next_bucket]
            launched.work = self._comm_hook(self._comm_state, launched)
            self._next_bucket += 1
        if not self._expected:
            self._finish_reduction()

    def _finish_reduction(self) -> None:
        for b in self._buckets:
            averaged = b.work.wait()
            if averaged is not None and averaged._data is not b.array:
                np.copyto(b.array, contiguous(averaged._data).reshape(b.array.shape))
            for i, p in enumerate(b._params):
                if i not in b.local:
                    p.grad = wrap(b.slice_of(i))  # a parameter unused here: it gets the others' gradients
            b.work = None


def _tensors_in(value) -> list:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    return []
