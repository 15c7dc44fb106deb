"""The product brief's program, verbatim (its last line traces with a torch tensor), trains on
scikit-learn's digits to at least 95% test accuracy, from lezero's data loader and from a torch
DataLoader over torch tensors, and the traced model exports to ONNX and runs in onnxruntime with
the same outputs (and saved as .tflite in TFLite's interpreter); and the examples train as their
docstrings say (the trained CNN also runs as TFLite)."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest
import torch
from support.tflite_testing import run_tflite

import lezero as lz
from lezero.tflite import to_tflite

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import digits  # noqa: E402

# From the brief, verbatim; ``dataloader`` is any iterable of (data, target) batches, ``torch`` the module.
SEED_PROGRAM = '''
import lezero as lz
class SimpleMLP(lz.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = lz.nn.Linear(784, 256)
        self.fc2 = lz.nn.Linear(256, 10)
    def forward(self, x):
        x = lz.nn.functional.relu(self.fc1(x))
        return self.fc2(x)
model = SimpleMLP()
optimizer = lz.optim.Adam(model.parameters())
criterion = lz.nn.CrossEntropyLoss()
for data, target in dataloader:
    optimizer.zero_grad()
    output = model(data)
    loss = criterion(output, target)
    loss.backward()
    optimizer.step()
traced_model = lz.jit.trace(model, example_inputs=torch.randn(1, 784))
'''

EPOCHS = 5


@pytest.fixture(scope="module")
def data():
    return digits.load(28)


def test_the_seed_program_reaches_95_percent_on_digits(data):
    x_train, y_train, x_test, y_test = data
    loader = lz.utils.data.DataLoader(
        lz.utils.data.TensorDataset(lz.from_numpy(x_train.reshape(-1, 784)), lz.from_numpy(y_train)),
        batch_size=64, shuffle=True, generator=lz.Generator().manual_seed(0))
    lz.manual_seed(0)
    namespace = {"dataloader": (batch for _ in range(EPOCHS) for batch in loader), "torch": torch}
    exec(compile(SEED_PROGRAM, "seed_program.py", "exec"), namespace)
    traced = namespace["traced_model"]
    assert isinstance(traced, lz.jit.TracedModule) and "tensor<?x784xf32>" in traced.graph
    acc = digits.accuracy(traced, x_test.reshape(-1, 784), y_test)
    assert acc >= 0.95, acc
    assert digits.accuracy(namespace["model"], x_test.reshape(-1, 784), y_test) == acc  # traced == eager


def test_the_seed_program_trains_from_a_torch_dataloader_and_exports_to_onnx(data, tmp_path):
    import onnxruntime as ort

    import lezero.onnx

    x_train, y_train, x_test, y_test = data
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x_train.reshape(-1, 784)), torch.from_numpy(y_train)),
        batch_size=64, shuffle=True)
    lz.manual_seed(0)
    namespace = {"dataloader": (batch for _ in range(2) for batch in loader), "torch": torch}
    exec(compile(SEED_PROGRAM, "seed_program.py", "exec"), namespace)
    traced = namespace["traced_model"]
    assert digits.accuracy(traced, x_test.reshape(-1, 784), y_test) >= 0.9
    path = tmp_path / "seed.onnx"
    lezero.onnx.export(traced, path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = x_test[:32].reshape(-1, 784)
    (ours,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(ours, traced(x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours, namespace["model"](torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    # issue 12: saved as .tflite, the trained model runs in TFLite's interpreter with the same outputs
    lz.jit.save(traced, tmp_path / "seed.tflite")
    (theirs,) = run_tflite((tmp_path / "seed.tflite").read_bytes(), x)
    np.testing.assert_allclose(theirs, traced(x), rtol=1e-5, atol=1e-5)


def test_train_mlp_compiled_matches_eager_and_learns(data):
    import train_mlp

    eager = train_mlp.train("eager", epochs=3, progress=False, data=data)
    compiled = train_mlp.train("compiled", epochs=3, progress=False, data=data)
    np.testing.assert_allclose(compiled["losses"], eager["losses"], rtol=1e-4, atol=1e-5)
    assert compiled["accuracy"] >= 0.95 and eager["accuracy"] >= 0.95


def test_train_cnn_learns(data):
    import train_cnn

    result = train_cnn.train(epochs=2, progress=False)
    assert result["accuracy"] >= 0.9, result["accuracy"]
    # issue 12: the trained CNN as TFLite (NHWC inside, NCHW at its boundary) gives lezero's logits
    images = digits.load(8)[2][:64]
    (theirs,) = run_tflite(to_tflite(result["traced"]), images)
    np.testing.assert_allclose(theirs, result["traced"](images), rtol=1e-5, atol=1e-5)  # numpy in: numpy out


def test_progress_bar_is_one_line_of_carriage_returns():
    import io

    out = io.StringIO()
    bar = digits.Progress(4, "epoch 1/1", stream=out)
    for i in range(4):
        bar.update(i + 1, loss=0.5)
    bar.close()
    text = out.getvalue()
    assert text.startswith("\repoch 1/1 [") and text.endswith("\n") and text.count("\n") == 1
    assert "4/4" in text and "loss 0.5000" in text
