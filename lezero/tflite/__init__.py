"""lezero's TFLite exporter: ``export(traced, path)`` / ``to_tflite(traced) -> bytes`` write a
``lz.jit.trace`` result as a TFLite flatbuffer (float32, and int8 dynamic-range from
``lz.quantization.quantize_dynamic``) that ``ai_edge_litert``'s interpreter runs; ``ExportError``
names an op it cannot write and the user's line.  ``lz.jit.save(traced, "m.tflite")`` calls it."""
from lezero.tflite.export import ExportError, export, to_tflite

__all__ = ["ExportError", "export", "to_tflite"]
