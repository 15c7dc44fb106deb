"""The compiler-first training path: a whole training step as one compiled function.

``compile_train_step(model, loss_fn, optimizer, example_inputs, example_target)`` builds::

    @train_step(inputs..., target, parameters and buffers..., optimizer state..., hyperparameters...)
        -> (loss, new parameters..., new optimizer state...)

1. **forward and loss**: ``loss_fn(model(*inputs), target)`` recorded as in ``jit.trace``
   (parameters and buffers are named arguments, the batch dim dynamic);
2. **gradients**: the autodiff pass (``differentiate``) on that function, for a batch size made
   static (gradient rules materialize shapes), with the loss's cotangent a constant 1;
3. **the update**: per parameter group, the optimizer's own ``update_rule`` (the rule its eager
   ``step()`` runs as a fused kernel) built on each parameter, its gradient and its state; the
   hyperparameters (learning rate, bias corrections) are rank-0 arguments the rule computes per
   step in Python, so a learning-rate schedule never recompiles and the compiled step follows the
   eager loop's numbers;

compiled by ``lezero.compile``'s pipeline (gradient kernels fuse with the update: the Adam step of
a weight becomes the epilogue of the matmul computing its gradient), once per input shape.

**It runs where the parameters are**: a model on cuda compiles its step for cuda (numpy data go
there; the parameters and the optimizer state stay there: the results of each step, new device
tensors, become their storage).

**On the CPU, state lives in numpy buffers, double-buffered.**  A call reads each parameter's array and its
optimizer state (``optimizer.state[p]``, PyTorch's layout: ``exp_avg``, ``exp_avg_sq``, ``step``;
``momentum_buffer``) and writes the new values into a second set of arrays, which then become the
tensors' storage (the old ones are the next call's outputs).  Writing in place instead would be
wrong in general: a kernel updating ``W2`` could run before the kernel that still reads the old
``W2`` for the previous layer's gradient.  The model, the optimizer and its ``state_dict`` always
see the current values, so eager and compiled steps can be mixed freely.

**Gradient clipping and accumulation are part of the step.**  ``clip_grad_norm``/``clip_grad_value``
become IR ops on the gradients before the update (``optim.grad_clipping``: PyTorch's
``clip_grad_norm_``/``clip_grad_value_`` numerics).  With ``accumulate=k`` a call is one
micro-batch: the first ``k - 1`` calls of a cycle run a step that returns the gradients summed so
far (kept in ``p.grad``, as ``backward()`` sums them), the last adds its own, clips, updates and
clears ``p.grad``; each of these three kinds of call is one compiled function.

**Training-mode layers are part of the step.**  Dropout draws from the generator's state, an
argument of the step bound and advanced at every call (``lezero.creation.RandomArgument``), so
every step draws new masks, the ones the eager loop draws from the same seed.  A forward that
updates buffers in place (BatchNorm's running statistics and batch count) returns their new
values as extra results of the step, which become the buffers' storage after the call, as for the
parameters.  The gradient is taken of the loss alone; the buffer updates are the forward's ops
again, which CSE merges with the gradient function's copy.
"""
from __future__ import annotations

import numpy as np

from lezero.eager.device_arrays import CPU, like, numpy_dtype, zeros_like
from lezero.eager.dispatch import compile_for, tensor_type, user_location
from lezero.ir.attributes import ArrayAttr, DictionaryAttr, StringAttr
from lezero.ir.builder import Builder
from lezero.ir.core import FuncOp, ModuleOp
from lezero.ir.interpreter import check_argument
from lezero.ir.printer import print_module
from lezero.ir.types import F32, F64, I32, FunctionType, TensorType, element_type_of
from lezero.amp.grad_scaler import GradScaler, emit_unscale, emit_update_scale  # issue 13
from lezero.jit.trace import (NAME_ATTR, TraceError, argument_names, as_input_tuple, bind_arguments,
                              bound_arrays, device_inputs, generalize_batch, record_function, reinfer,
                              run_device, with_batch)
