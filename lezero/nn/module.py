"""``lz.nn.Module`` and ``lz.nn.Parameter``, with PyTorch's names, registration rules and
state-dict layout (``fc1.weight`` is ``out x in``; BatchNorm's running statistics are buffers)."""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import as_inputs as _as_inputs
from lezero.eager.device_arrays import host, like, numpy_dtype, storage
from lezero.eager.methods import cuda_device as _cuda_device, to_arguments as _to_arguments
from lezero.eager.tensor import Tensor


class Parameter(Tensor):
    """A tensor that is a module's parameter: it requires grad and registers itself when assigned
    to a module attribute.  It shares ``data``'s memory."""

    def __new__(cls, data=None, requires_grad: bool = True):
        t = object.__new__(cls)
        if data is None:
            array = np.empty((0,), _dt.get_default_dtype().numpy)
        elif isinstance(data, Tensor):
            array = data._data
        else:
            array = storage(data)
        t._data = array
        if requires_grad:
            t.requires_grad_(True)
        return t

    def __init__(self, data=None, requires_grad: bool = True):
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce__(self):
        if self._data.__class__ is np.ndarray:
            return (Parameter, (self._data, self.requires_grad))
        return (_parameter_on, (host(self._data), self.requires_grad, str(self.device)))


class Buffer(Tensor):
    """Marks a tensor to register as a buffer when assigned to a module (``nn.Buffer``)."""

    def __new__(cls, data, persistent: bool = True):
        t = object.__new__(cls)
        t._data = data._data if isinstance(data, Tensor) else storage(data)
        t.persistent = persistent
        return t

    def __init__(self, data, persistent: bool = True):
        pass


def _parameter_on(array: np.ndarray, requires_grad: bool, device: str) -> Parameter:
    """A parameter of ``array``'s values on ``device`` (how a cuda parameter pickles)."""
    return Parameter(_wrap_array(array).to(device), requires_grad)


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _as_array(value) -> np.ndarray:
    """A state-dict value (a lezero tensor on any device, a numpy array, anything ``np.asarray``
    takes, such as a CPU torch tensor) as a numpy array."""
    if isinstance(value, Tensor):
        return host(value._data)
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    return np.asarray(value)


