"""The converters, one per ONNX operator, grouped by family; importing this package registers
them all in ``lezero.onnx.importer.CONVERTERS``."""
from lezero.onnx.ops import (attention, elementwise, losses, nn, quantization, reduction, resize,  # noqa: F401
                             sampling, tensor, training)