from lezero.optim.grad_clipping import GradClipping
from lezero.optim.lbfgs import LBFGS
from lezero.optim.optimizer import Optimizer, UpdateRule
from lezero.passes.autodiff import differentiate
from lezero.passes import run_pipeline  # issue 14: bucket-all-reduce
from lezero.profiler.profiler import recorded  # issue 16
from lezero.runtime.heartbeat import beat as _heartbeat  # issue 15: lezero-run --heartbeat-timeout
from lezero.eager.core import as_inputs, wrap as _wrap
from lezero.eager.tensor import Tensor
# issue 14: the step of a DistributedDataParallel model (its gradients all-reduced between the kernels)
from lezero.jit.distributed_step import DistributedTrainStep  # noqa: E402
from lezero.nn.parallel import DistributedDataParallel  # noqa: E402


# --- building the step ----------------------------------------------------------------------------------

def build_step_function(forward: FuncOp, updated: list, structure: tuple, name: str = "train_step", *,
                        clipping: GradClipping | None = None, accumulated: bool = False,
                        update: bool = True, scaled: bool = False, all_reduce_gradients: bool = False) -> FuncOp:
    """``@train_step`` from a static ``@forward(data..., parameters and buffers...) -> (loss, new
    buffers...)``: returns the loss, the new parameters, the new optimizer states, the new buffers.

    ``updated``: ``(argument index, parameter, group index)`` per parameter to update;
    ``structure``: per group ``(update op, attrs, state keys, number of scalars)``.
    ``accumulated``: the step also takes the gradients accumulated so far (one argument per
    updated parameter, after the forward's) and adds its own to them; without ``update`` it
    returns those sums instead of updating (the loss, the summed gradients, the new buffers);
    ``clipping`` acts on the (summed) gradients just before the update.
    ``scaled`` (a ``GradScaler``'s step, issue 13): the step also takes the scale, the growth tracker and
    the scaler's growth factor, backoff factor and growth interval; the loss's cotangent is the scale
    (the backward of ``scaler.scale(loss)``), the gradients are unscaled and checked for inf/nan
    (``emit_unscale``), and where one was found every parameter and state keeps its old value
    (``lz.select`` of old and new: the update is computed and discarded, no branch); it also returns
    the new scale and tracker (``emit_update_scale``) and the inf flag.
    ``all_reduce_gradients`` (issue 14, a DDP model's step): an updating step averages each (summed)
    gradient over the ranks (``lz.all_reduce {op = "avg"}``) before it unscales, clips and updates."""
    loss_only = forward.clone()
    loss_only.return_op.set_operands(list(loss_only.return_op.operands)[:1])
    loss_only.update_function_type()
    grad = differentiate(loss_only, wrt=[index for index, _, _ in updated])
    step = FuncOp(name, FunctionType([], []), forward.location)
    block = step.entry_block
    b = Builder.at_end(block)
    names = argument_names(forward)
    value_map = {old: block.add_argument(old.type) for old in grad.arguments[:len(forward.arguments)]}
    (seed,) = grad.arguments[len(forward.arguments):]
    if not scaled:
        value_map[seed] = b.constant(np.ones(seed.type.shape, seed.type.element_type.numpy_dtype))
    sums = []
    if accumulated:
        sums = [block.add_argument(tensor_type(p._data)) for _, p, _ in updated]
        names += [f"{names[index]}.grad" for index, _, _ in updated]
    states, scalars = [], []
    if update:
        for index, p, g in updated:
            keys = structure[g][2]
            t = tensor_type(p._data)
            states.append([block.add_argument(t) for _ in keys])
            names += [f"{names[index]}.{key}" for key in keys]
        for g, (_, _, _, count) in enumerate(structure):
            p = next(p for _, p, gi in updated if gi == g)
            scalars.append([block.add_argument(TensorType((), element_type_of(numpy_dtype(p._data))))
                            for _ in range(count)])
            names += [f"group{g}.scalar{i}" for i in range(count)]
    if scaled:
        scaler_args = [block.add_argument(TensorType((), et)) for et in (F32, I32, F32, F32, I32)]
        names += ["scaler.scale", "scaler.growth_tracker", "scaler.growth_factor", "scaler.backoff_factor",
                  "scaler.growth_interval"]
        scale = scaler_args[0]
        if seed.type.element_type != F32:
            scale = b.op("lz.cast", scale, to=seed.type.element_type)
        value_map[seed] = b.op("lz.reshape", scale, shape=list(seed.type.shape)) if seed.type.shape else scale
    for op in grad.entry_block.ops[:-1]:
        b.insert(op.clone(value_map))
    loss, *grads = [value_map.get(v, v) for v in grad.return_op.operands]
    if accumulated:
        grads = [b.op("lz.add", total, g) for total, g in zip(sums, grads)]  # backward() adds into .grad
    forward_map = dict(zip(forward.arguments, block.args))
    for op in forward.entry_block.ops[:-1]:
        b.insert(op.clone(forward_map))
    new_buffers = [forward_map.get(v, v) for v in forward.return_op.operands[1:]]
    if not update:
        b.create("func.return", [loss] + grads + new_buffers, result_types=[])
    else:
        if all_reduce_gradients:  # issue 14: bucket-all-reduce places them (lezero/jit/distributed_step.py)
            grads = [b.op("lz.all_reduce", g, op="avg", tag=names[index]) for (index, _, _), g in zip(updated, grads)]
        if scaled:  # torch's inv_scale: the reciprocal in f64, rounded to f32
            inv_scale = b.op("lz.cast", b.op("lz.reciprocal", b.op("lz.cast", scaler_args[0], to=F64)), to=F32)
            found_inf, grads = emit_unscale(b, inv_scale, grads)
        if clipping is not None:
            grads = clipping.emit(b, grads)
        new_params, new_states = [], []
        for (index, _, g), gradient, state in zip(updated, grads, states):
            update_op, attrs, _, _ = structure[g]
            results = update_op.build(b, attrs, [block.args[index], gradient, *state, *scalars[g]])
            new_params.append(results[0])
            new_states += results[1:]
        scaler_results = []
        if scaled:
            skip = b.op("lz.cmp", found_inf, b.constant(np.float32(0)), predicate="ne")
            old = [block.args[index] for index, _, _ in updated] + [v for state in states for v in state]
            kept = [b.op("lz.select", skip, o, n) for o, n in zip(old, new_params + new_states)]
            new_params, new_states = kept[:len(new_params)], kept[len(new_params):]
            scaler_results = [*emit_update_scale(b, scaler_args[0], scaler_args[1], found_inf, *scaler_args[2:]),
                              found_inf]
        b.create("func.return", [loss] + new_params + new_states + new_buffers + scaler_results, result_types=[])
    step.update_function_type()
    step.attributes["arg_attrs"] = ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n in names])
    return step


