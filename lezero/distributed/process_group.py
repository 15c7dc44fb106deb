"""The process group: ``init_process_group``, the collectives on lz tensors, their order and checks.

- **Where the ranks come from.** ``ClusterConfig`` (the docs' form: master address and port,
  world size, rank, backend), else the environment a launcher sets (``RANK``, ``WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``, ``LEZERO_BACKEND``: ``lezero-run`` or torchrun), else MPI
  itself (``mpiexec`` started us: ``PMI_RANK``/``PMI_SIZE``, or mpi4py's ``COMM_WORLD``).
- **One communication thread per group** runs every collective in the order the program issued
  them (a FIFO), so the async variants (``async_op=True``, returning a ``Work``) overlap the
  caller's computation on either engine — MPI's nonblocking calls make no progress until waited
  on without MPICH's async-progress thread — and every rank's engine sees one fixed order.
- **A mismatched collective fails fast, naming both sides.** Before each collective the ranks
  exchange a fixed-size description of what they are about to do (the call, the tensor's name,
  dtype and shape, the op, the root): a fixed-size all-gather cannot hang on differing shapes, and
  a difference raises ``CollectiveMismatchError`` on every rank with each rank's description
  (torch's ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` check, on by default here: 256 bytes per collective;
  ``init_process_group(check_collectives=False)`` turns it off).  A rank that never arrives makes
  the others' ``wait`` raise ``DistributedTimeoutError`` after ``timeout`` seconds.
- **Bytes sent** (``bytes_sent()``): the payload of this rank's collectives (the tensor's bytes for
  an all-reduce, broadcast root, all-gather, reduce-scatter input and send), what compression
  hooks are measured by; the metadata checks are not counted.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import queue
import threading
import time

import numpy as np

from lezero.distributed.backends import MPIBackend, TorchBackend
from lezero.eager.core import Tensor, wrap
from lezero.eager.device_arrays import contiguous
from lezero.ir.dialect.collective import set_communicator

BACKENDS = ("mpi", "gloo", "nccl")
DEFAULT_TIMEOUT_S = 300.0
DESCRIPTION_BYTES = 256


class ReduceOp:
    """torch.distributed's reduction names."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


class DistributedError(RuntimeError):
    """A misuse of ``lz.distributed`` (no group, a bad rank, a bad tensor)."""


class CollectiveMismatchError(DistributedError):
    """Ranks called different collectives (or on different tensors) at the same point."""


class DistributedTimeoutError(DistributedError):
    """A collective did not complete in time: some rank did not reach it."""


@dataclasses.dataclass
class ClusterConfig:
    """Where this process sits in the job: ``init_process_group(config)``."""

    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    world_size: int = 1
    rank: int = 0
    backend: str = "gloo"
    timeout: float = DEFAULT_TIMEOUT_S


