"""``nn.utils``: gradient clipping (``clip_grad_norm_``, ``clip_grad_value_``, and the two halves
PyTorch splits the first into, ``get_total_norm`` and ``clip_grads_with_norm_``) and
``parameters_to_vector``/``vector_to_parameters``, with PyTorch's arguments and numerics (the
norm of the per-tensor norms; every gradient scaled by ``min(max_norm / (norm + 1e-6), 1)``, even
when that is 1, as PyTorch does).  They run eagerly, on the gradients as they are after
``backward``.
"""
from __future__ import annotations

import math

from lezero.eager.autograd import no_grad
from lezero.eager.core import apply
from lezero.eager.creation import tensor
from lezero.eager.dispatch import EagerOp
from lezero.eager.functions import cat
from lezero.eager.tensor import Tensor
from lezero.optim.grad_clipping import emit_grad_norm


def _tensors(parameters) -> list:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


_TOTAL_NORM = EagerOp("total_norm", lambda b, attrs, *grads: [emit_grad_norm(b, list(grads), attrs["norm_type"])])


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """The ``norm_type`` norm of the tensors' norms (a rank-0 tensor; 0 for none): one op, the
    rule ``compile_train_step`` clips with (``optim.grad_clipping.emit_grad_norm``)."""
    tensors = [t for t in _tensors(tensors) if t is not None]
    norm_type = float(norm_type)
    if not (norm_type == math.inf or norm_type > 0):
        raise ValueError(f"norm_type must be positive or inf, got {norm_type}")
    if not tensors:
        return tensor(0.0)
    with no_grad():
        total = apply(_TOTAL_NORM, (("norm_type", norm_type),), *tensors)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach=None) -> None:
    """Scale every gradient by ``min(max_norm / (total_norm + 1e-6), 1)``, in place."""
    grads = [p.grad for p in _tensors(parameters) if p.grad is not None]
    if not grads:
        return
    with no_grad():
        coefficient = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coefficient.to(g.dtype))


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Scale the gradients so that their total ``norm_type`` norm is at most ``max_norm``;
    returns the total norm before clipping."""
    parameters = _tensors(parameters)
    total = get_total_norm([p.grad for p in parameters], norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient to ``[-clip_value, clip_value]``, in place."""
    clip_value = float(clip_value)
    with no_grad():
        for p in _tensors(parameters):
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters) -> Tensor:
    """The parameters flattened and joined, in order (differentiable)."""
    return cat([p.reshape(-1) for p in _tensors(parameters)])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Copy consecutive slices of the 1-D ``vec`` into the parameters, in order."""
    if not isinstance(vec, Tensor) or vec.ndim != 1:
        raise TypeError(f"expected a 1-D tensor for vec, got {type(vec).__name__}"
                        + (f" of shape {list(vec.shape)}" if isinstance(vec, Tensor) else ""))
    parameters = _tensors(parameters)
    total = sum(p.numel() for p in parameters)
    if vec.numel() != total:
        raise RuntimeError(f"vector_to_parameters: vec has {vec.numel()} elements, the parameters {total}")
    start = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[start:start + n].reshape(p.shape))
            start += n


from lezero.nn.utils import rnn  # noqa: F401,E402  (``lz.nn.utils.rnn``: packed and padded sequences)
