"""``lz.nn``: modules, layers, losses, ``functional`` and ``init``, as PyTorch names them."""
from lezero.nn import functional, init  # noqa: F401
from lezero.nn.module import Buffer, Module, Parameter  # noqa: F401
from lezero.nn.container import ModuleDict, ModuleList, Sequential  # noqa: F401
from lezero.nn.layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d,  # noqa: F401
                              Dropout, Dropout1d, Dropout2d, Dropout3d, Embedding, Flatten, Identity, LayerNorm,
                              LeakyReLU, Linear, LogSoftmax, MaxPool2d, ReLU, ReLU6, Sigmoid, SiLU, Softmax,
                              Softplus, Tanh, Unflatten)
from lezero.nn.attention import MultiheadAttention  # noqa: F401
from lezero.nn.loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss,  # noqa: F401
                            SmoothL1Loss)
# issue 19's layers: convolutions, activations, normalizations, padding, resampling, bags, transformers
from lezero.nn.convolution import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d  # noqa: F401,E402
from lezero.nn.activation import (CELU, ELU, GLU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh,  # noqa: F401,E402
                                  LogSigmoid, Mish, PReLU, Softshrink, Softsign, Tanhshrink, Threshold)
from lezero.nn.normalization import GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, RMSNorm  # noqa: F401,E402
from lezero.nn.padding import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d,  # noqa: F401,E402
                               ConstantPad2d, ConstantPad3d, ReflectionPad1d, ReflectionPad2d, ReflectionPad3d,
                               ReplicationPad1d, ReplicationPad2d, ReplicationPad3d, ZeroPad1d, ZeroPad2d, ZeroPad3d)
from lezero.nn.resampling import (PixelShuffle, PixelUnshuffle, Upsample, UpsamplingBilinear2d,  # noqa: F401,E402
                                  UpsamplingNearest2d)
from lezero.nn.embedding_bag import EmbeddingBag  # noqa: F401,E402
from lezero.nn.layers import AdaptiveAvgPool1d, AvgPool1d, MaxPool1d  # noqa: F401,E402
from lezero.nn.transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,  # noqa: F401,E402
                                   TransformerEncoder, TransformerEncoderLayer)
from lezero.nn import utils  # noqa: F401,E402
# issue 17's recurrent layers
from lezero.nn.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: F401,E402
# issue 14's data parallelism: DistributedDataParallel and its comm hooks
from lezero.nn import parallel  # noqa: F401,E402
