"""What the layer tests share: a torch module and its lezero twin (the same weights, copied
through the state dict) on the same float64 inputs give the same outputs, input gradients and
parameter gradients; a lezero module traced with ``lz.jit.trace`` gives its eager outputs, and
exported to ONNX gives them in ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch

import lezero as lz
from lezero.onnx.export import to_onnx

from support.eager_testing import F64, assert_same, assert_same_grads, copy_weights, flat


def twins(make, *args, **kwargs):
    """``(torch module, lezero module)`` built by ``make(nn, *args, **kwargs)`` in float64, the
    lezero one holding the torch one's weights."""
    torch_module = make(torch.nn, *args, **kwargs).double()
    lz_module = make(lz.nn, *args, **kwargs).to(lz.float64)
    assert list(lz_module.state_dict()) == list(torch_module.state_dict())
    copy_weights(torch_module, lz_module)
    return torch_module, lz_module


def compare_modules(torch_module, lz_module, *arrays, tol=F64, seed: int = 0, grad: bool = True, **kwargs):
    """Both modules on ``arrays`` (float ones require grad) and ``kwargs`` (arrays become
    tensors): the same outputs, and for a random cotangent the same input and parameter
    gradients.  Returns lezero's outputs."""
    def inputs(lib):
        return [lib.tensor(a, requires_grad=grad and a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
                for a in arrays]
    def keywords(lib):
        return {k: lib.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    lz_in, torch_in = inputs(lz), inputs(torch)
    lz_out, torch_out = flat(lz_module(*lz_in, **keywords(lz))), flat(torch_module(*torch_in, **keywords(torch)))
    assert len(lz_out) == len(torch_out)
    for i, (l, t) in enumerate(zip(lz_out, torch_out)):
        assert_same(l, t, tol, f"output {i}")
    if not grad:
        return lz_out
    rng = np.random.default_rng(seed)
    cotangents = [rng.standard_normal(t.shape) for t in torch_out]
    lz.autograd.backward(lz_out, [lz.tensor(c) for c in cotangents])
    torch.autograd.backward(torch_out, [torch.tensor(c) for c in cotangents])
    for i, (l, t) in enumerate(zip(lz_in, torch_in)):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            assert_same(l.grad, t.grad, tol, f"gradient of input {i}")
    assert_same_grads(torch_module, lz_module, tol)
    return lz_out


def ort_run(proto, arrays) -> list:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: np.asarray(a) for i, a in zip(session.get_inputs(), arrays)})


F32_COMPILED = {"rtol": 1e-4, "atol": 1e-5}  # float32, summed in another order by the compiled graph


def assert_traces_and_exports(lz_module, *arrays, onnx: bool = True, tol=F32_COMPILED, dynamic_batch: bool = True):
    """``lz_module`` (float32, eval mode) traced on ``arrays`` gives its eager outputs; exported
    to ONNX, ONNX Runtime gives them too."""
    lz_module.eval()
    with lz.no_grad():
        eager = [t.numpy() for t in flat(lz_module(*[lz.tensor(a) for a in arrays]))]
    traced = lz.jit.trace(lz_module, example_inputs=tuple(lz.tensor(a) for a in arrays), dynamic_batch=dynamic_batch)
    got = traced(*arrays)
    for i, (g, e) in enumerate(zip(flat(got), eager)):
        np.testing.assert_allclose(np.asarray(g), e, err_msg=f"traced output {i}", **tol)
    if onnx:
        for i, (g, e) in enumerate(zip(ort_run(to_onnx(traced), arrays), eager)):
            np.testing.assert_allclose(g, e, err_msg=f"ONNX Runtime output {i}", **tol)