class Work:
    """An issued collective (``async_op=True``): ``wait()`` blocks until it is done and raises what it raised."""

    def __init__(self, description: str, timeout_s: float):
        self.description, self.timeout_s = description, timeout_s
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._then = None
        self.result: list = []  # the tensors it writes (torch's ``Work.result()``)
        self.started_at = self.finished_at = None  # time.perf_counter() stamps, for overlap traces

    def is_completed(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        if not self._done.wait(self.timeout_s if timeout is None else timeout):
            raise DistributedTimeoutError(f"rank {get_rank()}: {self.description} did not complete within "
                                          f"{self.timeout_s if timeout is None else timeout:g} s: another rank did "
                                          "not reach it (or is stuck before it)")
        if self._error is not None:
            raise self._error
        if self._then is not None:
            then, self._then = self._then, None
            then()
        return True

    def get_future(self) -> Future:
        """torch's ``Work.get_future()``: its value is ``result`` once the work is done."""
        return Future(lambda: (self.wait(), self.result)[1])


class Future:
    """torch.futures.Future's use in comm hooks: ``wait()``/``value()`` give the value (computed on
    first wait: collectives complete on the communication thread), ``then(fn)`` chains ``fn(future)``."""

    def __init__(self, resolve):
        self._resolve, self._done, self._value = resolve, False, None

    @classmethod
    def completed(cls, value) -> Future:
        return cls(lambda: value)

    def wait(self):
        if not self._done:
            self._value, self._done = self._resolve(), True
        return self._value

    value = wait

    def then(self, callback) -> Future:
        """A future of ``callback(self)``, called once this one is complete."""
        def chained():
            self.wait()
            return callback(self)
        return Future(chained)


class ProcessGroup:
    """A backend, its communication thread and the checks; one per process (``lz.distributed``'s group)."""

    def __init__(self, backend, timeout_s: float, check_collectives: bool):
        self.backend, self.timeout_s, self.check_collectives = backend, timeout_s, check_collectives
        self.rank, self.world_size = backend.rank, backend.world_size
        self.bytes_sent = 0
        self.timeline: list = []  # (description, start, end) per finished job, when ``record_timeline``
        self.record_timeline = False
        self._jobs: queue.Queue = queue.Queue()
        self._requests: dict = {}  # a started IR collective's number -> (Work, its array)
        self._request_numbers = itertools.count()
        self._thread = threading.Thread(target=self._serve, name="lz.distributed communication", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            work, run = job
            work.started_at = time.perf_counter()
            try:
                run()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller, which raises it
                work._error = e
            work.finished_at = time.perf_counter()
            if self.record_timeline:
                self.timeline.append((work.description, work.started_at, work.finished_at))
            work._done.set()

    def issue(self, description: str, run, payload_bytes: int, then=None, collective: bool = True) -> Work:
        """Queue ``run`` (the backend call), after the metadata check for a ``collective`` (point to
        point calls differ between the peers by nature); ``then`` runs in ``wait``."""
        work = Work(description, self.timeout_s)
        work._then = then
        self.bytes_sent += payload_bytes
        check = collective and self.check_collectives and self.world_size > 1

        def checked_run() -> None:
            if check:
                self._check_same_call(description)
            run()
        self._jobs.put((work, checked_run))
        return work

    def _check_same_call(self, description: str) -> None:
        mine = np.zeros(DESCRIPTION_BYTES, np.uint8)
        encoded = description.encode()[:DESCRIPTION_BYTES]
        mine[:len(encoded)] = np.frombuffer(encoded, np.uint8)
        everyone = np.zeros((self.world_size, DESCRIPTION_BYTES), np.uint8)
        self.backend.all_gather(everyone, mine)
        calls = [bytes(row).rstrip(b"\0").decode(errors="replace") for row in everyone]
        if any(c != calls[0] for c in calls):
            raise CollectiveMismatchError("ranks called different collectives at the same point:\n" +
                                          "\n".join(f"  rank {r}: {c}" for r, c in enumerate(calls)))

    # issue 14: the communicator of the collective IR ops (lezero/ir/dialect/collective.py), which a
    # compiled step's host steps call: a start queues the in-place all-reduce, a wait blocks on it
    def start_all_reduce(self, array: np.ndarray, op: str, tag: str) -> int:
        """Queue an in-place all-reduce of host ``array``; the request's number, for ``wait``."""
        def run() -> None:
            self.backend.all_reduce(array, op)
            if op == ReduceOp.AVG:
                np.divide(array, self.world_size, out=array, casting="unsafe")
        work = self.issue(f"all_reduce {tag or 'tensor'} {array.dtype} {list(array.shape)} op={op}", run, array.nbytes)
        request = next(self._request_numbers)
        self._requests[request] = (work, array)
        return request

    def wait(self, request: int) -> np.ndarray:
        """Block until the request is done (raising what it raised); its reduced array."""
        work, array = self._requests.pop(request)
        work.wait()
        return array

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=self.timeout_s)
        self.backend.close()


_GROUP: ProcessGroup | None = None


def init_process_group(config: ClusterConfig | None = None, backend: str | None = None, *, rank: int | None = None,
                       world_size: int | None = None, init_method: str | None = None, timeout: float | None = None,
                       check_collectives: bool = True) -> None:
    """Join the job: ``init_process_group(ClusterConfig(...))``, or torch's form
    (``backend="gloo"``, rank and world size from the arguments or the launcher's environment), or
    ``backend="mpi"`` (ranks from ``mpiexec``).  ``timeout`` (seconds, or a ``timedelta``) bounds
    every collective."""
    global _GROUP
    if _GROUP is not None:
        raise DistributedError("init_process_group: the default process group is already initialised "
                               "(destroy_process_group() first)")
    env = os.environ
    if config is not None:
        backend = backend or config.backend
        rank = config.rank if rank is None else rank
        world_size = config.world_size if world_size is None else world_size
        addr, port = config.master_addr, config.master_port
        timeout = config.timeout if timeout is None else timeout
    else:
        backend = backend or env.get("LEZERO_BACKEND") or ("mpi" if "PMI_RANK" in env else "gloo")
        addr, port = env.get("MASTER_ADDR", "127.0.0.1"), env.get("MASTER_PORT")
        if init_method is not None:
            if not init_method.startswith("tcp://"):
                raise DistributedError(f"init_process_group: init_method {init_method!r}: only tcp://ADDR:PORT")
            addr, _, port = init_method[len("tcp://"):].rpartition(":")
    timeout_s = DEFAULT_TIMEOUT_S if timeout is None else getattr(timeout, "total_seconds", lambda: timeout)()
    if backend not in BACKENDS:
        raise DistributedError(f"init_process_group: unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "mpi":
        engine = MPIBackend()
        for what, given, actual in (("rank", rank, engine.rank), ("world_size", world_size, engine.world_size)):
            if given is not None and given != actual:
                raise DistributedError(f"init_process_group: {what}={given}, but MPI says {actual} "
                                       "(with backend='mpi', mpiexec assigns the ranks)")
    else:
        rank = int(env["RANK"]) if rank is None and "RANK" in env else rank
        world_size = int(env["WORLD_SIZE"]) if world_size is None and "WORLD_SIZE" in env else world_size
        if rank is None or world_size is None or port is None:
            raise DistributedError(f"init_process_group(backend={backend!r}) needs the rank, the world size and "
                                   "MASTER_PORT: pass a ClusterConfig, or start the script with lezero-run (or "
                                   "torchrun), which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
        if not 0 <= rank < world_size:
            raise DistributedError(f"init_process_group: rank {rank} is outside world_size {world_size}")
        engine = TorchBackend(backend, rank, world_size, addr, int(port), timeout_s)
    _GROUP = ProcessGroup(engine, timeout_s, check_collectives)
    set_communicator(_GROUP)  # the collective IR ops reduce over it


def group() -> ProcessGroup:
    if _GROUP is None:
        raise DistributedError("the default process group is not initialised: call "
                               "lz.distributed.init_process_group() first")
    return _GROUP


def is_initialized() -> bool:
    return _GROUP is not None


def get_rank() -> int:
    return group().rank


def get_world_size() -> int:
    return group().world_size


def get_backend() -> str:
    return group().backend.name


def destroy_process_group() -> None:
    global _GROUP
    g = group()
    _GROUP = None
    set_communicator(None)
    g.close()


def bytes_sent() -> int:
    """Bytes of payload this rank's collectives have sent since the group started (or the last reset)."""
    return group().bytes_sent


def reset_bytes_sent() -> None:
    group().bytes_sent = 0


# --- collectives on lz tensors ------------------------------------------------------------------------

def describe(call: str, t: Tensor | None, name: str | None, extra: str = "") -> str:
    what = "" if t is None else f" {name or 'tensor'} {t.dtype} {list(t.shape)}"
    return f"{call}{what}{extra}"


def _buffer(t: Tensor):
    """The tensor's storage to hand to a backend, and a function putting results back in place."""
    if not isinstance(t, Tensor):
        raise DistributedError(f"expected an lz.Tensor, got {type(t).__name__}")
    array = t._data
    if not isinstance(array, np.ndarray) and group().backend.name != "nccl":
        raise DistributedError(f"a {t.device} tensor needs backend='nccl' (this group's is "
                               f"{group().backend.name!r}, which moves host memory): move it with .cpu() first")
    if isinstance(array, np.ndarray) and (t._strided or not array.flags.c_contiguous or not array.flags.writeable):
        staged = np.ascontiguousarray(contiguous(array))
        return staged, lambda: _store(t, staged)
    return array, lambda: _bump(t)


def _store(t: Tensor, values: np.ndarray) -> None:
    if t._data.flags.writeable:
        np.copyto(t._data, values)
        _bump(t)
    else:
        t.data = wrap(values)


def _bump(t: Tensor) -> None:
    t._version += 1  # written in place: autograd sees the change, as torch's version counter does


def _finish(work: Work, async_op: bool):
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor: Tensor, op: str = ReduceOp.SUM, async_op: bool = False, *, name: str | None = None):
    """Reduce ``tensor`` over the ranks, in place (``ReduceOp.AVG`` divides the sum by the world size)."""
    g = group()
    array, store = _buffer(tensor)

    def run() -> None:
        g.backend.all_reduce(array, op)
        if op == ReduceOp.AVG:
            np.divide(array, g.world_size, out=array, casting="unsafe") if isinstance(array, np.ndarray) \
                else array.div_(g.world_size)
    work = g.issue(describe("all_reduce", tensor, name, f" op={op}"), run, array.nbytes, store)
    work.result = [tensor]
    return _finish(work, async_op)


def broadcast(tensor: Tensor, src: int = 0, async_op: bool = False, *, name: str | None = None):
    """Give every rank ``src``'s ``tensor``, in place."""
    g = group()
    _check_rank(src, "broadcast src")
    array, store = _buffer(tensor)
    work = g.issue(describe("broadcast", tensor, name, f" src={src}"), lambda: g.backend.broadcast(array, src),
                   array.nbytes if g.rank == src else 0, store)
    work.result = [tensor]
    return _finish(work, async_op)


def all_gather(tensor_list: list, tensor: Tensor, async_op: bool = False, *, name: str | None = None):
    """``tensor_list[r]`` gets rank r's ``tensor`` (torch's argument order)."""
    g = group()
    if len(tensor_list) != g.world_size:
        raise DistributedError(f"all_gather: tensor_list has {len(tensor_list)} tensors for {g.world_size} ranks")
    array, _ = _buffer(tensor)
    gathered = np.empty((g.world_size,) + tuple(array.shape), array.dtype)

    def store() -> None:
        for out, row in zip(tensor_list, gathered):
            _store(out, row.reshape(out.shape))
    work = g.issue(describe("all_gather", tensor, name), lambda: g.backend.all_gather(gathered, array),
                   array.nbytes, store)
    work.result = list(tensor_list)
    return _finish(work, async_op)


def reduce_scatter(output: Tensor, input_list: list, op: str = ReduceOp.SUM, async_op: bool = False, *,
                   name: str | None = None):
    """``output`` on rank r gets the reduction over the ranks of their ``input_list[r]``."""
    g = group()
    if len(input_list) != g.world_size:
        raise DistributedError(f"reduce_scatter: input_list has {len(input_list)} tensors for {g.world_size} ranks")
    stacked = np.stack([np.asarray(contiguous(t._data)) for t in input_list])
    out, store = _buffer(output)

    def run() -> None:
        g.backend.reduce_scatter(out, stacked, op)
        if op == ReduceOp.AVG:
            np.divide(out, g.world_size, out=out, casting="unsafe")
    return _finish(g.issue(describe("reduce_scatter", output, name, f" op={op}"), run, stacked.nbytes, store),
                   async_op)


def send(tensor: Tensor, dst: int, tag: int = 0) -> None:
    """Send ``tensor`` to rank ``dst`` (blocking; point to point, so no metadata check)."""
    g = group()
    _check_rank(dst, "send dst")
    array, _ = _buffer(tensor)
    _finish(g.issue(f"send to rank {dst}", lambda: g.backend.send(array, dst, tag), array.nbytes, collective=False),
            False)


def recv(tensor: Tensor, src: int, tag: int = 0) -> None:
    """Receive into ``tensor`` from rank ``src``."""
    g = group()
    _check_rank(src, "recv src")
    array, store = _buffer(tensor)
    _finish(g.issue(f"recv from rank {src}", lambda: g.backend.recv(array, src, tag), 0, store, collective=False),
            False)


def send_recv(tensor: Tensor, dst: int, out: Tensor, src: int, send_tag: int = 0, recv_tag: int = 0) -> None:
    """Send ``tensor`` to ``dst`` and receive ``out`` from ``src`` in one step, both posted before
    either waits (MPI's ``Sendrecv``, torch's ``batch_isend_irecv``): what a 1F1B pipeline stage
    does with each neighbour, which two blocking sends toward each other would deadlock on."""
    g = group()
    _check_rank(dst, "send_recv dst")
    _check_rank(src, "send_recv src")
    array, _ = _buffer(tensor)
    received, store = _buffer(out)
    _finish(g.issue(f"send to rank {dst}, recv from rank {src}",
                    lambda: g.backend.send_recv(array, dst, send_tag, received, src, recv_tag), array.nbytes, store,
                    collective=False), False)


def barrier() -> None:
    g = group()
    _finish(g.issue("barrier", g.backend.barrier, 0), False)


def _check_rank(rank: int, what: str) -> None:
    if not 0 <= rank < get_world_size():
        raise DistributedError(f"{what}={rank} is outside world_size {get_world_size()}")
