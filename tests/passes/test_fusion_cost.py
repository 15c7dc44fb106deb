"""partition's cost model (lezero/passes/fusion_cost.py): which legal fusions it refuses and why,
from the estimates it logs.  Timings are benchmarks/fusion.py's, never asserted here."""
from __future__ import annotations

import io

import pytest

from lezero.cli.opt import run as opt_run
from lezero.ir import parse_module
from lezero.passes import fusion_cost, run_pipeline
from pass_testing import fusion_logged, groups_of


def partition(text, options=""):
    """The groups of ``text`` after partition, and the fusion log."""
    module, log = fusion_logged(text, f"partition{{{options}}}" if options else "partition")
    return groups_of(module), log


@pytest.fixture
def facts(monkeypatch):
    """Replace the code generators' answers: ``facts(contraction_kernel, reduction_row_cache)``
    registers them for the CPU; none are registered until then, and the registry is restored
    after the test."""
    monkeypatch.setattr(fusion_cost, "_BACKEND_FACTS", {})

    def register(contraction_kernel=lambda anchor, strides: ("gemm", 1), reduction_row_cache=0):
        fusion_cost.register_backend_facts("cpu", fusion_cost.BackendFacts(contraction_kernel, reduction_row_cache))
    return register


def transpose_add(shape, perm):
    out = [shape[p] for p in perm]
    t, r = "x".join(map(str, shape)), "x".join(map(str, out))
    return f"""
func.func @f(%x: tensor<{t}xf32>, %y: tensor<{r}xf32>) -> tensor<{r}xf32> {{
  %0 = "lz.transpose"(%x) {{perm = array<i64: {", ".join(map(str, perm))}>}} : (tensor<{t}xf32>) -> tensor<{r}xf32>
  %1 = "lz.add"(%0, %y) : (tensor<{r}xf32>, tensor<{r}xf32>) -> tensor<{r}xf32>
  func.return %1 : tensor<{r}xf32>
}}"""


@pytest.mark.parametrize("shape, perm", [((1024, 1024), (1, 0)), ((64, 4096), (1, 0)), ((12, 197, 64), (0, 2, 1))])
def test_a_transpose_striding_along_the_vectorized_loop_stays_a_kernel_of_its_own(shape, perm):
    groups, log = partition(transpose_add(shape, perm))
    assert groups == [("elementwise", ["transpose"]), ("elementwise", ["add"])]
    assert "the fused kernel would be slower than its parts" in log
    assert "strided read of an argument x8" in log


def test_a_transpose_keeping_the_contiguous_dim_innermost_fuses():
    groups, log = partition(transpose_add((197, 12, 64), (1, 0, 2)))
    assert groups == [("elementwise", ["transpose", "add"])]
    assert "merged" in log and "estimated" in log and "strided" not in log


def test_a_small_transpose_fuses():
    """Below a vector's worth of stride the read is contiguous enough: (8 x 4)^T reads 4 apart."""
    groups, _ = partition(transpose_add((8, 4), (1, 0)))
    assert groups == [("elementwise", ["transpose", "add"])]


def test_cost_model_false_takes_every_legal_fusion():
    groups, log = partition(transpose_add((1024, 1024), (1, 0)), "cost-model=false")
    assert groups == [("elementwise", ["transpose", "add"])]
    assert "estimated" not in log


SOFTMAX = """
func.func @f(%x: tensor<12x197x197xf32>) -> tensor<12x197x197xf32> {
  %0 = "lz.softmax"(%x) : (tensor<12x197x197xf32>) -> tensor<12x197x197xf32>
  func.return %0 : tensor<12x197x197xf32>
}"""


@pytest.mark.parametrize("row_cache", [0, 8192])
def test_softmax_is_one_kernel_whether_or_not_exp_is_computed_twice(facts, row_cache):
    facts(reduction_row_cache=row_cache)
    m = parse_module(SOFTMAX)
    run_pipeline(m, "decompose")
    groups, log = partition(str(m))
    assert groups == [("reduction", ["reduce_max", "sub", "exp", "reduce_sum", "div"])]
    # for the sum and for the division, unless the sum's row is kept: cheaper than storing it
    assert ("lz.exp computed 2 times" in log) == (row_cache == 0)


def reduction_of_chain(rows, cols, chain):
    """``e / sum(e)`` along the rows, for ``e`` = the unary ops of ``chain`` applied to x in turn."""
    t, r = f"tensor<{rows}x{cols}xf32>", f"tensor<{rows}x1xf32>"
    lines = [f'  %{i + 1} = "lz.{name}"(%{i}) : ({t}) -> {t}' for i, name in enumerate(chain)]
    e = f"%{len(chain)}"
    return "\n".join([f"func.func @f(%0: {t}) -> {t} {{", *lines,
                      f'  %s = "lz.reduce_sum"({e}) {{axes = array<i64: 1>, keepdims = true}} : ({t}) -> {r}',
                      f'  %y = "lz.div"({e}, %s) : ({t}, {r}) -> {t}', f"  func.return %y : {t}", "}"])


