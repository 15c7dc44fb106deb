"""Code generators: lz kernels to LLVM IR (``llvm/``, target "cpu") and Triton (``triton/``,
target "cuda"), around a target-neutral core (``kernel.py``, ``contraction_shapes.py``,
``value_at_index.py``, ...); ``targets.py`` lists the backends, ``schedule.py`` is the pipeline
every compilation runs before code generation."""