class Module:
    """Base of every layer: parameters, buffers and submodules registered by assignment."""

    training = True
    _version = 1

    def __init__(self, *args, **kwargs):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "training", True)

    # --- registration ---------------------------------------------------------------------------------
    def _check_init(self) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign parameters or modules before {type(self).__name__}.__init__() "
                                 "calls super().__init__()")

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if isinstance(value, Parameter):
            self._check_init()
            self._forget(name, keep=self._parameters)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._check_init()
            self._forget(name, keep=self._modules)
            self._modules[name] = value
        elif isinstance(value, Buffer):
            self._check_init()
            self._forget(name)
            self.register_buffer(name, value, value.persistent)
        elif "_parameters" in d and name in self._parameters:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(lz.nn.Parameter or None expected)")
            self._parameters[name] = None
        elif "_modules" in d and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(lz.nn.Module or None expected)")
            self._modules[name] = None
        elif "_buffers" in d and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(lz.Tensor or None expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: dict | None = None) -> None:
        """Drop ``name`` from the registries but ``keep``, the one it is being reassigned in: there
        it keeps its place (as in PyTorch), so replacing a Sequential's layer keeps the order."""
        for registry in (self._parameters, self._buffers, self._modules):
            if registry is not keep:
                registry.pop(name, None)
        self._non_persistent_buffers.discard(name)
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str):
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in d and name in d[registry]:
                return d[registry][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._check_init()
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(lz.nn.Parameter or None required)")
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        self._check_init()
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(lz.Tensor or None required)")
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        self._check_init()
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        module = self
        for part in target.split(".") if target else []:
            module = module._modules[part]
        return module

    def get_parameter(self, target: str) -> Parameter:
        path, _, name = target.rpartition(".")
        return self.get_submodule(path)._parameters[name]

    # --- iteration --------------------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        memo = set() if memo is None else memo
        if remove_duplicate and id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool = True):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in getattr(module, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # --- state dicts -----------------------------------------------------------------------------------
    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        """Parameters and persistent buffers by dotted name; the tensors share the module's
        memory (detached unless ``keep_vars``)."""
        destination = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination, prefix + name + ".", keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False) -> IncompatibleKeys:
        """Copy ``state_dict``'s values (lezero tensors, numpy arrays, torch CPU tensors) into
        the parameters and buffers, in place.  With ``strict``, missing or unexpected keys are an
        error; a shape mismatch always is."""
        from lezero.eager.autograd import no_grad

        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
            if missing:
                errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        arrays = {}
        for key, target in own.items():
            if key not in state_dict:
                continue
            array = _as_array(state_dict[key])
            if array.shape != target.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape {list(array.shape)} from "
                              f"checkpoint, the shape in current model is {list(target.shape)}.")
            else:
                arrays[key] = array
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        with no_grad():
            for key, array in arrays.items():
                target = own[key]
                if assign:
                    target._data = like(storage(array, numpy_dtype(target._data)), target._data)
                    target._version += 1
                else:
                    target.copy_(_wrap_array(array.astype(numpy_dtype(target._data), copy=False)))
        return IncompatibleKeys(missing, unexpected)

    # --- modes, devices and dtypes -------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = p.grad.detach().zero_()

    def _apply(self, fn) -> "Module":
        """``fn`` on every parameter and buffer (and gradient), keeping the objects (optimizers hold
        them): their memory is replaced.  Not recorded by autograd."""
        from lezero.eager.autograd import no_grad

        with no_grad():
            for module in self.modules():
                for registry in (module._parameters, module._buffers):
                    for t in registry.values():
                        if t is None:
                            continue
                        new = fn(t)
                        if new._data is not t._data:
                            t._data = new._data
                            t._version += 1
                        if t.grad is not None:
                            t.grad = fn(t.grad)
        return self

    def apply(self, fn) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """``to("cuda")``, ``to(dtype)``, ``to(device, dtype)``: parameters and buffers move to the
        device (the same objects, so an optimizer made before keeps them); floating ones take the
        dtype."""
        dtype, target = _to_arguments(args, kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")
        if dtype is None and target is None:
            return self
        return self._apply(lambda t: t.to(device=target, dtype=dtype if t.is_floating_point() else None))

    def cpu(self) -> "Module":
        return self.to("cpu")

    def cuda(self, device=None) -> "Module":
        return self.to(_cuda_device(device))

    def float(self) -> "Module":
        return self.to(_dt.float32)

    def double(self) -> "Module":
        return self.to(_dt.float64)

    def half(self) -> "Module":
        return self.to(_dt.float16)

    def bfloat16(self) -> "Module":
        return self.to(_dt.bfloat16)

    def type(self, dst_type) -> "Module":
        return self.to(dst_type)

    # --- calling ------------------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        # arrays of other libraries (a torch DataLoader's batches, numpy) come in as tensors
        args = _as_inputs(args, type(self).__name__)
        if kwargs:
            values = tuple(kwargs.values())
            converted = _as_inputs(values, type(self).__name__)
            if converted is not values:
                kwargs = dict(zip(kwargs, converted))
        if self._forward_pre_hooks or self._forward_hooks:
            return self._call_with_hooks(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def _call_with_hooks(self, *args, **kwargs):
        for hook in list(self._forward_pre_hooks.values()):
            changed = hook(self, args)
            if changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            changed = hook(self, args, out)
            if changed is not None:
                out = changed
        return out

    def register_forward_hook(self, hook):
        return _HookHandle(self._forward_hooks, hook)

    def register_forward_pre_hook(self, hook):
        return _HookHandle(self._forward_pre_hooks, hook)

    # --- printing -------------------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines.extend(extra.split("\n"))
        for name, module in self._modules.items():
            body = repr(module).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        if not lines:
            return f"{self._get_name()}()"
        if len(lines) == 1 and not self._modules:
            return f"{self._get_name()}({lines[0]})"
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    def __setstate__(self, state):
        self.__dict__.update(state)


class _HookHandle:
    _next_id = 0

    def __init__(self, registry: OrderedDict, hook):
        self.registry = registry
        self.id = _HookHandle._next_id
        _HookHandle._next_id += 1
        registry[self.id] = hook

    def remove(self) -> None:
        self.registry.pop(self.id, None)


def _wrap_array(array: np.ndarray) -> Tensor:
    from lezero.eager.core import wrap as _wrap
    return _wrap(storage(array))
