"""lezero: a compiler-first deep learning framework.

Everything becomes one typed SSA IR (``lezero.ir``), goes through pass pipelines
(``lezero.passes``) and is compiled for the CPU with LLVM and for the GPU with Triton
(``lezero.codegen``, ``lezero.runtime``).
``import lezero as lz`` gives the eager, PyTorch-like API on top of that one path (``lezero.eager``):
``lz.Tensor``, autograd, ``lz.nn``, ``lz.optim``, ``lz.utils.data``, ``lz.save``/``lz.load``.
"""
__version__ = "0.1.0"


def compile(module_or_text, entry=None, target="cpu", cpu=None):  # noqa: A001 - the name users expect
    """Compile ``@entry`` of an IR module (or MLIR text) for ``target`` (``"cpu"`` or ``"cuda"``),
    its host code for ``cpu`` (LLVM's CPU names, default ``$LEZERO_CPU`` or ``"host"``); see
    ``lezero.runtime.cpu`` and ``lezero.runtime.cuda``."""
    from lezero.runtime import compile as _compile

    return _compile(module_or_text, entry, target, cpu)


from lezero.eager.dtypes import (bool_ as bool, double, dtype, float16, float32, float64,  # noqa: E402,A001
                                 get_default_dtype, half, int8, int16, int32, int64, long, set_default_dtype, uint8)
from lezero.eager.dtypes import int_ as int  # noqa: E402,A001
from lezero.eager.dtypes import bfloat16  # noqa: E402
from lezero.eager.dispatch import OperatorError  # noqa: E402
from lezero.runtime.devices import Device, DeviceError, device  # noqa: E402
from lezero.eager.tensor import Tensor  # noqa: E402
from lezero.eager import cuda  # noqa: E402  (lz.cuda.is_available)
from lezero.eager.creation import (Generator, arange, as_tensor, bernoulli, default_generator, empty,  # noqa: E402
                                   empty_like, eye, from_numpy, full, full_like, initial_seed, linspace, manual_seed,
                                   normal, ones, ones_like, rand, rand_like, randint, randn, randn_like, randperm,
                                   seed, tensor, zeros, zeros_like)
from lezero.eager.functions import *  # noqa: E402,F401,F403
# issue 19's tensor functions: einsum, the triangle indices, lz.linalg and lz.fft
from lezero.eager.einsum import einsum  # noqa: E402
from lezero.eager.selection import tril_indices, triu_indices  # noqa: E402
from lezero.eager import fft, linalg  # noqa: E402
from lezero.eager.autograd import (enable_grad, inference_mode, is_grad_enabled, no_grad,  # noqa: E402
                                   set_grad_enabled, value_and_grad)
from lezero.eager.autograd import grad_transform as grad  # noqa: E402
from lezero.eager import autograd  # noqa: E402
from lezero.eager.serialization import load, save  # noqa: E402
# issue 17's explicit loops and conditions (JAX's names): a trace keeps each as one lz.for/lz.while/lz.if
from lezero.eager.control_flow import cond, fori_loop, scan, while_loop  # noqa: E402
from lezero.eager.creation import from_dlpack  # noqa: E402  (torch.from_dlpack)
# issue 15's RNG state (torch.get_rng_state / set_rng_state), for resumable training
from lezero.eager.creation import get_rng_state, set_rng_state  # noqa: E402
from lezero.eager.interop import ForeignInputError  # noqa: E402
from lezero import nn, optim, utils  # noqa: E402
from lezero import jit  # noqa: E402  (lz.jit.trace, lz.jit.compile_train_step)
# issue 14: process groups and collectives (lz.distributed.init_process_group, all_reduce, ...)
from lezero import distributed  # noqa: E402
# issue 13's mixed precision: lz.amp.GradScaler, and lz.autocast as torch.autocast
from lezero import amp  # noqa: E402
from lezero.amp import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: E402
# issue 16's profiler: lz.profiler.profile, record_function, tensorboard_trace_handler (torch.profiler)
from lezero import profiler  # noqa: E402
# issue 12's int8 quantization: lz.quantization.quantize_dynamic, prepare/convert, prepare_qat (torch.ao.quantization)
from lezero import quantization  # noqa: E402

# PyTorch's users write `from torch.autograd import grad` and `import torch.cuda`: the same paths
# reach the eager engine's modules here (their home is lezero/eager/, the layer they belong to).
import sys as _sys  # noqa: E402

_sys.modules[__name__ + ".autograd"] = autograd
_sys.modules[__name__ + ".cuda"] = cuda
