"""The TFLite interpreter (ai_edge_litert, the official runtime) as the oracle of lezero's TFLite
export: run a flatbuffer on numpy inputs (each input resized to its array's shape, so a dynamic
batch works), and list its ops."""
from __future__ import annotations

import numpy as np
from ai_edge_litert.interpreter import Interpreter


def run_tflite(data: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    interpreter = Interpreter(model_content=data)
    details = interpreter.get_input_details()
    for d, x in zip(details, inputs):
        interpreter.resize_tensor_input(d["index"], x.shape)
    interpreter.allocate_tensors()
    for d, x in zip(details, inputs):
        interpreter.set_tensor(d["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def op_names(data: bytes) -> list[str]:
    return [op["op_name"] for op in Interpreter(model_content=data)._get_ops_details()]
