"""The converters, grouped by family, one module each; ``lezero.onnx.registry.CONVERTER_MODULES``
lists the families and imports them on the first lookup."""
