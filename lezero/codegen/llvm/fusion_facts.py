"""The CPU backend's answers to partition's cost model (``lezero/passes/fusion_cost.py``), which
``backend.py`` exposes as ``fusion_facts`` and the backend registry registers.

- Which kernel a matmul runs with its operands read at given strides (a transpose fused into an
  operand permutes its buffer's strides): ``contraction_shapes.matmul_kernel`` for float32 and bf16
  (float32 storage: the same kernels), the dtypes whose kernels tell the packed GEMM from the loop
  kernel; every other dtype runs the loop kernel whatever the strides, fused or not;
  ``lz.matmul_integer`` runs the int8 GEMM.
- The longest row a row reduction keeps for its later passes (``reduction.ROW_CACHE``).
"""
from __future__ import annotations

from lezero.codegen.contraction_shapes import MatmulShape, matmul_kernel
from lezero.codegen.llvm.reduction import ROW_CACHE
from lezero.ir.core import Operation
from lezero.ir.types import BF16, F32
from lezero.passes.fusion_cost import BackendFacts


def contraction_kernel(anchor: Operation, strides: tuple) -> tuple[str, int]:
    """``(kernel, gemms)`` of ``lz.matmul`` ``anchor`` with its operands read with ``strides``
    (per operand; None for row-major)."""
    if anchor.name == "lz.matmul_integer":  # the int8 GEMM (integer_gemm.py), its operands row-major
        return "gemm", MatmulShape.of(anchor).batches_as_rows().batches
    if anchor.result.type.element_type not in (F32, BF16):
        return "loops", MatmulShape.of(anchor, *strides).batches
    kernel, shape = matmul_kernel(anchor, *strides)
    return kernel, shape.batches


FUSION_FACTS = BackendFacts(contraction_kernel=contraction_kernel, reduction_row_cache=ROW_CACHE)
