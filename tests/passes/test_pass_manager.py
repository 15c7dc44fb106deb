"""The pass manager: order, verification after each pass, IR printing and timing hooks."""
from __future__ import annotations

import io

import numpy as np
import pytest

from lezero.ir import IRError, tensor
from lezero.ir.location import NameLoc
from lezero.ir.printer import print_module
from lezero.passes import (Pass, PassError, PassInstrumentation, PassManager, PipelineError, make_pipeline_runner,
                           register_pass, run_pipeline)
from lezero.passes.registry import _PASSES
from pass_testing import build, op_names

T = tensor((2, 3))


def small_module():
    """f(x) = (x * 1) + x, with a dead neg."""
    def body(b, x):
        b.op("lz.neg", x)
        return b.op("lz.add", b.op("lz.mul", x, b.constant(np.float32(1))), x)
    return build([T], body)


@pytest.fixture
def test_passes():
    log = []

    @register_pass
    class Record(Pass):
        name = "test-record"
        summary = "Append to a log"
        tag: str = ""

        def run(self, module):
            log.append(self.tag)

    @register_pass
    class BreakIR(Pass):
        name = "test-break-ir"
        summary = "Give an lz.add a wrong result type"

        def run(self, module):
            for op in module.walk():
                if op.name == "lz.add":
                    op.results[0].type = tensor((7,))
                    op.location = NameLoc("the_add")

    @register_pass
    class RaiseIRError(Pass):
        name = "test-raise"
        summary = "Raise an IRError"

        def run(self, module):
            raise IRError("cannot do this", NameLoc("somewhere"))

    @register_pass
    class Crash(Pass):
        name = "test-crash"
        summary = "A pass with a bug"

        def run(self, module):
            raise ZeroDivisionError("oops")

    yield log
    for name in ("test-record", "test-break-ir", "test-raise", "test-crash"):
        del _PASSES[name]


def test_run_pipeline_runs_passes_in_order_and_returns_the_module(test_passes):
    m = small_module()
    assert run_pipeline(m, "test-record{tag=a},test-record{tag=b},test-record{tag=c}") is m
    assert test_passes == ["a", "b", "c"]


def test_pass_manager_takes_instances_and_text(test_passes):
    from lezero.passes import get_pass

    pm = PassManager([get_pass("test-record")(tag="x")]).add("test-record{tag=y}").add(get_pass("test-record")("z"))
    assert str(pm) == "test-record{tag=x},test-record{tag=y},test-record{tag=z}"
    pm.run(small_module())
    assert test_passes == ["x", "y", "z"]


def test_a_pass_that_breaks_the_ir_is_named(test_passes):
    with pytest.raises(PassError) as info:
        run_pipeline(small_module(), "cse,test-break-ir,dce")
    e = info.value
    assert e.pass_name == "test-break-ir"
    assert e.message.startswith("pass 'test-break-ir' left invalid IR: 'lz.add' op result type tensor<7xf32>")
    assert e.location == NameLoc("the_add")
    assert str(e).startswith("the_add: error: pass 'test-break-ir' left invalid IR")
    assert all(d.message.startswith("pass 'test-break-ir' left invalid IR") for d in e.diagnostics)


def test_verify_each_false_lets_broken_ir_through(test_passes):
    m = run_pipeline(small_module(), "test-break-ir", verify_each=False)
    assert any(op.result_types == [tensor((7,))] for op in m.walk() if op.name == "lz.add")


def test_invalid_input_is_reported_before_any_pass(test_passes):
    m = small_module()
    run_pipeline(m, "test-break-ir", verify_each=False)
    with pytest.raises(PassError, match="invalid IR before the first pass"):
        run_pipeline(m, "cse")


def test_errors_raised_inside_a_pass_name_it(test_passes):
    with pytest.raises(PassError) as info:
        run_pipeline(small_module(), "test-raise")
    assert str(info.value) == "somewhere: error: pass 'test-raise' failed: cannot do this"
    with pytest.raises(ZeroDivisionError) as crash:
        run_pipeline(small_module(), "test-crash")
    assert "while running pass 'test-crash'" in crash.value.__notes__


def test_pipeline_errors_come_before_running(test_passes):
    with pytest.raises(PipelineError):
        run_pipeline(small_module(), "test-record,nope")


def test_print_ir_after_all():
    m = small_module()
    out = io.StringIO()
    run_pipeline(m, "cse,dce", print_ir_after_all=True, stream=out)
    text = out.getvalue()
    assert "// -----// IR Dump After CommonSubexpressionElimination (cse) //----- //\nmodule {" in text
    assert "// -----// IR Dump After DeadCodeElimination (dce) //----- //\nmodule {" in text
    # the dump after dce is the final IR
    assert text.rstrip().endswith(print_module(m).rstrip())


def test_print_ir_after_change_skips_passes_that_change_nothing():
    out = io.StringIO()
    run_pipeline(small_module(), "cse,dce,cse", print_ir_after_change=True, stream=out)
    text = out.getvalue()
    assert text.count("IR Dump After") == 1
    assert "IR Dump After DeadCodeElimination (dce)" in text and "lz.neg" not in text


def test_print_ir_before_all():
    out = io.StringIO()
    run_pipeline(small_module(), "dce", print_ir_before_all=True, stream=out)
    assert "IR Dump Before DeadCodeElimination (dce)" in out.getvalue() and "lz.neg" in out.getvalue()


def test_time_passes_reports_each_pass():
    out = io.StringIO()
    pm = PassManager("canonicalize,cse,dce", time_passes=True, stream=out)
    pm.run(small_module())
    report = out.getvalue()
    assert "... Execution time report ..." in report
    assert "Total Execution Time:" in report
    lines = report.splitlines()
    names = [line.split(")  ", 1)[1] for line in lines if "%)  " in line]
    assert names == ["canonicalize", "cse", "dce", "(A) verifier", "Total"]
    assert [name for name, _ in pm.timer.entries] == ["canonicalize", "cse", "dce"]
    assert all(t >= 0 for _, t in pm.timer.entries)
    assert lines[-1].strip().startswith(f"{sum(t for _, t in pm.timer.entries) + pm.timer.verifier:.4f}")


def test_instrumentation_hooks_see_each_pass():
    seen = []

    class Spy(PassInstrumentation):
        def before_pass(self, pass_, module):
            seen.append(("before", pass_.name, len(op_names(module))))

        def after_pass(self, pass_, module):
            seen.append(("after", pass_.name, len(op_names(module))))

        def after_pipeline(self, module):
            seen.append(("done",))

    PassManager("canonicalize,dce").add_instrumentation(Spy()).run(small_module())
    assert seen == [("before", "canonicalize", 5), ("after", "canonicalize", 2),
                    ("before", "dce", 2), ("after", "dce", 2), ("done",)]


def test_make_pipeline_runner_parses_early():
    with pytest.raises(PipelineError):
        make_pipeline_runner("cse,xyz")
    runner = make_pipeline_runner("canonicalize", verify_each=True)
    m = small_module()
    assert runner(m) is m
    assert op_names(m) == ["lz.add", "func.return"]
