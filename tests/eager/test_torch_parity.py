"""PyTorch parity, as a table (issue 19): the names a PyTorch user reaches for in the first week, each
present in lezero under the same path (``torch.nn.GroupNorm`` -> ``lz.nn.GroupNorm``), and each
numerical one checked against torch in float64 with the same arguments: forward and gradients.

``NAMES`` is the list; ``test_every_name_on_the_list_exists`` fails naming every one that is missing.
The rows are written once against a framework ``fw`` (``lezero`` or ``torch``): ``FUNCTIONS`` call
``fw.<name>`` on the same arrays (``support.eager_testing.compare``: results and input gradients),
``LAYERS`` build ``fw.nn.<Layer>(...)``, copy torch's initial weights into lezero's through the state
dict and compare outputs and input and parameter gradients, ``OPTIMIZERS`` and ``SCHEDULERS`` run ten
steps on the same quadratic and compare parameters and learning rates.  Names that are not numerical
(``lz.no_grad``, ``lz.save``, ``DataLoader`` ...) are on the list for presence; their behaviour is
tested in the files named in ``ELSEWHERE``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import F64, assert_same, compare

NAMES = """
tensor as_tensor from_numpy from_dlpack zeros ones full empty arange linspace eye zeros_like ones_like full_like
rand randn randint randperm manual_seed cat stack split chunk where clamp abs exp log log1p expm1 sqrt rsqrt
sin cos tanh sigmoid pow maximum minimum sum mean std var prod max min amax amin argmax argmin logsumexp
softmax log_softmax matmul mm bmm einsum transpose permute reshape flatten squeeze unsqueeze narrow select
unbind triu tril topk sort argsort cumsum cumprod gather scatter scatter_add index_select masked_fill
multinomial isnan isinf isfinite allclose equal outer diag flip roll repeat_interleave
bfloat16 float16 float32 float64 int64 bool no_grad enable_grad save load
linalg.norm linalg.vector_norm linalg.matrix_norm linalg.solve linalg.inv linalg.det linalg.qr linalg.svd
linalg.eigh linalg.cholesky fft.fft fft.ifft fft.rfft fft.irfft autograd.grad
Tensor.view Tensor.contiguous Tensor.is_contiguous Tensor.stride Tensor.register_hook Tensor.retain_grad
Tensor.detach Tensor.clone Tensor.numpy Tensor.item Tensor.tolist Tensor.to Tensor.expand Tensor.repeat
Tensor.fill_ Tensor.zero_ Tensor.add_ Tensor.mul_ Tensor.copy_ Tensor.masked_fill_ Tensor.type_as
Tensor.narrow Tensor.unfold Tensor.__dlpack__
nn.Linear nn.Conv1d nn.Conv2d nn.Conv3d nn.ConvTranspose2d nn.BatchNorm1d nn.BatchNorm2d nn.LayerNorm
nn.GroupNorm nn.InstanceNorm2d nn.RMSNorm nn.Embedding nn.EmbeddingBag nn.Dropout nn.Dropout2d nn.ReLU
nn.GELU nn.SiLU nn.ELU nn.PReLU nn.Mish nn.Hardswish nn.LeakyReLU nn.Tanh nn.Sigmoid nn.Softmax
nn.LogSoftmax nn.MaxPool2d nn.AvgPool2d nn.AdaptiveAvgPool2d nn.Upsample nn.Flatten nn.Identity
nn.Sequential nn.ModuleList nn.ModuleDict nn.MultiheadAttention nn.TransformerEncoderLayer
nn.TransformerEncoder nn.TransformerDecoderLayer nn.TransformerDecoder nn.Transformer nn.CrossEntropyLoss
nn.MSELoss nn.L1Loss nn.NLLLoss nn.BCELoss nn.BCEWithLogitsLoss nn.SmoothL1Loss
nn.utils.clip_grad_norm_ nn.utils.clip_grad_value_ nn.init.xavier_uniform_ nn.init.kaiming_normal_
nn.functional.interpolate nn.functional.pad nn.functional.one_hot nn.functional.scaled_dot_product_attention
nn.functional.gelu nn.functional.cross_entropy nn.functional.dropout
optim.SGD optim.Adam optim.AdamW optim.RMSprop optim.Adagrad optim.LBFGS
optim.lr_scheduler.StepLR optim.lr_scheduler.CosineAnnealingLR optim.lr_scheduler.OneCycleLR
optim.lr_scheduler.ReduceLROnPlateau optim.lr_scheduler.LambdaLR optim.lr_scheduler.LinearLR
optim.lr_scheduler.SequentialLR optim.lr_scheduler.ExponentialLR
utils.data.DataLoader utils.data.Dataset utils.data.TensorDataset utils.data.random_split
""".split()

# Not numerical, or not comparable elementwise with torch (random draws): where each is tested.
ELSEWHERE = {
    "from_dlpack": "tests/eager/test_interop.py", "Tensor.__dlpack__": "tests/eager/test_interop.py",
    "from_numpy": "tests/eager/test_interop.py", "save": "tests/eager/test_serialization.py",
    "load": "tests/eager/test_serialization.py", "no_grad": "tests/eager/test_autograd.py",
    "enable_grad": "tests/eager/test_autograd.py", "manual_seed": "tests/eager/test_tensor_ops.py",
    "multinomial": "tests/eager (sampling tests)", "rand": "random", "randn": "random", "randint": "random",
    "randperm": "random", "empty": "uninitialized", "nn.Dropout": "random", "nn.Dropout2d": "random",
    "nn.functional.dropout": "random", "nn.init.xavier_uniform_": "random", "nn.init.kaiming_normal_": "random",
    "utils.data.DataLoader": "tests/utils", "utils.data.Dataset": "tests/utils",
    "utils.data.TensorDataset": "tests/utils", "utils.data.random_split": "tests/utils",
    "nn.Sequential": "containers", "nn.ModuleList": "containers", "nn.ModuleDict": "containers",
    "optim.LBFGS": "tests/optim", "optim.lr_scheduler.ReduceLROnPlateau": "tests/optim",
}


def resolve(root, path: str):
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


# On the list and not in lezero yet, each with what it needs: the test fails when one appears (take
# it off here and give it a row) or when another goes missing.
KNOWN_MISSING: dict[str, str] = {}


def test_every_name_on_the_list_exists():
    for path in NAMES:
        resolve(torch, path)  # the list names real PyTorch API
    missing = []
    for path in NAMES:
        try:
            resolve(lz, path)
        except AttributeError:
            missing.append(path)
    unexpected = [m for m in missing if m not in KNOWN_MISSING]
    assert not unexpected, f"{len(missing)} of {len(NAMES)} PyTorch names missing in lezero: {' '.join(unexpected)}"
    arrived = [m for m in KNOWN_MISSING if m not in missing]
    assert not arrived, f"{arrived} exist now: take them off KNOWN_MISSING and give them a row"


# --- functions: fw.<name>(arrays...) against torch, forward and gradients in float64 ------------------

@dataclass
class Function:
    name: str                     # the path on NAMES this row checks
    call: object                  # call(fw, *tensors)
    shapes: tuple = ((3, 4),)
    domain: str = "real"          # "real", "positive", "int" (int64 in [0, 4)), "bool"
    grad: bool = True
    id: str = ""

    def arrays(self, rng):
        out = []
        for shape in self.shapes:
            if self.domain == "int":
                out.append(rng.integers(0, 4, shape))
            elif self.domain == "positive":
                out.append(rng.uniform(0.5, 2.0, shape))
            else:
                out.append(rng.standard_normal(shape))
        return out


def _real_pairs(fw, z):
    """lezero has no complex dtype: its fft results are already torch's ``view_as_real`` pairs."""
    return z if fw is lz else torch.view_as_real(z)