class TrainStep:
    """``loss = step(*inputs, target)``: one compiled training step (see the module docstring).
    ``.graph`` is the step's IR at the example shapes, ``.forward_graph`` the recorded forward
    pass and loss (batch dim dynamic)."""

    def __init__(self, forward: FuncOp, batch_args: list[int], n_inputs: int, bound: list, optimizer,
                 example_shapes: list, static_reason: str = "", buffers: list = (), random: list = (),
                 clipping: GradClipping | None = None, accumulate: int = 1, scaler: GradScaler | None = None,
                 all_reduce_bucket_bytes: int | None = None):
        self.forward = forward
        self.all_reduce_bucket_bytes = all_reduce_bucket_bytes  # issue 14: a DDP step's buckets (None: no DDP)
        self.scaler = scaler                # a GradScaler whose scaling, inf check and update the step holds
        self.clipping = clipping
        self.accumulate = accumulate        # calls (micro-batches) per optimizer update
        self.micro_batch = 0                # calls since the last update
        self.buffers = list(buffers)        # tensors whose new values the step returns after the states
        self.random = list(random)          # RandomArgument per generator: bound before each call
        self.static_reason = static_reason  # why the batch dim could not be made dynamic
        self.batch_args = batch_args        # data arguments whose dim 0 is the (dynamic) batch
        self.n_inputs = n_inputs
        self.bound = bound                  # (name, tensor) bound to the arguments after the data
        self.optimizer = optimizer
        self.example_shapes = example_shapes
        position = {id(t): i for i, (_, t) in enumerate(bound)}
        n_data = n_inputs + 1
        self.updated = []                   # (argument index, parameter, group index)
        self.groups = []
        for group in optimizer.param_groups:
            members = [p for p in group["params"] if id(p) in position and p.requires_grad]
            if members:
                self.groups.append(group)
                self.updated += [(n_data + position[id(p)], p, len(self.groups) - 1) for p in members]
        if not self.updated:
            raise TraceError("compile_train_step: the loss depends on none of the optimizer's parameters", user_location())
        self._dtypes = [next(numpy_dtype(p._data) for _, p, gi in self.updated if gi == g)
                        for g in range(len(self.groups))]
        self._steps: dict[tuple, tuple] = {}    # (shapes, structure, device, phase) -> (compiled, runner)
        self._spares: dict[int, np.ndarray] = {}
        accumulated, update = self._phase()
        self._compiled_for(example_shapes, self._updates() if update else [], self._device(), accumulated, update)

    def _phase(self) -> tuple[bool, bool]:
        """For the coming call: whether it adds to gradients accumulated by the calls before it,
        and whether it updates (the last micro-batch of ``accumulate``)."""
        return self.micro_batch > 0, self.micro_batch == self.accumulate - 1

    def _updates(self) -> list[UpdateRule]:
        """Each group's update rule for the coming step (the state it needs is created by ``_advance``)."""
        state = self.optimizer.state
        updates = []
        for g, group in enumerate(self.groups):
            states = [state[p] for _, p, gi in self.updated if gi == g]
            try:
                updates.append(self.optimizer.update_rule(group, states))
            except RuntimeError as e:
                raise RuntimeError(f"compile_train_step: {e}") from None
        return updates

    def _advance(self, updates: list[UpdateRule]) -> None:
        """Count the step and create missing state, as the eager optimizer does before its update."""
        for _, p, g in self.updated:
            self.optimizer.advance(p, updates[g])

    def _device(self, data: tuple = ()):
        """The device the step runs on: the parameters' (``run_device``; tensor ``data`` must be
        there too)."""
        return run_device("train_step", self.bound, data)

    def _compiled_for(self, shapes: list, updates: list[UpdateRule], device, accumulated: bool = False,
                      update: bool = True) -> tuple:
        structure = tuple((u.op, u.attrs, u.state_keys, len(u.scalars)) for u in updates)
        key = (tuple(shapes), structure, device, accumulated, update)
        entry = self._steps.get(key)
        if entry is None:
            func = build_step_function(self._forward_at(shapes), self.updated, structure, clipping=self.clipping,
                                       accumulated=accumulated, update=update, scaled=self.scaler is not None,
                                       all_reduce_gradients=self.all_reduce_bucket_bytes is not None)
            module = ModuleOp([func])
            if self.all_reduce_bucket_bytes is not None:  # issue 14: DDP's buckets, overlapping the backward
                module = run_pipeline(module, f"bucket-all-reduce{{bucket-bytes={self.all_reduce_bucket_bytes}}}")
            compiled = compile_for(module, func.sym_name, device)
            entry = self._steps[key] = (compiled, compiled.runner([a.type.shape for a in func.arguments]))
        return entry

    def _forward_at(self, shapes: list) -> FuncOp:
        """The forward function with static data shapes ``shapes``."""
        args = self.forward.arguments
        batch = shapes[self.batch_args[0]][0] if self.batch_args else None
        for i, (arg, shape) in enumerate(zip(args, shapes)):
            want = tuple(arg.type.shape)
            if i in self.batch_args:
                want = (batch,) + want[1:]
            if tuple(shape) != want:
                name = argument_names(self.forward)[i]
                raise TraceError(f"compile_train_step: data argument #{i} ({name}) has shape {tuple(shape)}; the "
                                 f"step was built for {self.example_shapes[i]}"
                                 f"{' with any batch size' if i in self.batch_args else ''}"
                                 f"{' (' + self.static_reason + ')' if self.static_reason else ''}", user_location())
        if not self.batch_args:
            return self.forward
        forward = with_batch(self.forward, self.batch_args, batch)
        reinfer(forward)
        return forward

    @property
    def graph(self) -> str:
        """The updating step (with ``accumulate``, the cycle's last call)."""
        compiled, _ = self._compiled_for(self.example_shapes, self._updates(), self._device(), self.accumulate > 1)
        return print_module(compiled.module)

    @property
    def forward_graph(self) -> str:
        return print_module(self.forward)

    @recorded("train_step")  # issue 16: lz.profiler shows the whole step, its Python around the kernels
    def __call__(self, *data) -> Tensor:
        _heartbeat()
        if len(data) != self.n_inputs + 1:
            raise TypeError(f"the train step takes {self.n_inputs} input(s) and a target, got {len(data)} arguments")
        data = as_inputs(data, "train_step")  # a torch DataLoader's batches, numpy: tensors sharing their memory
        device = self._device(data)
        for r in self.random:
            r.bind()
        arrays = [x._data if isinstance(x, Tensor) else np.asarray(x) for x in data]
        accumulated, update = self._phase()
        updates = self._updates() if update else []
        compiled, run = self._compiled_for([tuple(a.shape) for a in arrays], updates, device, accumulated, update)
        func = compiled.func
        on_host = device == CPU
        if on_host:
            for i, a in enumerate(arrays):
                if a.dtype != func.arguments[i].type.element_type.numpy_dtype or not a.flags.c_contiguous:
                    arrays[i] = np.ascontiguousarray(check_argument(func, i, a))
        else:
            arrays = device_inputs(func, arrays, device)
        bound = bound_arrays(self.bound, func.arguments[len(arrays):], device)
        params = [p for _, p, _ in self.updated]
        sums = [self._gradient_sum(p) for p in params] if accumulated or not update else []
        inputs = arrays + bound + ([t._data for t in sums] if accumulated else [])
        if update:
            self._advance(updates)
            # the tensors whose storage this step replaces, in result order: parameters, states, buffers
            state = self.optimizer.state
            owners = params + [state[p][key] for (_, p, g) in self.updated for key in updates[g].state_keys]
            inputs += [t._data for t in owners[len(params):]]
            inputs += [like(np.asarray(s, self._dtypes[g]), params[0]._data) for g, u in enumerate(updates)
                       for s in u.scalars]
            if self.scaler is not None:
                inputs += [like(t._data, params[0]._data) for t in self.scaler.compiled_state()]
        else:  # the summed gradients, then the buffers
            owners = sums
        owners += self.buffers
        if not on_host:  # the device's runner makes its results: no spares to write into
            results = run(inputs)
            for t, new in zip(owners, results[1:]):
                t._data = new
                t._version += 1
            self._scaler_done(results[1 + len(owners):])
            return self._finish(update, params, results[0])
        outs = [np.empty((), func.function_type.results[0].element_type.numpy_dtype)]
        for t in owners:
            spare = self._spares.get(id(t))
            if spare is None or spare is t._data or spare.shape != t._data.shape or spare.dtype != t._data.dtype:
                spare = np.empty_like(t._data)
            outs.append(spare)
        if self.scaler is not None:
            outs += [np.empty((), np.float32), np.empty((), np.int32), np.empty((), np.float32)]
        results = run(inputs, outs)
        for t, new in zip(owners, results[1:]):
            self._spares[id(t)] = t._data
            t._data = new
            t._version += 1
        self._scaler_done(results[1 + len(owners):])
        return self._finish(update, params, results[0])

    def _scaler_done(self, results: list) -> None:
        """Hand the new scale and tracker to the scaler; a skipped step (an inf or nan gradient) was
        not a step: the optimizer's step counts go back, as ``scaler.step`` never called ``step()``."""
        if self.scaler is None:
            return
        new_scale, new_tracker, found_inf = results
        found = float(found_inf.item())
        self.scaler.compiled_step_done(_wrap(new_scale), _wrap(new_tracker), found)
        if found and self.optimizer.counts_steps:
            for _, p, _ in self.updated:
                self.optimizer.state[p]["step"]._data[...] -= 1

    def _gradient_sum(self, p: Tensor) -> Tensor:
        """``p.grad`` as the gradients summed over this cycle's calls so far; the cycle's first
        call starts it afresh (its own gradient becomes the value), as after ``zero_grad()``."""
        if p.grad is None or self.micro_batch == 0:
            p.grad = _wrap(zeros_like(p._data))
        return p.grad

    def _finish(self, update: bool, params: list, loss) -> Tensor:
        """Count the micro-batch; an update consumes the summed gradients (``p.grad`` becomes
        ``None``, as ``zero_grad()`` leaves it)."""
        self.micro_batch = (self.micro_batch + 1) % self.accumulate
        if update and self.accumulate > 1:
            for p in params:
                self._spares.pop(id(p.grad), None)
                p.grad = None
        return _wrap(loss)

    def __repr__(self) -> str:
        return f"<TrainStep: {len(self.updated)} parameters, {len(self._steps)} compiled shape(s)>"


