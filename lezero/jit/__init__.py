"""``lz.jit``: eager code recorded into IR and compiled whole.

- ``trace(model, example_inputs)``: the forward pass as one compiled function (``TracedModule``);
- ``save(traced, path)`` / ``load(path)``: its IR text and weights, without pickle;
- ``compile_train_step(model, loss_fn, optimizer, example_inputs, example_target)``: forward, loss,
  gradients (the autodiff pass) and the optimizer's update as one compiled function (``TrainStep``).
"""
from lezero.jit.trace import TracedModule, TraceError, trace  # noqa: F401
from lezero.jit.train_step import TrainStep, compile_train_step  # noqa: F401
from lezero.jit.serialization import load, save  # noqa: F401