def F(name, call, *shapes, **kw):
    return Function(name, call, shapes or ((3, 4),), **kw)


FUNCTIONS = [
    F("tensor", lambda fw, x: fw.tensor(x.tolist(), dtype=fw.float64) * 1, grad=False),
    F("as_tensor", lambda fw, x: fw.as_tensor(x) * 2),
    F("zeros_like", lambda fw, x: fw.zeros_like(x) + x),
    F("ones_like", lambda fw, x: fw.ones_like(x) * x),
    F("full_like", lambda fw, x: fw.full_like(x, 3.0) * x),
    F("zeros", lambda fw, x: fw.zeros(3, 4, dtype=fw.float64) + x),
    F("ones", lambda fw, x: fw.ones(3, 4, dtype=fw.float64) * x),
    F("full", lambda fw, x: fw.full((3, 4), 2.0, dtype=fw.float64) * x),
    F("arange", lambda fw, x: fw.arange(4, dtype=fw.float64) * x),
    F("linspace", lambda fw, x: fw.linspace(0, 1, 4, dtype=fw.float64) * x),
    F("eye", lambda fw, x: fw.eye(4, dtype=fw.float64) @ x, (4, 4)),
    F("cat", lambda fw, x, y: fw.cat([x, y], 0), (2, 4), (3, 4)),
    F("stack", lambda fw, x, y: fw.stack([x, y], 1), (3, 4), (3, 4)),
    F("split", lambda fw, x: fw.split(x, [1, 3], dim=1)),
    F("chunk", lambda fw, x: fw.chunk(x, 2, dim=1)),
    F("where", lambda fw, x, y: fw.where(x > 0, x, y), (3, 4), (3, 4)),
    F("clamp", lambda fw, x: fw.clamp(x, -0.5, 0.5)),
    *[F(n, (lambda n: lambda fw, x: getattr(fw, n)(x))(n)) for n in ("abs", "exp", "sin", "cos", "tanh", "sigmoid",
                                                                      "expm1")],
    *[F(n, (lambda n: lambda fw, x: getattr(fw, n)(x))(n), domain="positive") for n in ("log", "log1p", "sqrt",
                                                                                         "rsqrt")],
    F("pow", lambda fw, x, y: fw.pow(x, y), (3, 4), (3, 4), domain="positive"),
    F("maximum", lambda fw, x, y: fw.maximum(x, y), (3, 4), (4,)),
    F("minimum", lambda fw, x, y: fw.minimum(x, y), (3, 4), (4,)),
    F("sum", lambda fw, x: fw.sum(x, dim=1, keepdim=True)),
    F("mean", lambda fw, x: fw.mean(x, dim=0)),
    F("std", lambda fw, x: fw.std(x, dim=1)),
    F("var", lambda fw, x: fw.var(x, dim=1, unbiased=False)),
    F("prod", lambda fw, x: fw.prod(x, dim=1)),
    F("max", lambda fw, x: fw.max(x, dim=1).values),
    F("min", lambda fw, x: fw.min(x, dim=0).values),
    F("amax", lambda fw, x: fw.amax(x, dim=1)),
    F("amin", lambda fw, x: fw.amin(x, dim=(0, 1))),
    F("argmax", lambda fw, x: fw.argmax(x, dim=1), grad=False),
    F("argmin", lambda fw, x: fw.argmin(x, dim=0), grad=False),
    F("logsumexp", lambda fw, x: fw.logsumexp(x, dim=1)),
    F("softmax", lambda fw, x: fw.softmax(x, dim=1)),
    F("log_softmax", lambda fw, x: fw.log_softmax(x, dim=0)),
    F("matmul", lambda fw, x, y: fw.matmul(x, y), (2, 3, 4), (4, 5)),
    F("mm", lambda fw, x, y: fw.mm(x, y), (3, 4), (4, 2)),
    F("bmm", lambda fw, x, y: fw.bmm(x, y), (2, 3, 4), (2, 4, 5)),
    F("einsum", lambda fw, x, y: fw.einsum("bij,bjk->bik", x, y), (2, 3, 4), (2, 4, 5), id="batched-matmul"),
    F("einsum", lambda fw, x: fw.einsum("ii->i", x), (4, 4), id="diagonal"),
    F("einsum", lambda fw, x, y: fw.einsum("i,j->ij", x, y), (3,), (4,), id="outer"),
    F("transpose", lambda fw, x: fw.transpose(x, 0, 1)),
    F("permute", lambda fw, x: fw.permute(x, (2, 0, 1)), (2, 3, 4)),
    F("reshape", lambda fw, x: fw.reshape(x, (4, 3))),
    F("flatten", lambda fw, x: fw.flatten(x, 1), (2, 3, 4)),
    F("squeeze", lambda fw, x: fw.squeeze(x, 1), (3, 1, 4)),
    F("unsqueeze", lambda fw, x: fw.unsqueeze(x, 1)),
    F("narrow", lambda fw, x: fw.narrow(x, 1, 1, 2)),
    F("select", lambda fw, x: fw.select(x, 1, 2)),
    F("unbind", lambda fw, x: fw.unbind(x, 1)),
    F("triu", lambda fw, x: fw.triu(x, 1), (4, 4)),
    F("tril", lambda fw, x: fw.tril(x, -1), (4, 5)),
    F("topk", lambda fw, x: fw.topk(x, 2, dim=1).values),
    F("topk", lambda fw, x: fw.topk(x, 2, dim=0, largest=False).indices, grad=False, id="smallest-indices"),
    F("sort", lambda fw, x: fw.sort(x, dim=1, descending=True).values),
    F("argsort", lambda fw, x: fw.argsort(x, dim=1), grad=False),
    F("cumsum", lambda fw, x: fw.cumsum(x, dim=1)),
    F("cumprod", lambda fw, x: fw.cumprod(x, dim=0)),
    F("gather", lambda fw, x: fw.gather(x, 1, fw.tensor([[0, 3], [1, 1], [2, 0]]))),
    F("scatter", lambda fw, x, y: fw.scatter(x, 1, fw.tensor([[0, 3], [1, 2], [2, 0]]), y), (3, 4), (3, 2)),
    F("scatter_add", lambda fw, x, y: fw.scatter_add(x, 1, fw.tensor([[0, 0], [1, 2], [3, 3]]), y), (3, 4), (3, 2)),
    F("index_select", lambda fw, x: fw.index_select(x, 0, fw.tensor([2, 0, 2]))),
    F("masked_fill", lambda fw, x: fw.masked_fill(x, x > 0.5, -1.0)),
    F("isnan", lambda fw, x: fw.isnan(fw.log(x - 1)), grad=False, domain="positive"),
    F("isinf", lambda fw, x: fw.isinf(1 / (x - x[0])), grad=False),
    F("isfinite", lambda fw, x: fw.isfinite(fw.log(x)), grad=False),
    F("outer", lambda fw, x, y: fw.outer(x, y), (3,), (4,)),
    F("diag", lambda fw, x: fw.diag(x), (4, 4)),
    F("flip", lambda fw, x: fw.flip(x, (1,))),
    F("roll", lambda fw, x: fw.roll(x, 1, 1)),
    F("repeat_interleave", lambda fw, x: fw.repeat_interleave(x, 2, dim=0)),
    F("linalg.norm", lambda fw, x: fw.linalg.norm(x)),
    F("linalg.vector_norm", lambda fw, x: fw.linalg.vector_norm(x, ord=3, dim=1)),
    F("linalg.matrix_norm", lambda fw, x: fw.linalg.matrix_norm(x)),
    F("linalg.solve", lambda fw, a, b: fw.linalg.solve(a + 4 * fw.eye(4, dtype=fw.float64), b), (4, 4), (4, 2)),
    F("linalg.inv", lambda fw, a: fw.linalg.inv(a + 4 * fw.eye(4, dtype=fw.float64)), (4, 4)),
    F("linalg.det", lambda fw, a: fw.linalg.det(a), (4, 4)),
    F("linalg.cholesky", lambda fw, a: fw.linalg.cholesky(a @ a.mT + fw.eye(4, dtype=fw.float64)), (4, 4)),
    F("linalg.qr", lambda fw, a: fw.linalg.qr(a).R.abs(), (4, 3)),
    F("linalg.svd", lambda fw, a: fw.linalg.svd(a, full_matrices=False).S, (4, 3)),
    F("linalg.eigh", lambda fw, a: fw.linalg.eigh(a + a.mT).eigenvalues, (4, 4)),
    F("fft.rfft", lambda fw, x: _real_pairs(fw, fw.fft.rfft(x)), (3, 8)),
    F("fft.fft", lambda fw, x: _real_pairs(fw, fw.fft.fft(x)), (3, 8)),
    F("fft.irfft", lambda fw, x: fw.fft.irfft(fw.fft.rfft(x)), (3, 8)),
    F("fft.ifft", lambda fw, x: _real_pairs(fw, fw.fft.ifft(fw.fft.fft(x))), (3, 8)),
    F("nn.functional.interpolate", lambda fw, x: fw.nn.functional.interpolate(x, scale_factor=2, mode="bilinear",
                                                                              align_corners=False), (1, 2, 3, 4)),
    F("nn.functional.interpolate", lambda fw, x: fw.nn.functional.interpolate(x, size=(5, 7), mode="nearest"),
      (1, 2, 3, 4), id="nearest"),
    *[F("nn.functional.pad", (lambda m: lambda fw, x: fw.nn.functional.pad(x, (1, 2, 2, 1), mode=m))(m), (1, 2, 3, 4),
        id=m) for m in ("constant", "reflect", "replicate", "circular")],
    F("nn.functional.gelu", lambda fw, x: fw.nn.functional.gelu(x, approximate="tanh")),
    F("nn.functional.cross_entropy", lambda fw, x: fw.nn.functional.cross_entropy(x, fw.tensor([0, 3, 1]),
                                                                                  label_smoothing=0.1)),
    F("nn.functional.one_hot", lambda fw, x: fw.nn.functional.one_hot(x.long() % 4, 5), domain="int", grad=False),
    F("nn.functional.scaled_dot_product_attention",
      lambda fw, q, k, v: fw.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
      (2, 5, 4), (2, 5, 4), (2, 5, 4)),
    F("nn.CrossEntropyLoss", lambda fw, x: fw.nn.CrossEntropyLoss(label_smoothing=0.05)(x, fw.tensor([0, 3, 1]))),
    F("nn.NLLLoss", lambda fw, x: fw.nn.NLLLoss(reduction="sum")(fw.log_softmax(x, 1), fw.tensor([2, 0, 1]))),
    F("nn.MSELoss", lambda fw, x, y: fw.nn.MSELoss()(x, y), (3, 4), (3, 4)),
    F("nn.L1Loss", lambda fw, x, y: fw.nn.L1Loss(reduction="sum")(x, y), (3, 4), (3, 4)),
    F("nn.SmoothL1Loss", lambda fw, x, y: fw.nn.SmoothL1Loss(beta=0.5)(x, y), (3, 4), (3, 4)),
    F("nn.BCELoss", lambda fw, x, y: fw.nn.BCELoss()(fw.sigmoid(x), fw.sigmoid(y)), (3, 4), (3, 4)),
    F("nn.BCEWithLogitsLoss", lambda fw, x, y: fw.nn.BCEWithLogitsLoss()(x, fw.sigmoid(y)), (3, 4), (3, 4)),
    F("Tensor.view", lambda fw, x: x.view(2, 6)),
    F("Tensor.contiguous", lambda fw, x: x.t().contiguous()),
    F("Tensor.expand", lambda fw, x: x.expand(2, 3, 4)),
    F("Tensor.repeat", lambda fw, x: x.repeat(2, 1)),
    F("Tensor.type_as", lambda fw, x: x.type_as(x.float()), grad=False),
    F("Tensor.narrow", lambda fw, x: x.narrow(0, 1, 2)),
    F("Tensor.unfold", lambda fw, x: x.unfold(1, 2, 1)),
    F("Tensor.clone", lambda fw, x: x.clone() * 2),
    F("Tensor.detach", lambda fw, x: x.detach() * 2, grad=False),
    F("Tensor.masked_fill_", lambda fw, x: (x * 1).masked_fill_(x > 0, 0.0)),
    F("Tensor.add_", lambda fw, x, y: (x * 1).add_(y, alpha=2), (3, 4), (3, 4)),
    F("Tensor.mul_", lambda fw, x, y: (x * 1).mul_(y), (3, 4), (4,)),
    F("Tensor.copy_", lambda fw, x, y: (x * 1).copy_(y), (3, 4), (4,)),
    F("Tensor.fill_", lambda fw, x: (x * 1)[1:].fill_(2.0), grad=False),
    F("Tensor.zero_", lambda fw, x: (x * 1).zero_(), grad=False),
]


