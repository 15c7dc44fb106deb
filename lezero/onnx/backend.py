"""``onnx.backend.base.Backend`` for lezero, so ONNX's test suites run against it::

    import lezero.onnx.backend
    onnx.backend.test.BackendTest(lezero.onnx.backend, __name__)

``prepare`` compiles the model (``lezero.onnx.compile``) for the CPU, the only device. Models older
than opset 11 are converted first with ``onnx.version_converter`` (``upgrade_opset=False`` refuses
them instead, as ``import_model`` does by default): the backend runs whatever model ONNX's
harness hands it.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

import lezero.onnx.element_types as element_types
from lezero.onnx.compiled_model import CompiledModel


class LezeroRep(BackendRep):
    """A prepared model: ``run(inputs)`` with a list (graph input order) or a dict of arrays."""

    def __init__(self, compiled: CompiledModel):
        self.compiled = compiled

    def run(self, inputs, **kwargs):
        names = self.compiled.input_names
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(names):
                raise ValueError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(inputs)}")
            feeds = dict(zip(names, inputs))
        outputs = self.compiled.run(feeds)
        return namedtupledict("Outputs", self.compiled.output_names)(*outputs.values())


class LezeroBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, ValueError):
            return False

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> LezeroRep:
        if not cls.supports_device(device):
            raise RuntimeError(f"lezero's ONNX backend runs on the CPU only, not {device!r}")
        upgrade_opset = kwargs.pop("upgrade_opset", True)
        return LezeroRep(CompiledModel(model, upgrade_opset=upgrade_opset))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """One node as a model: its present inputs are graph inputs typed from ``inputs``."""
        present = [name for name in node.input if name]
        if isinstance(inputs, dict):
            arrays = [np.asarray(inputs[name]) for name in present]
        else:
            arrays = [np.asarray(a) for a in inputs]
        if len(arrays) != len(present):
            raise ValueError(f"node {node.op_type} has {len(present)} inputs, got {len(arrays)} arrays")
        graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for name, a in zip(present, arrays)]
        graph_outputs = []
        for i, name in enumerate(node.output):
            if not name:
                continue
            if outputs_info is not None and i < len(outputs_info):
                dtype, shape = outputs_info[i]
                graph_outputs.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape))
            else:
                graph_outputs.append(helper.make_empty_tensor_value_info(name))
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        graph = helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain or "", opset)])
        return cls.prepare(model, device, **kwargs).run(arrays)


prepare = LezeroBackend.prepare
run_model = LezeroBackend.run_model
run_node = LezeroBackend.run_node
supports_device = LezeroBackend.supports_device
is_compatible = LezeroBackend.is_compatible
_ = element_types
