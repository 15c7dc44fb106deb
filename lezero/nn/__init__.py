"""``lz.nn``: modules, layers, losses, ``functional`` and ``init``, as PyTorch names them."""
from lezero.nn import functional, init  # noqa: F401
from lezero.nn.module import Buffer, Module, Parameter  # noqa: F401
from lezero.nn.container import ModuleDict, ModuleList, Sequential  # noqa: F401
from lezero.nn.layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d,  # noqa: F401
                              Dropout, Dropout1d, Dropout2d, Dropout3d, Embedding, Flatten, Identity, LayerNorm,
                              LeakyReLU, Linear, LogSoftmax, MaxPool2d, ReLU, ReLU6, Sigmoid, SiLU, Softmax,
                              Softplus, Tanh, Unflatten)
from lezero.nn.attention import MultiheadAttention  # noqa: F401
from lezero.nn.loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss,  # noqa: F401
                            SmoothL1Loss)