def _function_id(row: Function) -> str:
    return row.name + (f"-{row.id}" if row.id else "")


def _missing(path: str) -> str | None:
    try:
        resolve(lz, path)
    except AttributeError:
        return f"lz.{path} is missing"
    return None


@pytest.mark.parametrize("row", FUNCTIONS, ids=_function_id)
def test_function_matches_torch(row):
    if _missing(row.name):
        pytest.fail(_missing(row.name))
    arrays = row.arrays(np.random.default_rng(0))
    compare(functools.partial(row.call, lz), functools.partial(row.call, torch), *arrays, grad=row.grad)


# --- layers: the same weights, outputs and gradients -----------------------------------------------------

@dataclass
class Layer:
    name: str
    make: object                   # make(fw) -> module
    shapes: tuple = ((2, 3, 8),)
    domain: str = "real"
    train: bool = True             # compare in train mode (else eval)
    call: object = None            # call(module, *tensors) -> output (default module(*tensors))
    id: str = ""


LAYERS = [
    Layer("nn.Linear", lambda fw: fw.nn.Linear(8, 5), ((3, 8),)),
    Layer("nn.Conv1d", lambda fw: fw.nn.Conv1d(3, 4, 3, stride=2, padding=1), ((2, 3, 9),)),
    Layer("nn.Conv2d", lambda fw: fw.nn.Conv2d(3, 4, 3, padding=1, groups=1), ((2, 3, 6, 6),)),
    Layer("nn.Conv3d", lambda fw: fw.nn.Conv3d(2, 3, 3, padding=1), ((1, 2, 4, 5, 5),)),
    Layer("nn.ConvTranspose2d", lambda fw: fw.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
          ((2, 3, 4, 4),)),
    Layer("nn.BatchNorm1d", lambda fw: fw.nn.BatchNorm1d(3), ((4, 3, 5),)),
    Layer("nn.BatchNorm2d", lambda fw: fw.nn.BatchNorm2d(3), ((2, 3, 4, 4),)),
    Layer("nn.LayerNorm", lambda fw: fw.nn.LayerNorm(8), ((2, 3, 8),)),
    Layer("nn.GroupNorm", lambda fw: fw.nn.GroupNorm(2, 4), ((2, 4, 3, 3),)),
    Layer("nn.InstanceNorm2d", lambda fw: fw.nn.InstanceNorm2d(3, affine=True), ((2, 3, 4, 4),)),
    Layer("nn.RMSNorm", lambda fw: fw.nn.RMSNorm(8), ((2, 3, 8),)),
    Layer("nn.Embedding", lambda fw: fw.nn.Embedding(6, 4), ((2, 3),), domain="int"),
    Layer("nn.EmbeddingBag", lambda fw: fw.nn.EmbeddingBag(6, 4, mode="mean"), ((2, 3),), domain="int"),
    *[Layer(f"nn.{n}", (lambda n: lambda fw: getattr(fw.nn, n)())(n)) for n in
      ("ReLU", "GELU", "SiLU", "ELU", "PReLU", "Mish", "Hardswish", "LeakyReLU", "Tanh", "Sigmoid", "Identity")],
    Layer("nn.Softmax", lambda fw: fw.nn.Softmax(dim=-1)),
    Layer("nn.LogSoftmax", lambda fw: fw.nn.LogSoftmax(dim=1)),
    Layer("nn.Flatten", lambda fw: fw.nn.Flatten()),
    Layer("nn.MaxPool2d", lambda fw: fw.nn.MaxPool2d(2), ((1, 2, 4, 4),)),
    Layer("nn.AvgPool2d", lambda fw: fw.nn.AvgPool2d(2), ((1, 2, 4, 4),)),
    Layer("nn.AdaptiveAvgPool2d", lambda fw: fw.nn.AdaptiveAvgPool2d(1), ((1, 2, 4, 4),)),
    Layer("nn.Upsample", lambda fw: fw.nn.Upsample(scale_factor=2, mode="nearest"), ((1, 2, 3, 3),)),
    Layer("nn.MultiheadAttention", lambda fw: fw.nn.MultiheadAttention(8, 2, batch_first=True), ((2, 5, 8),),
          call=lambda m, x: m(x, x, x, need_weights=False)[0]),
    Layer("nn.TransformerEncoderLayer", lambda fw: fw.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                                                 batch_first=True), ((2, 5, 8),)),
    Layer("nn.TransformerEncoder", lambda fw: fw.nn.TransformerEncoder(
        fw.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True), 2,
        enable_nested_tensor=False), ((2, 5, 8),)),
    Layer("nn.TransformerDecoderLayer", lambda fw: fw.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0,
                                                                                 batch_first=True),
          ((2, 5, 8), (2, 4, 8)), call=lambda m, x, mem: m(x, mem, tgt_is_causal=False)),
    Layer("nn.TransformerDecoder", lambda fw: fw.nn.TransformerDecoder(
        fw.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2), ((2, 5, 8), (2, 4, 8))),
    Layer("nn.Transformer", lambda fw: fw.nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True),
          ((2, 5, 8), (2, 4, 8))),
]


