"""``lz.nn.parallel``: ``DistributedDataParallel`` and its gradient communication hooks (``comm_hooks``)."""
from lezero.nn.parallel import comm_hooks  # noqa: F401
from lezero.nn.parallel.distributed import DistributedDataParallel, GradBucket  # noqa: F401
from lezero.nn.parallel.tensor_parallel import ColumnParallelLinear, RowParallelLinear  # noqa: F401
