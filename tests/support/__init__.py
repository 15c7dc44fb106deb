"""Helpers the tests share, imported as ``from support.<module> import ...`` (pyproject.toml puts
tests/ on pytest's ``pythonpath``): IR building and random arrays (``ir_building``), the op samples
every backend runs (``op_samples``), random fused graphs (``fusion_testing``), eager-versus-torch
comparisons (``eager_testing``), native executables and ONNX models (``native_testing``) and IR
text samples (``ir_text_samples``)."""
