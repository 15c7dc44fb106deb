"""The peers of lezero's quantized ONNX export: ONNX's reference evaluator (the specification)
always, and ONNX Runtime where its u8 x s8 integer kernels are exact.  On an x86 CPU without VNNI
(AVX2 only: Zen 3, Haswell-Skylake) ORT's MLAS adds u8*s8 pairs in saturating int16
(``vpmaddubsw``), which full-range int8 weights overflow (ORT's own quantizer reduces them to 7
bits there), so its MatMulInteger/ConvInteger differ from the specification on such a CPU."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

from lezero.codegen.llvm.target import host_target


def ort_u8s8_exact() -> bool:
    """Whether ONNX Runtime's u8 x s8 kernels compute exact sums on this machine."""
    target = host_target()
    return target.arch != "x86_64" or bool({"avx512vnni", "avxvnni"} & target.features)


def check_onnx_runs(path, feeds: dict, want: np.ndarray, tolerance: float) -> None:
    """The ONNX file at ``path`` run on ``feeds`` gives ``want`` (within ``tolerance``) in ONNX's
    reference evaluator, and in ONNX Runtime where its integer kernels are exact."""
    got = ReferenceEvaluator(str(path)).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    if ort_u8s8_exact():
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(None, feeds)[0], want, rtol=tolerance, atol=tolerance)


def assert_requantized_exactly(module, arrays, cpu: str, out_dtype, saturates: bool, what: str) -> None:
    """``module``'s function ``f`` compiled for ``cpu`` equals the reference interpreter bit for bit
    (integer kernels and their requantize epilogues are exact), in the reference's dtypes; where
    ``saturates``, the case must reach both ends of ``out_dtype`` (else it tests no saturation)."""
    import lezero
    from lezero.ir import interpret

    got = lezero.compile(module, "f", cpu=cpu)(*arrays)
    want = interpret(module, "f", *arrays)
    info = np.iinfo(out_dtype)
    assert not saturates or {info.min, info.max} <= set(np.unique(want[0])), "the case saturates at both ends"
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w, err_msg=f"{what} compiled for {cpu}")
