"""The engines under ``lz.distributed``: one ``Backend`` interface, an MPI and a torch.distributed one.

A backend moves the bytes of host arrays (numpy, C-contiguous, written in place) or, for
torch.distributed, of torch tensors too (a cuda tensor's storage goes to nccl as it is).  Nothing
here is a transport of our own: MPI through mpi4py (MPICH), torch.distributed's gloo or nccl.

- ``MPIBackend``: ``MPI.COMM_WORLD``; its ranks come from the launcher (``mpiexec``).  MPI has no
  16-bit float sum, so float16 and bfloat16 reduce with user-defined MPI ops over their bits
  (``_SIXTEEN_BIT_OPS``: numpy adds in the storage type, as torch's gloo does for float16).
- ``TorchBackend``: ``torch.distributed`` with ``gloo`` (CPU) or ``nccl`` (cuda tensors; it needs
  a GPU, so it is not tested on this machine).  A numpy array crosses as ``torch.from_numpy`` of the
  same memory (bfloat16 as an int16 view retyped ``torch.bfloat16``): no copy either way.

The ``ProcessGroup`` (``process_group.py``) calls these from its one communication thread, in the
order the program issued the collectives, so a backend call may block.
"""
from __future__ import annotations

import datetime

import numpy as np

from lezero.eager.dtypes import BFLOAT16_STORAGE

REDUCE_OPS = ("sum", "avg", "product", "min", "max")


class Backend:
    """What a process group needs from an engine.  ``op`` is one of ``REDUCE_OPS`` (``avg`` is
    done as ``sum`` then a division by the caller); arrays are C-contiguous and written in place."""

    name = "?"
    rank: int
    world_size: int

    def all_reduce(self, array, op: str) -> None:
        raise NotImplementedError

    def broadcast(self, array, src: int) -> None:
        raise NotImplementedError

    def all_gather(self, out, array) -> None:
        """``out`` (``world_size`` x ``array.shape``) gets every rank's ``array``, in rank order."""
        raise NotImplementedError

    def reduce_scatter(self, out, array, op: str) -> None:
        """``array`` (``world_size`` x ``out.shape``) reduced over the ranks; rank r keeps row r."""
        raise NotImplementedError

    def send(self, array, dst: int, tag: int) -> None:
        raise NotImplementedError

    def send_recv(self, array, dst: int, send_tag: int, out, src: int, recv_tag: int) -> None:
        """Send ``array`` to ``dst`` and receive ``out`` from ``src`` at once (both posted before
        either blocks: two ranks exchanging with each other cannot deadlock)."""
        raise NotImplementedError

    def recv(self, array, src: int, tag: int) -> None:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class MPIBackend(Backend):
    name = "mpi"

    def __init__(self):
        from mpi4py import (
            MPI,  # the backend's engine: imported only by a program that asks for mpi
        )

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD.Dup()  # our own communicator: no clash with the user's MPI traffic
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        self._ops = {"sum": MPI.SUM, "avg": MPI.SUM, "product": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}
        self._sixteen_bit = {}

    def _reduce_op(self, array, op: str):
        """MPI's op for ``array``'s dtype, and the array as MPI sees it (16-bit floats as their bits)."""
        if array.dtype in (np.float16, BFLOAT16_STORAGE):
            key = (array.dtype.name, op)
            if key not in self._sixteen_bit:
                self._sixteen_bit[key] = self.MPI.Op.Create(_sixteen_bit_reduction(array.dtype, op), commute=True)
            return self._sixteen_bit[key], [array.view(np.uint16), self.MPI.UINT16_T]
        return self._ops[op], _as_mpi_buffer(array)

    def all_reduce(self, array, op: str) -> None:
        mpi_op, buffer = self._reduce_op(array, op)
        self.comm.Allreduce(self.MPI.IN_PLACE, buffer, op=mpi_op)

    def broadcast(self, array, src: int) -> None:
        self.comm.Bcast(_as_mpi_buffer(array), root=src)

    def all_gather(self, out, array) -> None:
        self.comm.Allgather(_as_mpi_buffer(array), _as_mpi_buffer(out))

    def reduce_scatter(self, out, array, op: str) -> None:
        mpi_op, buffer = self._reduce_op(array, op)
        _, out_buffer = self._reduce_op(out, op)
        self.comm.Reduce_scatter_block(buffer, out_buffer, op=mpi_op)

    def send(self, array, dst: int, tag: int) -> None:
        self.comm.Send(_as_mpi_buffer(array), dest=dst, tag=tag)

    def send_recv(self, array, dst: int, send_tag: int, out, src: int, recv_tag: int) -> None:
        self.comm.Sendrecv(_as_mpi_buffer(array), dest=dst, sendtag=send_tag, recvbuf=_as_mpi_buffer(out),
                           source=src, recvtag=recv_tag)

    def recv(self, array, src: int, tag: int) -> None:
        self.comm.Recv(_as_mpi_buffer(array), source=src, tag=tag)

    def barrier(self) -> None:
        self.comm.Barrier()

    def close(self) -> None:
        for op in self._sixteen_bit.values():
            op.Free()
        self.comm.Free()


