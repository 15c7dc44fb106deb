"""canonicalize's ``_product_of_rows``: a matmul of a reshape merging leading dims into rows,
reshaped back to those dims (GPT-2's Conv1D: ``view(-1, k)``, ``addmm``, ``view``), becomes the
matmul of the unreshaped activations, with the bias (rank <= 1) after it; each case computes what
it computed before (the interpreter), and the cases that must stay keep their reshapes."""
from __future__ import annotations

import numpy as np
import pytest
from pass_testing import build, op_names, run_and_compare

from lezero.ir import tensor


def row_product(epilogue=None, bias_shape=(8,), back=(2, 3, 8), extra_reader=False):
    def body(b, x, w, bias):
        rows = b.op("lz.reshape", x, shape=[-1, 4])
        product = b.op("lz.matmul", rows, w)
        y = product if epilogue is None else b.op(epilogue, product, bias)
        out = b.op("lz.reshape", y, shape=list(back))
        return [out, product] if extra_reader else out

    return build([tensor((2, 3, 4), "f32"), tensor((4, 8), "f32"), tensor(bias_shape, "f32")], body)


@pytest.mark.parametrize("epilogue", [None, "lz.add", "lz.sub", "lz.mul", "lz.div"])
def test_reshapes_around_a_row_product_go(epilogue):
    m = run_and_compare(row_product(epilogue), "canonicalize,dce")
    names = op_names(m)
    assert "lz.reshape" not in names and names.count("lz.matmul") == 1
    matmul = next(op for op in m.lookup("f").entry_block.ops if op.name == "lz.matmul")
    assert matmul.operands[0].type.shape == (2, 3, 4) and matmul.result.type.shape == (2, 3, 8)


@pytest.mark.parametrize("case", [
    dict(epilogue="lz.add", bias_shape=(6, 8)),   # a bias per row: it has the rows' shape
    dict(back=(3, 2, 8)),                         # another split of the rows than x's
    dict(extra_reader=True),                      # the 2-D product is read again
])
def test_row_products_that_stay(case):
    m = run_and_compare(row_product(**case), "canonicalize,dce")
    assert op_names(m).count("lz.reshape") == 2
