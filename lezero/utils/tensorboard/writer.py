"""``lz.utils.tensorboard.SummaryWriter``: PyTorch's ``torch.utils.tensorboard.SummaryWriter``
on lz tensors, writing the event files TensorBoard reads.

The record framing, CRCs, the asynchronous queue and every summary protobuf are tensorboardX's
(a kept library with few dependencies), so this class is PyTorch's signatures over it: each
method takes lz tensors, numpy arrays, Python numbers (and torch tensors, which tensorboardX
reads) and hands tensorboardX numpy arrays.  What is ours:

- ``add_graph`` draws the compiler's IR (``lezero.utils.tensorboard.graph``): a traced model, a
  compiled function or ONNX model, an ``ir.Module``, or an ``nn.Module`` / function with example
  inputs, which is traced here with each op located in its module (``fc1/matmul``); ``fused=True``
  draws the kernels the CPU runs, each holding its fused ops.
- ``add_hparams`` writes the hyperparameters into *this* writer's run folder, beside the scalars
  the run logged, so one run is one folder (``runs/lr0.1/``) and TensorBoard's HParams tab joins
  each run's hyperparameters with its curves.  PyTorch writes them into a new sub-folder named by
  the time (``runs/lr0.1/1733112345.67/``): one run becomes two, and its metric curves are not in
  the hparams session.  ``run_name`` still picks a sub-folder of that name when given.

``tensorboardX`` imports torch at load when torch is installed (about 1.5 s); lezero imports this
module only when a user does (``from lezero.utils.tensorboard import SummaryWriter``).
"""
from __future__ import annotations

import os
import time

import numpy as np
import tensorboardX
from tensorboardX.summary import hparams as hparams_summaries
from tensorboardX.summary import scalar as scalar_summary

from lezero.eager.autograd import trace as record
from lezero.eager.core import Mode
from lezero.eager.creation import tensor
from lezero.eager.tensor import Tensor
from lezero.ir.attributes import ArrayAttr, DictionaryAttr, StringAttr
from lezero.ir.core import ModuleOp
from lezero.utils.tensorboard.graph import fused_graph_def, graph_def


