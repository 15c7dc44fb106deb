"""ONNX's backend test cases run against lezero: every case compiled for the CPU and compared with
its expected outputs the way ``onnx.backend.test`` compares them (same dtype and shape, then
``assert_allclose`` with the case's rtol/atol).

Suites: ``node`` (``onnx.backend.test.case.node.collect_testcases``: one or a few operators per
case, ~1,900 cases), and the model folders shipped in ``onnx/backend/test/data``: ``simple``,
``pytorch-converted``, ``pytorch-operator``.  Cases of operator families lezero leaves out of
scope (``OUT_OF_SCOPE``) or that use element types lezero does not have are counted as skipped,
with the reason, and still count in the total.

``run_suite(name, workers=2)`` returns one ``CaseResult`` per case; ``report(results)`` is the
per-operator table ``tools/onnx_conformance.py`` prints.
"""
from __future__ import annotations

import collections
import concurrent.futures
import glob
import multiprocessing
import os
import threading
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

import lezero.onnx.element_types as element_types

# Operator families out of scope, with the reason (their cases are counted as skipped).
OUT_OF_SCOPE_FAMILIES = {
    "strings": ("string tensors", {"StringNormalizer", "StringSplit", "StringConcat", "RegexFullMatch",
                                   "LabelEncoder", "TfIdfVectorizer"}),
    "sequences and optionals": ("sequence and optional values (lezero's values are tensors)", {
        "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
        "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
        "OptionalHasElement"}),
    "random": ("random number generation", {"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform",
                                            "RandomUniformLike", "Multinomial"}),
    "data-dependent shapes": ("outputs whose shape depends on input values", {"NonZero", "Unique",
                                                                             "NonMaxSuppression"}),
    "signal processing": ("complex-valued transforms", {"DFT", "STFT", "MelWeightMatrix"}),
    "image decoding": ("decoding image files", {"ImageDecoder"}),
    "tree ensembles": ("ai.onnx.ml tree models", {"TreeEnsemble", "TreeEnsembleClassifier", "TreeEnsembleRegressor"}),
}
OUT_OF_SCOPE = {op: family for family, (_, ops) in OUT_OF_SCOPE_FAMILIES.items() for op in ops}
UNSUPPORTED_TYPES_FAMILY = "narrow and non-numeric element types"
FAMILY_REASONS = {family: reason for family, (reason, _) in OUT_OF_SCOPE_FAMILIES.items()}
FAMILY_REASONS[UNSUPPORTED_TYPES_FAMILY] = ("float8, float4, int4/uint4, int2/uint2, string and complex "
                                            "elements have no lezero element type")

DATA_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
SUITES = ("node", "simple", "pytorch-converted", "pytorch-operator")


@dataclass
class Case:
    suite: str
    name: str
    op: str
    model: onnx.ModelProto
    data_sets: list          # [(inputs, outputs)], lists of arrays in graph order
    rtol: float = 1e-3
    atol: float = 1e-7
    skip: str | None = None  # the out-of-scope family


@dataclass
class CaseResult:
    suite: str
    name: str
    op: str
    status: str              # "pass", "fail" or "skip"
    reason: str = ""
    seconds: float = 0.0
    bound: tuple = ()        # inputs the compiled program is specialized on (shapes, K, ...)
    kernels: int = -1        # kernels the compiled program launches (0: its outputs are constants)


# --- collecting cases -------------------------------------------------------------------------------