@pytest.mark.parametrize("row", LAYERS, ids=lambda r: r.name + (f"-{r.id}" if r.id else ""))
def test_layer_matches_torch(row):
    if _missing(row.name):
        pytest.fail(_missing(row.name))
    torch.manual_seed(0)
    peer = row.make(torch).double()
    module = row.make(lz).double()
    module.load_state_dict({k: v.detach().numpy().copy() for k, v in peer.state_dict().items()})
    if not row.train:
        peer.eval(), module.eval()
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 6, s) if row.domain == "int" else rng.standard_normal(s) for s in row.shapes]
    call = row.call or (lambda m, *xs: m(*xs))
    lz_out = call(module, *[lz.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays])
    torch_in = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    torch_out = call(peer, *torch_in)
    assert_same(lz_out, torch_out, F64, f"{row.name} output")
    cotangent = rng.standard_normal(tuple(torch_out.shape))
    torch_out.backward(torch.tensor(cotangent))
    lz_out.backward(lz.tensor(cotangent))
    for name, p in peer.named_parameters():
        assert_same(dict(module.named_parameters())[name].grad, p.grad, F64, f"gradient of {name}")


# --- optimizers and schedulers: ten steps on one quadratic ------------------------------------------------

OPTIMIZERS = {
    "optim.SGD": lambda fw, ps: fw.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "optim.Adam": lambda fw, ps: fw.optim.Adam(ps, lr=0.05, amsgrad=True),
    "optim.AdamW": lambda fw, ps: fw.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
    "optim.RMSprop": lambda fw, ps: fw.optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
    "optim.Adagrad": lambda fw, ps: fw.optim.Adagrad(ps, lr=0.1, lr_decay=0.01),
}
SCHEDULERS = {
    "optim.lr_scheduler.StepLR": lambda fw, o: fw.optim.lr_scheduler.StepLR(o, 3, gamma=0.5),
    "optim.lr_scheduler.ExponentialLR": lambda fw, o: fw.optim.lr_scheduler.ExponentialLR(o, 0.9),
    "optim.lr_scheduler.CosineAnnealingLR": lambda fw, o: fw.optim.lr_scheduler.CosineAnnealingLR(o, 7, eta_min=0.01),
    "optim.lr_scheduler.OneCycleLR": lambda fw, o: fw.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=12),
    "optim.lr_scheduler.LambdaLR": lambda fw, o: fw.optim.lr_scheduler.LambdaLR(o, lambda e: 1 / (1 + e)),
    "optim.lr_scheduler.LinearLR": lambda fw, o: fw.optim.lr_scheduler.LinearLR(o, 0.25, total_iters=4),
    "optim.lr_scheduler.SequentialLR": lambda fw, o: fw.optim.lr_scheduler.SequentialLR(
        o, [fw.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=3), fw.optim.lr_scheduler.ExponentialLR(o, 0.8)],
        milestones=[3]),
}


