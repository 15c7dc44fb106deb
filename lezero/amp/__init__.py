"""Automatic mixed precision (issue 13): ``lz.amp.autocast`` (also ``lz.autocast``) and
``lz.amp.GradScaler``, PyTorch's API.  The policy is one table, ``lezero.passes.autocast``'s,
read by the eager hook (``lezero.eager.autocast``) and by the ``autocast`` pass that
``lz.jit.trace``/``compile_train_step`` run on a graph traced inside a region."""
from lezero.amp.autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled
from lezero.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_enabled"]
