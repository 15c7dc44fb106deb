"""The models ``benchmarks/onnx_models.py`` runs, by suite, and the feeds each is run with.

- ``light``: the nine small CNNs shipped inside the ``onnx`` package (opset 9, upgraded on import);
- ``torchvision``: torchvision's definitions with random weights, batch 1, 3x224x224, opset 17;
- ``transformers``: a BERT and a GPT-2 from small configs (4 layers, 256 wide, 4 heads, a 1000-token
  vocabulary: the vocabulary only sizes the embedding gather), their last hidden state exported
  with dynamic batch and sequence axes, run at every shape of ``SEQUENCE_SHAPES`` by one compiled
  model.

Exports are built on first use into ``build/bench-models/`` (gitignored; delete a file to export
it again) by ``torch.onnx.export`` (the TorchScript exporter).  Exporting needs torch, torchvision
and transformers in the venv: ``make bench-models`` installs them; without them ``require`` exits
naming that target.  Imported as a plain module (the scripts here run from this folder).
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORTS = os.path.join(ROOT, "build", "bench-models")
LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
OPSET = 17
VOCABULARY = 1000
SEQUENCE_SHAPES = ((1, 32), (4, 64))  # (batch, sequence)
SETUP_TARGET = "make bench-models"

LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512")
TORCHVISION = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "densenet121", "vit_b_16")
TRANSFORMERS = ("bert", "gpt2")
# What exporting a suite imports (PIL: torchvision's transforms import it).
NEEDS = {"light": (), "torchvision": ("torch", "torchvision", "PIL"), "transformers": ("torch", "transformers")}


@dataclass(frozen=True)
class BenchModel:
    """One benchmarked model: ``name`` as printed (unique over the suites), its ``suite``, whether
    lezero must upgrade its opset, and the input shapes it runs at (one compiled model for all)."""

    name: str
    suite: str
    upgrade_opset: bool = False
    sequence_shapes: tuple = ()  # transformers: (batch, sequence) pairs; else the export's static shapes

    @property
    def path(self) -> str:
        if self.suite == "light":
            return os.path.join(LIGHT_DIR, f"{self.name}.onnx")
        return os.path.join(EXPORTS, f"{self.name}.onnx")

    @property
    def shape_count(self) -> int:
        return max(len(self.sequence_shapes), 1)

    def shape_label(self, index: int) -> str:
        if self.sequence_shapes:
            return "x".join(map(str, self.sequence_shapes[index]))
        return "static"

    def feeds(self, model: onnx.ModelProto, index: int = 0) -> dict:
        """The inputs of run ``index`` (the same on every call): images ~ N(0, 1); token ids drawn
        from the vocabulary and an attention mask of ones for the transformers."""
        rng = np.random.default_rng(index)
        initializers = {t.name for t in model.graph.initializer}
        out = {}
        for i in model.graph.input:
            if i.name in initializers:
                continue
            if self.sequence_shapes:
                shape = self.sequence_shapes[index]
                out[i.name] = (np.ones(shape, np.int64) if i.name == "attention_mask"
                               else rng.integers(0, VOCABULARY, shape, dtype=np.int64))
            else:
                shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
                out[i.name] = rng.standard_normal(shape, dtype=np.float32)
        return out


MODELS = {m.name: m for m in
          [BenchModel(f"light_{n}", "light", upgrade_opset=True) for n in LIGHT]
          + [BenchModel(n, "torchvision") for n in TORCHVISION]
          + [BenchModel(n, "transformers", sequence_shapes=SEQUENCE_SHAPES) for n in TRANSFORMERS]}
SUITES = ("light", "torchvision", "transformers")


def require(suite: str) -> None:
    """Exit with a message naming ``make bench-models`` when what exporting ``suite`` imports is
    not installed."""
    missing = [m for m in NEEDS[suite] if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"the {suite} models need {', '.join(missing)} (to export them into {EXPORTS}): "
                         f"run `{SETUP_TARGET}` (torchvision --no-deps, pillow and transformers into .venv; "
                         f"torch stays the CPU build)")


def import_torchvision():
    """``import torchvision`` with torch's CPU build.  Installed ``--no-deps`` next to a torch it was
    not built for, its compiled ops (nms, roi_align, ...) do not load, and the fake (meta)
    implementations it registers for them at import raise "operator torchvision::nms does not
    exist".  The model definitions need none of those ops, so registration is skipped while it
    imports.  transformers imports torchvision when it is installed: call this first."""
    import torch

    register_fake = torch.library.register_fake
    torch.library.register_fake = lambda *args, **kwargs: (lambda f: f)
    try:
        import torchvision
    finally:
        torch.library.register_fake = register_fake
    return torchvision


def _last_hidden_state(model):
    """``model`` (a transformers model) as a module with one output, ``last_hidden_state``."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return LastHiddenState().eval()


def _transformer(name: str):
    import transformers

    if name == "bert":
        config = transformers.BertConfig(vocab_size=VOCABULARY, hidden_size=256, num_hidden_layers=4,
                                         num_attention_heads=4, intermediate_size=1024)
        model = transformers.BertModel(config, add_pooling_layer=False)
    else:
        config = transformers.GPT2Config(vocab_size=VOCABULARY, n_embd=256, n_layer=4, n_head=4, n_positions=256,
                                         bos_token_id=VOCABULARY - 1, eos_token_id=VOCABULARY - 1, use_cache=False)
        model = transformers.GPT2Model(config)
    model.config._attn_implementation = "eager"  # plain MatMul/Softmax, not torch's fused attention
    return _last_hidden_state(model)


def export(model: BenchModel) -> str:
    """``model``'s ONNX file, exported first if it is not in ``build/bench-models/`` yet."""
    path = model.path
    if os.path.exists(path):
        return path
    require(model.suite)
    import warnings

    # The torchvision suite needs it; transformers imports it when it is installed.
    torchvision = import_torchvision() if importlib.util.find_spec("torchvision") else None
    import torch

    os.makedirs(EXPORTS, exist_ok=True)
    torch.manual_seed(0)
    if model.suite == "torchvision":
        module = getattr(torchvision.models, model.name)(weights=None).eval()
        # torchvision initializes ViT's classification head to zero: its output would be zero
        # whatever the input, and comparing it with ORT would check nothing.
        with torch.no_grad():
            for p in module.parameters():
                if p.dim() > 1 and not p.any():
                    p.normal_(0.0, 0.02)
        args, names, dynamic = (torch.randn(1, 3, 224, 224),), ["x"], None
    else:
        module = _transformer(model.name)
        ids = torch.randint(0, VOCABULARY, (2, 16))
        args, names = (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"]
        axes = {0: "batch", 1: "sequence"}
        dynamic = {"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes}
    partial = path + ".partial"
    # Not under torch.no_grad(): without autograd, torch's MultiheadAttention (ViT) takes its fused
    # fast path, aten::_native_multi_head_attention, which has no ONNX export.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, partial, opset_version=OPSET, dynamo=False, input_names=names,
                          output_names=None if dynamic is None else ["last_hidden_state"], dynamic_axes=dynamic)
    os.replace(partial, path)  # a file in build/bench-models/ is always a whole export
    return path