def _quadratic_run(fw, make_optimizer, make_scheduler=None, steps=10):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal(4)
    w = fw.tensor(rng.standard_normal(3), requires_grad=True)
    optimizer = make_optimizer(fw, [w])
    scheduler = make_scheduler(fw, optimizer) if make_scheduler else None
    a, b = fw.tensor(a), fw.tensor(b)
    trajectory, lrs = [], []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = ((a @ w - b) ** 2).sum()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        trajectory.append(w.detach().numpy().copy())
        lrs.append(optimizer.param_groups[0]["lr"])
    return np.array(trajectory), np.array(lrs)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_torch(name):
    if _missing(name):
        pytest.fail(_missing(name))
    got, _ = _quadratic_run(lz, OPTIMIZERS[name])
    want, _ = _quadratic_run(torch, OPTIMIZERS[name])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_matches_torch(name):
    if _missing(name):
        pytest.fail(_missing(name))
    sgd = OPTIMIZERS["optim.SGD"]
    got, got_lr = _quadratic_run(lz, sgd, SCHEDULERS[name], steps=12)
    want, want_lr = _quadratic_run(torch, sgd, SCHEDULERS[name], steps=12)
    np.testing.assert_allclose(got_lr, want_lr, rtol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


def _leaves(fw, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    return [fw.tensor(rng.standard_normal(s), requires_grad=True) for s in ((3, 4), (5,))]


def _grads_after(fw, clip):
    params = _leaves(fw)
    (params[0].sum() * 3 + (params[1] ** 2).sum()).backward()
    result = clip(fw, params)
    return [p.grad.numpy().copy() for p in params], float(result) if result is not None else None


@pytest.mark.parametrize("name, clip", [
    ("nn.utils.clip_grad_norm_", lambda fw, ps: fw.nn.utils.clip_grad_norm_(ps, 1.5)),
    ("nn.utils.clip_grad_norm_", lambda fw, ps: fw.nn.utils.clip_grad_norm_(ps, 2.0, norm_type=float("inf"))),
    ("nn.utils.clip_grad_value_", lambda fw, ps: fw.nn.utils.clip_grad_value_(ps, 0.5)),
])
def test_gradient_clipping_matches_torch(name, clip):
    if _missing(name):
        pytest.fail(_missing(name))
    (got, got_norm), (want, want_norm) = _grads_after(lz, clip), _grads_after(torch, clip)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert (got_norm is None) == (want_norm is None) and (got_norm is None or np.isclose(got_norm, want_norm))


def _hooked(fw):
    x = _leaves(fw)[0]
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 3)
    (y.exp() * x).sum().backward()
    return x.grad.numpy(), y.grad.numpy(), y.retains_grad


def test_hooks_and_retain_grad_match_torch():
    for name in ("Tensor.register_hook", "Tensor.retain_grad"):
        if _missing(name):
            pytest.fail(_missing(name))
    for got, want in zip(_hooked(lz), _hooked(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_autograd_grad_matches_torch():
    def gradients(fw):
        x, w = _leaves(fw)
        z = (x.exp() * x).sum() + (w ** 3).sum()
        return [g.numpy() for g in fw.autograd.grad(z, [x, w])]
    for got, want in zip(gradients(lz), gradients(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_autograd_grad_runs_hooks_as_torch():  # in detail: tests/eager/test_autograd_hooks.py
    def gradients(fw):
        x = _leaves(fw)[0]
        y = x * 2
        y.register_hook(lambda g: g * 3)
        return fw.autograd.grad((y * x).sum(), [x])[0].numpy()
    np.testing.assert_allclose(gradients(lz), gradients(torch), rtol=1e-12)


def test_comparisons_and_dtype_names():
    a, b = np.arange(6.0), np.arange(6.0) + 1e-9
    for fw in (lz, torch):
        assert fw.allclose(fw.tensor(a), fw.tensor(b)) and not fw.equal(fw.tensor(a), fw.tensor(b))
        assert fw.equal(fw.tensor(a), fw.tensor(a))
    for name in ("float16", "bfloat16", "float32", "float64", "int64", "bool"):
        assert str(resolve(lz, name)).split(".")[-1] == str(resolve(torch, name)).split(".")[-1], name
        assert lz.zeros(2, dtype=resolve(lz, name)).dtype == resolve(lz, name)


def test_every_numerical_name_has_a_row():
    covered = {r.name for r in FUNCTIONS} | {r.name for r in LAYERS} | set(OPTIMIZERS) | set(SCHEDULERS)
    covered |= {"nn.utils.clip_grad_norm_", "nn.utils.clip_grad_value_", "Tensor.register_hook",
                "Tensor.retain_grad", "autograd.grad", "allclose", "equal", "float16", "bfloat16", "float32",
                "float64", "int64", "bool"}
    # conversions and properties, exercised by every row above and by tests/eager/test_views.py
    presence_only = set(ELSEWHERE) | {"Tensor.numpy", "Tensor.item", "Tensor.tolist", "Tensor.to", "Tensor.stride",
                                      "Tensor.is_contiguous"}
    unchecked = [n for n in NAMES if n not in covered | presence_only | set(KNOWN_MISSING)]
    assert not unchecked, f"names on the list with no parity row: {unchecked}"
