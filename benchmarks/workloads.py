"""Workloads more than one benchmark measures (imported as a plain module, as ``timing``)."""
from __future__ import annotations


def gelu_function(rows: int, cols: int) -> str:
    """``gelu(x * a + b)`` (exact gelu; ``a`` and ``b`` per column) as lz IR: the partitioner fuses
    it into one elementwise kernel."""
    t, v = f"tensor<{rows}x{cols}xf32>", f"tensor<{cols}xf32>"
    return "\n".join([f'func.func @f(%x: {t}, %a: {v}, %b: {v}) -> {t} {{',
                      f'  %0 = "lz.mul"(%x, %a) : ({t}, {v}) -> {t}',
                      f'  %1 = "lz.add"(%0, %b) : ({t}, {v}) -> {t}',
                      f'  %2 = "lz.gelu"(%1) : ({t}) -> {t}',
                      f'  func.return %2 : {t}', '}'])