def _ops(graph: onnx.GraphProto):
    for node in graph.node:
        yield node.op_type
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _ops(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _ops(g)


def _type_codes(model: onnx.ModelProto):
    """Every element type the model's interface, initializers and casts name (None for a
    non-tensor value)."""
    graph = model.graph
    for v in list(graph.input) + list(graph.output):
        kind = v.type.WhichOneof("value")
        yield v.type.tensor_type.elem_type if kind == "tensor_type" else None
    for t in graph.initializer:
        yield t.data_type
    for node in graph.node:
        for a in node.attribute:
            if a.name == "to" and a.type == onnx.AttributeProto.INT:
                yield a.i
            elif a.type == onnx.AttributeProto.TENSOR:
                yield a.t.data_type
        if node.op_type in ("QuantizeLinear", "DynamicQuantizeLinear", "Cast", "CastLike"):
            for a in node.attribute:
                if a.name == "output_dtype" and a.i:
                    yield a.i


def out_of_scope(model: onnx.ModelProto) -> str | None:
    """The out-of-scope family a model belongs to, or None."""
    for op in _ops(model.graph):
        if op in OUT_OF_SCOPE:
            return OUT_OF_SCOPE[op]
    for code in _type_codes(model):
        if code is None:
            return "sequences and optionals"
        if code and not element_types.supports(code):
            return UNSUPPORTED_TYPES_FAMILY
    return None


def _main_op(model: onnx.ModelProto) -> str:
    ops = [op for op in _ops(model.graph) if op not in ("Constant", "Identity")]
    if not ops:
        return next(_ops(model.graph), "?")
    if len(model.graph.node) == 1:
        return ops[0]
    return collections.Counter(ops).most_common(1)[0][0]


def _array(value):
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def node_cases() -> list[Case]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        collected = collect_testcases(None)
    by_name = {t.name: t for t in collected}
    cases = []
    for t in collected:
        base = t.name.split("_expanded")[0]
        source = by_name.get(base, t)
        op = _main_op(source.model) if source is not t or "_expanded" not in t.name else _main_op(t.model)
        data_sets = [([_array(a) for a in i], [_array(a) for a in o]) for i, o in t.data_sets]
        case = Case("node", t.name, op, t.model, data_sets, t.rtol, t.atol)
        case.skip = out_of_scope(t.model)
        cases.append(case)
    return cases


def _load_tensors(folder: str, prefix: str, value_infos) -> list:
    arrays = []
    for i, _ in enumerate(value_infos):
        path = os.path.join(folder, f"{prefix}_{i}.pb")
        if not os.path.exists(path):
            break
        tensor = onnx.TensorProto()
        with open(path, "rb") as f:
            tensor.ParseFromString(f.read())
        arrays.append(numpy_helper.to_array(tensor))
    return arrays


def directory_cases(suite: str) -> list[Case]:
    cases = []
    for folder in sorted(glob.glob(os.path.join(DATA_DIR, suite, "test_*"))):
        model_path = os.path.join(folder, "model.onnx")
        if not os.path.exists(model_path):
            continue
        model = onnx.load(model_path)
        initializers = {t.name for t in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in initializers]
        data_sets = []
        for data in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
            data_sets.append((_load_tensors(data, "input", inputs), _load_tensors(data, "output", model.graph.output)))
        case = Case(suite, os.path.basename(folder), _main_op(model), model, data_sets)
        case.skip = out_of_scope(model)
        cases.append(case)
    return cases


def cases_of(suite: str) -> list[Case]:
    if suite == "node":
        return node_cases()
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r} (suites: {', '.join(SUITES)})")
    return directory_cases(suite)


# --- running ------------------------------------------------------------------------------------------

def _compare(outputs, expected, rtol, atol) -> None:
    if len(outputs) != len(expected):
        raise AssertionError(f"{len(outputs)} outputs, expected {len(expected)}")
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        out, ref = np.asarray(out), np.asarray(ref)
        if out.shape != ref.shape:
            raise AssertionError(f"output {i} has shape {out.shape}, expected {ref.shape}")
        if out.dtype != ref.dtype:
            raise AssertionError(f"output {i} has dtype {out.dtype}, expected {ref.dtype}")
        if ref.dtype == object:
            np.testing.assert_array_equal(out, ref)
            continue
        tol = rtol
        if out.dtype.name == "bfloat16":
            tol = max(rtol, 2 ** -6)
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        np.testing.assert_allclose(out, ref, rtol=tol, atol=atol)


