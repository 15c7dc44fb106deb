"""``schedule``: the kernel pipeline, verified once at the end (after each pass with LEZERO_VERIFY_EACH=1)."""
from __future__ import annotations

import pytest

import lezero.codegen.schedule as schedule_module
from lezero.codegen.schedule import is_scheduled, schedule
from lezero.ir import parse_module
from lezero.ir.diagnostics import VerifyError
from lezero.ir.types import F32, TensorType

TEXT = """
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "lz.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "lz.add"(%0, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %1 : tensor<4x8xf32>
}
"""


@pytest.mark.parametrize("verify_each", ["1", ""])
def test_schedule_gives_kernels_with_or_without_verifying_each_pass(monkeypatch, verify_each):
    monkeypatch.setenv("LEZERO_VERIFY_EACH", verify_each)
    assert is_scheduled(schedule(parse_module(TEXT)))


def test_invalid_ir_left_by_the_pipeline_is_caught_without_verifying_each_pass(monkeypatch):
    monkeypatch.setenv("LEZERO_VERIFY_EACH", "")
    real = schedule_module.run_pipeline
    seen = {}

    def breaking_pipeline(module, pipeline, verify_each=True):
        seen["verify_each"] = verify_each
        module = real(module, pipeline, verify_each=verify_each)
        kernel = next(op for op in module.lookup("f").entry_block.ops if op.name == "lz.kernel")
        kernel.results[0].type = TensorType((3, 8), F32)  # no longer what its body yields
        return module

    monkeypatch.setattr(schedule_module, "run_pipeline", breaking_pipeline)
    with pytest.raises(VerifyError):
        schedule(parse_module(TEXT))
    assert seen["verify_each"] is False