def test_a_prologue_recomputed_in_two_passes_is_refused_when_storing_it_is_cheaper(facts):
    """exp, tanh and erf feed the sum and the division by it: fused, all three are computed in
    both passes over a row longer than the backend keeps; apart, once, and the row is stored and
    read back."""
    facts(reduction_row_cache=8192)
    groups, log = partition(reduction_of_chain(16, 16384, ["exp", "tanh", "erf"]))
    assert groups == [("elementwise", ["exp", "tanh", "erf"]), ("reduction", ["reduce_sum", "div"])]
    assert "lz.erf computed 2 times" in log and "slower than its parts" in log


def test_a_prologue_in_a_row_the_backend_keeps_is_computed_once(facts):
    facts(reduction_row_cache=8192)
    groups, log = partition(reduction_of_chain(64, 4096, ["exp", "tanh", "erf"]))
    assert groups == [("reduction", ["exp", "tanh", "erf", "reduce_sum", "div"])]
    assert "computed 2 times" not in log


def test_a_cheap_prologue_recomputed_in_two_passes_fuses(facts):
    facts(reduction_row_cache=0)
    groups, _ = partition(reduction_of_chain(64, 4096, ["exp"]))
    assert groups == [("reduction", ["exp", "reduce_sum", "div"])]


def test_a_row_too_long_for_the_cache_is_read_again_by_every_pass(facts):
    facts(reduction_row_cache=8192)
    _, log = partition(reduction_of_chain(1, 1 << 22, ["exp"]))
    assert "rows of 16777216 bytes read again per pass" in log


MATMUL_OF_TRANSPOSE = """
func.func @f(%x: tensor<1x197x768xf32>, %w: tensor<768x2304xf32>) -> tensor<197x1x2304xf32> {
  %0 = "lz.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<1x197x768xf32>) -> tensor<197x1x768xf32>
  %1 = "lz.matmul"(%0, %w) : (tensor<197x1x768xf32>, tensor<768x2304xf32>) -> tensor<197x1x2304xf32>
  func.return %1 : tensor<197x1x2304xf32>
}"""


def test_a_transposed_operand_the_gemm_packs_fuses(facts):
    asked = []

    def query(anchor, strides):
        asked.append(strides)
        return "gemm", 1
    facts(query)
    groups, log = partition(MATMUL_OF_TRANSPOSE)
    assert groups == [("matmul", ["transpose", "matmul"])]
    assert ((768, 151296, 1), None) in asked  # the transpose's view of x: its row-major strides permuted
    assert (None, None) in asked  # the matmul alone, reading its operand as stored
    assert "gemm" in log


def test_a_transposed_operand_that_leaves_the_gemm_is_refused(facts):
    facts(lambda anchor, strides: ("loops" if strides[0] else "gemm", 1))
    groups, log = partition(MATMUL_OF_TRANSPOSE)
    assert groups == [("elementwise", ["transpose"]), ("matmul", ["matmul"])]
    assert "slower than its parts" in log and "loops" in log


def test_a_transposed_operand_that_splits_the_gemm_into_batches_is_refused(facts):
    """197 GEMMs of one row each read the 7 MB weight again."""
    facts(lambda anchor, strides: ("gemm", 197 if strides[0] else 1))
    groups, log = partition(MATMUL_OF_TRANSPOSE)
    assert groups == [("elementwise", ["transpose"]), ("matmul", ["matmul"])]
    assert "B read by each of 197 GEMMs" in log


def test_without_a_code_generator_the_estimate_says_it_did_not_ask(facts):
    groups, log = partition(MATMUL_OF_TRANSPOSE)
    assert groups == [("matmul", ["transpose", "matmul"])]
    assert "kernel not asked" in log


def test_the_cpu_backend_answers():
    """Loading the CPU backend registers its facts (the compile pipeline loads it before partition)."""
    from lezero.codegen import targets

    targets.backend("cpu")
    groups, log = partition(MATMUL_OF_TRANSPOSE)
    assert groups == [("matmul", ["transpose", "matmul"])]
    assert "kernel not asked" not in log and ("gemm" in log or "dots" in log)


def test_epilogues_and_elementwise_chains_fuse():
    t, v = "tensor<256x512xf32>", "tensor<512xf32>"
    text = f"""
func.func @f(%x: tensor<256x64xf32>, %w: tensor<64x512xf32>, %b: {v}) -> {t} {{
  %0 = "lz.matmul"(%x, %w) : (tensor<256x64xf32>, tensor<64x512xf32>) -> {t}
  %1 = "lz.add"(%0, %b) : ({t}, {v}) -> {t}
  %2 = "lz.gelu"(%1) : ({t}) -> {t}
  %3 = "lz.mul"(%2, %2) : ({t}, {t}) -> {t}
  func.return %3 : {t}
}}"""
    groups, _ = partition(text)
    assert groups == [("matmul", ["matmul", "add", "gelu", "mul"])]


def test_debug_fusion_prints_the_estimates(tmp_path):
    path = tmp_path / "f.mlir"
    path.write_text(transpose_add((1024, 1024), (1, 0)))
    out, err = io.StringIO(), io.StringIO()
    assert opt_run([str(path), "-p", "partition", "--debug=fusion"], out, err) == 0
    line = next(line for line in err.getvalue().splitlines() if "refused" in line)
    assert line.startswith("fusion: @f: refused lz_fused_transpose")
    assert "estimated" in line and " us (" in line and "MB" in line and "> parts" in line
