"""``lz.distributed``: process groups and collectives on lz tensors over MPI or torch.distributed.

``init_process_group`` (a ``ClusterConfig``, torch's arguments, or the environment ``lezero-run``
/ torchrun / mpiexec set), ``get_rank``/``get_world_size``/``barrier``/``destroy_process_group``,
and ``all_reduce``/``broadcast``/``all_gather``/``reduce_scatter``/``send``/``recv`` with
``async_op=True`` work handles.  The engines are in ``backends.py``, the group (its ordered
communication thread, the mismatch check, the byte counter) in ``process_group.py``;
``pipeline.py`` runs GPipe's and 1F1B's schedules over send/recv (``send_recv`` for 1F1B's exchanges);
``lz.nn.parallel`` (DistributedDataParallel, the tensor-parallel linear layers) builds on them.
"""
from lezero.distributed import pipeline  # noqa: F401
from lezero.distributed.backends import Backend, MPIBackend, TorchBackend  # noqa: F401
from lezero.distributed.pipeline import Pipe  # noqa: F401
from lezero.distributed.process_group import (  # noqa: F401
                                              ClusterConfig,
                                              CollectiveMismatchError,
                                              DistributedError,
                                              DistributedTimeoutError,
                                              Future,
                                              ProcessGroup,
                                              ReduceOp,
                                              Work,
                                              all_gather,
                                              all_reduce,
                                              barrier,
                                              broadcast,
                                              bytes_sent,
                                              destroy_process_group,
                                              get_backend,
                                              get_rank,
                                              get_world_size,
                                              group,
                                              init_process_group,
                                              is_initialized,
                                              recv,
                                              reduce_scatter,
                                              reset_bytes_sent,
                                              send,
)