def compile_train_step(model, loss_fn, optimizer, example_inputs, example_target, *,
                       dynamic_batch: bool = True, clip_grad_norm: float | None = None, norm_type: float = 2.0,
                       clip_grad_value: float | None = None, accumulate: int = 1,
                       scaler: GradScaler | None = None, _all_reduce_bucket_bytes: int | None = None) -> TrainStep:
    """One compiled function for a whole training step; ``step(*inputs, target)`` runs it and returns
    the loss (a rank-0 tensor).  See the module docstring.

    ``clip_grad_norm`` (a max norm, of ``norm_type``) and ``clip_grad_value`` clip the gradients
    inside the step, as ``nn.utils.clip_grad_norm_(model.parameters(), ...)`` /
    ``clip_grad_value_`` before ``optimizer.step()`` do.  ``accumulate=k``: gradient accumulation,
    each call one micro-batch: the gradients of ``k`` consecutive calls sum in ``p.grad`` (as
    ``backward()`` sums them; divide the loss by ``k`` in ``loss_fn`` for their mean) and every
    ``k``-th call clips, updates and clears them.

    ``scaler`` (an enabled ``lz.amp.GradScaler``): the step does what ``scaler.scale(loss).backward();
    scaler.step(optimizer); scaler.update()`` does, inside the one compiled function (see
    ``build_step_function``); clipping acts on the unscaled gradients, as after ``scaler.unscale_``.
    Made inside ``lz.autocast``, the step is mixed precision (the ``autocast`` pass runs on its
    forward before the gradient is taken).  ``_all_reduce_bucket_bytes``: internal (a DDP model's step)."""
    if isinstance(model, DistributedDataParallel):  # issue 14: the wrapped module's step, reduced by DDP
        return DistributedTrainStep(compile_train_step(model.module, loss_fn, optimizer, example_inputs, example_target,
                                                       dynamic_batch=dynamic_batch, clip_grad_norm=clip_grad_norm,
                                                       norm_type=norm_type, clip_grad_value=clip_grad_value,
                                                       accumulate=accumulate, scaler=scaler,
                                                       _all_reduce_bucket_bytes=model.bucket_cap_bytes), model)
    if isinstance(optimizer, LBFGS):
        raise TypeError("compile_train_step: LBFGS re-evaluates the loss through a closure several times per "
                        "step; run it eagerly (optimizer.step(closure))")
    if getattr(type(optimizer), "update_rule", Optimizer.update_rule) is Optimizer.update_rule:
        raise TypeError("compile_train_step needs an optimizer with an update_rule (every lz.optim optimizer but "
                        f"LBFGS has one), got {type(optimizer).__name__}")
    if not isinstance(accumulate, int) or isinstance(accumulate, bool) or accumulate < 1:
        raise ValueError(f"compile_train_step: accumulate must be a positive number of micro-batches, got "
                         f"{accumulate!r}")
    if scaler is not None and not scaler.is_enabled():
        scaler = None  # a disabled scaler does nothing, as in eager code
    if scaler is not None and accumulate > 1:
        raise ValueError("compile_train_step: a GradScaler with accumulate > 1 is not supported; run the "
                         "accumulation eagerly with scaler.scale(loss).backward()")
    clipping = None
    if clip_grad_norm is not None or clip_grad_value is not None:
        clipping = GradClipping(clip_grad_norm, norm_type, clip_grad_value)
    inputs = as_input_tuple(example_inputs)

    def loss_of(*args):
        return loss_fn(model(*args[:-1]), args[-1])

    recorded = record_function(loss_of, inputs + (example_target,), "forward", module=model)
    traced, names = recorded.trace, recorded.names
    outputs = traced.outputs[:len(traced.outputs) - len(recorded.updates)]
    if len(outputs) != 1 or outputs[0].numel() != 1 or not outputs[0].is_floating_point():
        raise TraceError("compile_train_step: loss_fn(model(inputs), target) must return one float tensor with a "
                         "single element", user_location())
    func = traced.func
    bound = bind_arguments(func, traced.inputs, traced.captured, names)
    shapes = [tuple(t._data.shape) for t in traced.inputs]
    batch_args, reason = [], ""
    if dynamic_batch and shapes[0]:
        batch = shapes[0][0]
        candidates = [i for i, s in enumerate(shapes) if s and s[0] == batch]
        try:
            func, batch_args = generalize_batch(func, candidates, batch), candidates
        except TraceError as e:  # the step runs at the example shapes only; another shape says why
            reason = f"{e.location.describe()}: {e.message}"
    return TrainStep(func, batch_args, len(inputs), [(names[id(t)], t) for t in bound], optimizer, shapes, reason,
                     [t for _, t in recorded.updates], recorded.random, clipping, accumulate, scaler,
                     _all_reduce_bucket_bytes)
