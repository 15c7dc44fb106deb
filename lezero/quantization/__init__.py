"""``lz.quantization``: int8 models (issue 12), with PyTorch's ``torch.ao.quantization`` names.

Dynamic (``quantize_dynamic``), static with calibration (``prepare`` -> run data -> ``convert``)
and quantization-aware training (``prepare_qat`` -> train -> ``convert``) of ``nn.Linear``
layers, and statically or with QAT of ``nn.Conv2d`` layers (their batch norms and relus fused in
first by ``fuse_modules``); the quantized layers run the IR's ``lz.dynamic_quantize``/``lz.quantize``,
``lz.matmul_integer`` and ``lz.conv_integer`` (the CPU's int8 GEMM), so they trace, save and
export like any module.
"""
from lezero.quantization import functional
from lezero.quantization.fusion import fuse_modules
from lezero.quantization.modules import (
                                           ConvReLU2d,
                                           DynamicQuantizedLinear,
                                           ObservedConv2d,
                                           ObservedLinear,
                                           QATConv2d,
                                           QATLinear,
                                           QuantizedConv2d,
                                           QuantizedLinear,
)
from lezero.quantization.observers import (
                                           HistogramObserver,
                                           MinMaxObserver,
                                           MovingAverageMinMaxObserver,
                                           ObserverBase,
                                           PerChannelMinMaxObserver,
)
from lezero.quantization.quantize import (
                                           QuantConfig,
                                           convert,
                                           prepare,
                                           prepare_qat,
                                           quantize_dynamic,
)

__all__ = [
                                           "ConvReLU2d",
                                           "DynamicQuantizedLinear",
                                           "HistogramObserver",
                                           "MinMaxObserver",
                                           "MovingAverageMinMaxObserver",
                                           "ObservedConv2d",
                                           "ObservedLinear",
                                           "ObserverBase",
                                           "PerChannelMinMaxObserver",
                                           "QATConv2d",
                                           "QATLinear",
                                           "QuantConfig",
                                           "QuantizedConv2d",
                                           "QuantizedLinear",
                                           "convert",
                                           "functional",
                                           "fuse_modules",
                                           "prepare",
                                           "prepare_qat",
                                           "quantize_dynamic",
]