def _as_mpi_buffer(array):
    """bfloat16 (no MPI type) and booleans travel as their bytes; the rest as themselves."""
    if array.dtype == BFLOAT16_STORAGE:
        return array.view(np.uint16)
    if array.dtype == np.bool_:
        return array.view(np.uint8)
    return array


def _sixteen_bit_reduction(dtype: np.dtype, op: str):
    combine = {"sum": np.add, "avg": np.add, "product": np.multiply, "min": np.minimum, "max": np.maximum}[op]

    def reduce(incoming, inout, _datatype) -> None:
        a = np.frombuffer(incoming, dtype=dtype)
        b = np.frombuffer(inout, dtype=dtype)
        combine(b, a, out=b)
    return reduce


class TorchBackend(Backend):
    """torch.distributed's ``gloo`` or ``nccl``, initialised from ``MASTER_ADDR``/``MASTER_PORT``."""

    def __init__(self, name: str, rank: int, world_size: int, master_addr: str, master_port: int,
                 timeout_s: float):
        import torch  # the backend's engine: imported only by a program that asks for gloo or nccl
        import torch.distributed as dist

        self.torch, self.dist, self.name = torch, dist, name
        self.rank, self.world_size = rank, world_size
        dist.init_process_group(name, init_method=f"tcp://{master_addr}:{master_port}", rank=rank,
                                world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))
        self._ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT,
                     "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}

    def _tensor(self, array):
        """The same memory as a torch tensor (a cuda tensor's storage already is one)."""
        if isinstance(array, np.ndarray):
            if array.dtype == BFLOAT16_STORAGE:
                return self.torch.from_numpy(array.view(np.int16)).view(self.torch.bfloat16)
            return self.torch.from_numpy(array)
        return array

    def all_reduce(self, array, op: str) -> None:
        self.dist.all_reduce(self._tensor(array), op=self._ops[op])

    def broadcast(self, array, src: int) -> None:
        self.dist.broadcast(self._tensor(array), src=src)

    def all_gather(self, out, array) -> None:
        # torch's flat form: world_size x n elements out of n (the arrays are C-contiguous: views, no copy)
        self.dist.all_gather_single(self._tensor(out.reshape(-1)), self._tensor(array.reshape(-1)))

    def reduce_scatter(self, out, array, op: str) -> None:
        if self.name == "gloo":  # gloo has no reduce_scatter: an all-reduce, then this rank's row
            whole = self._tensor(array).clone()
            self.dist.all_reduce(whole, op=self._ops[op])
            self._tensor(out).copy_(whole[self.rank])
            return
        self.dist.reduce_scatter_tensor(self._tensor(out), self._tensor(array), op=self._ops[op])

    def send(self, array, dst: int, tag: int) -> None:
        self.dist.send(self._tensor(array), dst=dst, tag=tag)

    def send_recv(self, array, dst: int, send_tag: int, out, src: int, recv_tag: int) -> None:
        d = self.dist
        for work in d.batch_isend_irecv([d.P2POp(d.isend, self._tensor(array), dst, tag=send_tag),
                                         d.P2POp(d.irecv, self._tensor(out), src, tag=recv_tag)]):
            work.wait()

    def recv(self, array, src: int, tag: int) -> None:
        self.dist.recv(self._tensor(array), src=src, tag=tag)

    def barrier(self) -> None:
        self.dist.barrier()

    def close(self) -> None:
        self.dist.destroy_process_group()
