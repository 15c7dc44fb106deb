"""``lz.quantization``: int8 models (issue 12), with PyTorch's ``torch.ao.quantization`` names.

Dynamic (``quantize_dynamic``), static with calibration (``prepare`` -> run data -> ``convert``)
and quantization-aware training (``prepare_qat`` -> train -> ``convert``) of ``nn.Linear``
layers; the quantized layers run the IR's ``lz.dynamic_quantize``/``lz.quantize`` and
``lz.matmul_integer`` (the CPU's int8 GEMM), so they trace, save and export like any module.
"""
from lezero.quantization import functional
from lezero.quantization.modules import (
                                           DynamicQuantizedLinear,
                                           ObservedLinear,
                                           QATLinear,
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
                                           "DynamicQuantizedLinear",
                                           "HistogramObserver",
                                           "MinMaxObserver",
                                           "MovingAverageMinMaxObserver",
                                           "ObservedLinear",
                                           "ObserverBase",
                                           "PerChannelMinMaxObserver",
                                           "QATLinear",
                                           "QuantConfig",
                                           "QuantizedLinear",
                                           "convert",
                                           "functional",
                                           "prepare",
                                           "prepare_qat",
                                           "quantize_dynamic",
]