def run_case(case: Case) -> CaseResult:
    from lezero.onnx import backend

    if case.skip:
        return CaseResult(case.suite, case.name, case.op, "skip", case.skip)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rep = backend.prepare(case.model, "CPU")
            for inputs, expected in case.data_sets:
                outputs = rep.run(inputs)
                _compare(list(outputs), expected, case.rtol, case.atol)
        compiled = rep.compiled
        kernels = sum(len(plan.launches) for program in compiled._programs.values()
                      for plan in program.compiled._plans.values())
        return CaseResult(case.suite, case.name, case.op, "pass", "", time.perf_counter() - start,
                          tuple(compiled.value_inputs), kernels)
    except Exception as e:  # a failing case is a result, whatever went wrong
        text = str(e).strip().splitlines()
        reason = f"{type(e).__name__}: {text[0] if text else ''}"[:300]
        if isinstance(e, AssertionError):
            reason = "mismatch: " + " ".join(line.strip() for line in text[:6])[:300]
        return CaseResult(case.suite, case.name, case.op, "fail", reason, time.perf_counter() - start)


_CASES: list[Case] = []


def _run_index(i: int) -> CaseResult:
    return run_case(_CASES[i])


def _worker_started() -> None:
    """In a forked worker: a fresh one-thread kernel pool (the parent's pool threads do not
    exist here), since the workers already use every core."""
    from lezero.runtime import thread_pool

    thread_pool._POOL_LOCK = threading.Lock()
    thread_pool._POOL = thread_pool.ThreadPool(1)


def run_cases(cases: list[Case], workers: int = 2) -> list[CaseResult]:
    """Every case, in ``workers`` forked processes (each compiles its share; the kernel cache on
    disk is shared).  The cases reach the workers by fork, not by pickling."""
    global _CASES
    if workers <= 1:
        return [run_case(c) for c in cases]
    _CASES = cases
    context = multiprocessing.get_context("fork")
    try:
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_started) as pool:
            results = list(pool.map(_run_index, range(len(cases)), chunksize=4))
    finally:
        _CASES = []
    return results


def run_suite(suite: str, workers: int = 2, select=None) -> list[CaseResult]:
    cases = cases_of(suite)
    if select is not None:
        cases = [c for c in cases if select(c)]
    return run_cases(cases, workers)


# --- the report -------------------------------------------------------------------------------------

@dataclass
class Summary:
    total: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    by_op: dict = field(default_factory=dict)
    skipped_by_family: dict = field(default_factory=dict)

    @property
    def percent(self) -> float:
        return 100.0 * self.passed / self.total if self.total else 0.0


def summarize(results: list[CaseResult]) -> Summary:
    s = Summary()
    by_op = collections.defaultdict(lambda: collections.Counter())
    skipped = collections.Counter()
    for r in results:
        s.total += 1
        by_op[r.op][r.status] += 1
        if r.status == "pass":
            s.passed += 1
        elif r.status == "fail":
            s.failed += 1
        else:
            s.skipped += 1
            skipped[r.reason] += 1
    s.by_op = {op: dict(c) for op, c in sorted(by_op.items())}
    s.skipped_by_family = dict(skipped.most_common())
    return s


def report(results: list[CaseResult], title: str = "", failures: bool = True) -> str:
    s = summarize(results)
    lines = []
    if title:
        lines.append(title)
    width = max([len(op) for op in s.by_op] + [8])
    lines.append(f"{'operator':<{width}}  pass  fail  skip")
    for op, counts in s.by_op.items():
        lines.append(f"{op:<{width}}  {counts.get('pass', 0):4d}  {counts.get('fail', 0):4d}  {counts.get('skip', 0):4d}")
    lines.append(f"passed {s.passed}/{s.total} ({s.percent:.1f}%), failed {s.failed}, skipped {s.skipped}")
    passed = [r for r in results if r.status == "pass"]
    specialized = sum(1 for r in passed if r.bound)
    constant = sum(1 for r in passed if r.kernels == 0)
    lines.append(f"of the passing cases, {specialized} compiled for given values of shape-like inputs "
                 f"(ValueDependentError, then constant_inputs), {constant} compute nothing at run time "
                 "(outputs are inputs or constants)")
    if s.skipped_by_family:
        lines.append("skipped (out of scope):")
        for family, n in s.skipped_by_family.items():
            lines.append(f"  {n:4d}  {family}: {FAMILY_REASONS.get(family, '')}")
    if failures:
        failed = [r for r in results if r.status == "fail"]
        if failed:
            lines.append("failures:")
            for r in failed:
                lines.append(f"  {r.name}: {r.reason}")
    return "\n".join(lines)