def to_numpy(value):
    """A numpy array (or the value itself when tensorboardX reads it as is) for ``value``: an lz
    tensor (detached, copied to the host), a numpy array, a number or a list of numbers."""
    if isinstance(value, Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return np.asarray([to_numpy(v) for v in value])
    return value


def _scalar(value) -> float:
    array = to_numpy(value)
    if isinstance(array, np.ndarray):
        if array.size != 1:
            raise ValueError(f"add_scalar: a scalar value must have one element, got shape {array.shape}")
        return float(array.reshape(()))
    return float(array)


class SummaryWriter(tensorboardX.SummaryWriter):
    """Writes event files to ``log_dir`` (default ``runs/<date>_<host><comment>``, as PyTorch's)."""

    def __init__(self, log_dir=None, comment: str = "", purge_step=None, max_queue: int = 10,
                 flush_secs: int = 120, filename_suffix: str = ""):
        super().__init__(logdir=None if log_dir is None else str(log_dir), comment=comment, purge_step=purge_step,
                         max_queue=max_queue, flush_secs=flush_secs, filename_suffix=filename_suffix)
        self.log_dir = self.logdir

    def get_logdir(self) -> str:
        return self.log_dir

    def add_scalar(self, tag: str, scalar_value, global_step=None, walltime=None, new_style: bool = False,
                   double_precision: bool = False):
        super().add_scalar(tag, _scalar(scalar_value), global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step=None, walltime=None):
        """As PyTorch's: each key is a run ``<log_dir>/<main_tag>_<key>`` of its own (tensorboardX
        nests them as ``<main_tag>/<key>``), its curve tagged ``main_tag``."""
        self._get_file_writer()  # sets up all_writers, which close() and flush() go through
        walltime = time.time() if walltime is None else walltime
        for key, value in tag_scalar_dict.items():
            path = os.path.join(self.log_dir, main_tag.replace("/", "_") + "_" + key)
            writer = self.all_writers.get(path)
            if writer is None:
                writer = self.all_writers[path] = tensorboardX.FileWriter(path, self._max_queue, self._flush_secs,
                                                                           self._filename_suffix)
            writer.add_summary(scalar_summary(main_tag, _scalar(value)), global_step, walltime)

    def add_histogram(self, tag: str, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        super().add_histogram(tag, np.asarray(to_numpy(values)), global_step, bins, walltime, max_bins)

    def add_image(self, tag: str, img_tensor, global_step=None, walltime=None, dataformats: str = "CHW"):
        super().add_image(tag, np.asarray(to_numpy(img_tensor)), global_step, walltime, dataformats)

    def add_images(self, tag: str, img_tensor, global_step=None, walltime=None, dataformats: str = "NCHW"):
        super().add_images(tag, np.asarray(to_numpy(img_tensor)), global_step, walltime, dataformats)

    def add_text(self, tag: str, text_string: str, global_step=None, walltime=None):
        super().add_text(tag, text_string, global_step, walltime)

    def add_embedding(self, mat, metadata=None, label_img=None, global_step=None, tag: str = "default",
                      metadata_header=None):
        label = None if label_img is None else np.asarray(to_numpy(label_img))
        super().add_embedding(np.asarray(to_numpy(mat)), metadata, label, global_step, tag, metadata_header)

    def add_pr_curve(self, tag: str, labels, predictions, global_step=None, num_thresholds: int = 127,
                     weights=None, walltime=None):
        super().add_pr_curve(tag, np.asarray(to_numpy(labels)), np.asarray(to_numpy(predictions)), global_step,
                             num_thresholds, weights, walltime)

    def add_hparams(self, hparam_dict: dict, metric_dict: dict, hparam_domain_discrete=None, run_name=None,
                    global_step=None):
        """Record a run's hyperparameters and its final metrics into this run's folder (see the
        module docstring); the metrics are also scalars ``metric_dict``'s keys name."""
        if not isinstance(hparam_dict, dict) or not isinstance(metric_dict, dict):
            raise TypeError("add_hparams: hparam_dict and metric_dict must be dicts")
        if hparam_domain_discrete is not None:
            for name, domain in hparam_domain_discrete.items():
                if name not in hparam_dict or hparam_dict[name] not in domain:
                    raise ValueError(f"add_hparams: hparam_domain_discrete[{name!r}] = {domain!r} does not hold "
                                     f"the value {hparam_dict.get(name)!r}")
        values = {k: (_scalar(v) if isinstance(v, (Tensor, np.ndarray)) else v) for k, v in hparam_dict.items()}
        metrics = {k: _scalar(v) for k, v in metric_dict.items()}
        experiment, session_start, session_end = hparams_summaries(values, metrics)
        if run_name is None:
            target, owned = self, False
        else:
            target, owned = tensorboardX.SummaryWriter(logdir=os.path.join(self.log_dir, run_name)), True
        writer = target._get_file_writer()
        for summary in (experiment, session_start, session_end):
            writer.add_summary(summary, global_step)
        for k, v in metrics.items():
            tensorboardX.SummaryWriter.add_scalar(target, k, v, global_step)
        if owned:
            target.close()

    def add_graph(self, model, input_to_model=None, verbose: bool = False, use_strict_trace: bool = True, *,
                  fused: bool = False):
        """Draw ``model``'s graph: an ``ir.Module``, anything holding one as ``.module`` (a
        ``jit.trace`` result, ``lezero.compile``'s function, an ONNX ``CompiledModel``), or an
        ``nn.Module`` / function of tensors traced here on ``input_to_model`` (a tensor or a tuple).
        ``fused``: the kernels after fusion instead, each a box of its ops (needs static shapes or
        ``input_to_model``)."""
        inputs = () if input_to_model is None else \
            (tuple(input_to_model) if isinstance(input_to_model, (tuple, list)) else (input_to_model,))
        module = _graph_module(model, inputs)
        shapes = None
        if inputs:
            func = module.functions[0]
            shapes = [tuple(np.shape(to_numpy(x))) for x in inputs]
            shapes += [tuple(a.type.shape) for a in func.arguments[len(inputs):]]
        graph = fused_graph_def(module, shapes=shapes) if fused else graph_def(module)
        if verbose:
            print(graph)
        self._get_file_writer().add_onnx_graph(graph)  # tensorboardX's name: an Event holding a GraphDef


def _graph_module(model, inputs: tuple) -> ModuleOp:
    """The ``ModuleOp`` to draw for ``model`` (see ``add_graph``)."""
    if isinstance(model, ModuleOp):
        return model
    if hasattr(model, "module") and not hasattr(model, "named_modules"):
        held = model.module
        if not isinstance(held, ModuleOp):
            raise ValueError(f"add_graph: this {type(model).__name__} has no single lz module to draw (an ONNX model "
                             f"whose compile needs input values: pass lezero.onnx.import_model's module)")
        return held
    if not callable(model):
        raise TypeError(f"add_graph: expected an nn.Module, a function, a traced or compiled model or an "
                        f"ir.Module, got {type(model).__name__}")
    if not inputs:
        raise ValueError(f"add_graph: {type(model).__name__} must be traced: pass input_to_model "
                         f"(a tensor or a tuple of tensors)")
    return ModuleOp([_traced_with_scopes(model, inputs)])


def _traced_with_scopes(model, inputs: tuple):
    """Trace ``model(*inputs)`` with every op located in the module whose ``forward`` ran it
    (forward hooks on ``model.named_modules()`` set ``Mode.scope``), parameters and buffers as
    arguments named by their state-dict keys."""
    handles = []
    scopes = []

    def enter(name):
        def hook(module, args):
            scopes.append(Mode.scope)
            Mode.scope = name or None
        return hook

    def leave(module, args, out):
        Mode.scope = scopes.pop()

    named_modules = list(model.named_modules()) if hasattr(model, "named_modules") else []
    for name, sub in named_modules:
        if name:  # the root's ops are the top level
            handles += [sub.register_forward_pre_hook(enter(name)), sub.register_forward_hook(leave)]
    try:
        traced = record(model, *[x if isinstance(x, Tensor) else tensor(x) for x in inputs],
                        name="forward")
    finally:
        for h in handles:
            h.remove()
        Mode.scope = None
    state = {}
    if hasattr(model, "named_parameters") and hasattr(model, "named_buffers"):
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            state.setdefault(id(t), name)
    func = traced.func
    names = [f"input{i}" for i in range(len(traced.inputs))]
    names += [state.get(id(t), f"constant{k}") for k, t in enumerate(traced.captured)]
    func.attributes["arg_attrs"] = ArrayAttr(tuple(DictionaryAttr({"lz.name": StringAttr(n)}) for n in names))
    return func
