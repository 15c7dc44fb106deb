"""The ``Tensor`` methods that hold real logic (argument handling, dtype rules, several ops),
written out and grouped by kind; ``lezero.eager.tensor`` installs each group onto ``Tensor`` next
to the one-line methods it generates from its table.

Each group is a plain class used as a namespace of methods (its functions take ``self``, a
tensor): ``Arithmetic``, ``Reductions``, ``Shapes``, ``Devices``, ``InPlace``.

``Shapes`` returns views wherever PyTorch does (``lezero.eager.core.view_of``: numpy's own view of
the memory, recorded as its lz op).  In-place ops write into the tensor's memory, which its base
and every view of it share, and bump their shared version.  On a tensor the graph records they
are recorded functionally: the result is computed from a stand-in for the old value, and the
tensor continues the graph from it; on a view, its base's history becomes "the old base with the
view's elements replaced" (``COPY_SLICES``, PyTorch's CopySlices) and the view reads the new base
(``MEMORY_VIEW``), so gradients reach the base as in PyTorch.  A backward that needs an
overwritten value fails loudly, as in PyTorch.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from lezero.eager import device_arrays as _dev
from lezero.eager import dtypes as _dt
from lezero.eager.autograd import backward
from lezero.eager.core import (Mode, Node, Tensor, alias, apply, apply1, apply2, axes_of, axis_of, cast_to, geometry,
                               remember_node, reshaped, shape_args, view_of, wrap)
from lezero.eager.creation import numpy_generator, tensor
from lezero.eager.device_arrays import FLOATS, kind, storage
from lezero.eager.dispatch import OperatorError, user_location
from lezero.eager.functions import where
from lezero.eager.interop import is_torch_tensor
from lezero.eager.indexing import OVERLAP
from lezero.eager.ops import (ARGMAX, AS_STRIDED, BROADCAST, CLAMP, COPY_SLICES, MATMUL, MEMORY_VIEW, REDUCE, SWAP_2D,
                              TRANSPOSE, UNARY, VAR)
from lezero.eager.promotion import float_input, operands
from lezero.runtime.devices import Device
from lezero.runtime.devices import device as _device

MinMax = collections.namedtuple("MinMax", ["values", "indices"])


def reduction(x: Tensor, name: str, dim, keepdim: bool) -> Tensor:
    """``lz.reduce_<name>`` of ``x`` over ``dim`` (None: every dim)."""
    axes = axes_of(dim, x.ndim)
    attrs = (("axes", axes), ("keepdims", bool(keepdim))) if x.ndim else (("keepdims", bool(keepdim)),)
    return apply1(REDUCE[name], attrs, x)


def variance(x: Tensor, dim, unbiased, keepdim, correction, std: bool) -> Tensor:
    """``var`` (or ``std``) with PyTorch's ``unbiased``/``correction`` (default: Bessel's 1)."""
    if correction is None:
        correction = 0 if unbiased is False else 1
    x = float_input(x)
    axes = axes_of(dim, x.ndim)
    count = math.prod(x.shape[a] for a in axes) if x.ndim else 1
    attrs = (("axes", axes), ("keepdims", bool(keepdim)), ("count", count), ("correction", correction),
             ("std", std))
    return apply1(VAR, attrs, x)


def _extremum(x: Tensor, name: str, dim, keepdim: bool):
    if dim is None:
        return reduction(x, name, None, False)
    values = reduction(x, name, dim, keepdim)
    indices = (x if name == "max" else -x).argmax(dim, keepdim)
    return MinMax(values, indices)


class Arithmetic:
    def __rmatmul__(self, other):
        return tensor(other).matmul(self)

    def matmul(self, other):
        if not isinstance(other, Tensor):
            other = tensor(other)
        a, b = operands(self, other)
        return apply2(MATMUL, (), a, b)

    def square(self):
        return self * self

    def logical_not(self):
        return apply1(UNARY["not"], (), cast_to(self, _dt.bool_))

    def where(self, condition, other):
        return where(condition, self, other)

    def masked_fill(self, mask, value):
        return where(mask, value, self)

    def lerp(self, end, weight):
        return self + (end - self) * weight

    def clamp(self, min=None, max=None):  # noqa: A002 - PyTorch's names
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        bounds = []
        x = self
        for bound in (min, max):
            if bound is None:
                continue
            pair = operands(x, bound)
            if pair is None:
                raise TypeError(f"clamp bound must be a number or a tensor, got {type(bound).__name__}")
            x, b = pair
            bounds.append(b)
        bounds = [cast_to(b, x.dtype) for b in bounds]
        return apply(CLAMP, (("min", min is not None), ("max", max is not None)), x, *bounds)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)


class Reductions:
    def sum(self, dim=None, keepdim=False, dtype=None):
        x = self
        if dtype is not None:
            x = cast_to(x, _dt.as_dtype(dtype))
        elif kind(x._data) in "bui" and x.dtype is not _dt.int64:
            x = cast_to(x, _dt.int64)
        return reduction(x, "sum", dim, keepdim)

    def mean(self, dim=None, keepdim=False, dtype=None):
        x = self if dtype is None else cast_to(self, _dt.as_dtype(dtype))
        if x._data.dtype not in FLOATS:
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                               f"or complex dtype. Got: {x.dtype.name.capitalize()}")
        return reduction(x, "mean", dim, keepdim)

    def max(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        return _extremum(self, "max", dim, keepdim)

    def min(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        return _extremum(self, "min", dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        return (-self).argmax(dim, keepdim)

    def argmax(self, dim=None, keepdim=False):
        if dim is None:
            return apply1(ARGMAX, (("axis", 0), ("keepdims", False)), self.reshape(-1))
        return apply1(ARGMAX, (("axis", axis_of(dim, self.ndim)), ("keepdims", bool(keepdim))), self)

    def logsumexp(self, dim, keepdim=False):
        m = self.amax(dim, keepdim=True).detach()
        out = (self - m).exp().sum(dim, keepdim=True).log() + m
        return out if keepdim else out.squeeze(dim)

    def norm(self, p=2, dim=None, keepdim=False):
        if p == 2:
            return (self * self).sum(dim, keepdim).sqrt()
        if p == 1:
            return self.abs().sum(dim, keepdim)
        return (self.abs() ** p).sum(dim, keepdim) ** (1.0 / p)


class Shapes:
    def reshape(self, *shape) -> Tensor:
        return reshaped(self, shape_args(shape))

    def view(self, *shape) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], _dt.dtype):
            raise NotImplementedError("view(dtype) is not supported; use .to(dtype)")
        return reshaped(self, shape_args(shape), copy=False)

    def ravel(self) -> Tensor:
        return reshaped(self, (-1,))

    def flatten(self, start_dim=0, end_dim=-1) -> Tensor:
        if self.ndim == 0:
            return reshaped(self, (1,))
        s, e = axis_of(start_dim, self.ndim), axis_of(end_dim, self.ndim)
        shape = self.shape
        return reshaped(self, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])

    def unflatten(self, dim, sizes) -> Tensor:
        d = axis_of(dim, self.ndim)
        return reshaped(self, self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def unsqueeze(self, dim) -> Tensor:
        d = axis_of(dim, self.ndim + 1)
        return reshaped(self, self.shape[:d] + (1,) + self.shape[d:])

    def squeeze(self, dim=None) -> Tensor:
        if dim is None:
            return reshaped(self, tuple(s for s in self.shape if s != 1))
        dims = axes_of(dim, self.ndim)
        return reshaped(self, tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

    def permute(self, *dims) -> Tensor:
        perm = tuple(axis_of(d, self.ndim) for d in shape_args(dims))
        if sorted(perm) != list(range(self.ndim)):
            raise RuntimeError(f"permute(): dims {list(dims)} are not a permutation of the {self.ndim} dims")
        if perm == tuple(range(self.ndim)):
            return self
        a = self._data
        return view_of(self, a.transpose(perm) if a.__class__ is np.ndarray else a.permute(perm), TRANSPOSE, True,
                       (("perm", perm),))

    def transpose(self, dim0, dim1) -> Tensor:
        perm = list(range(self.ndim))
        a, b = axis_of(dim0, self.ndim), axis_of(dim1, self.ndim)
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(*perm)

    def t(self) -> Tensor:
        if self._data.ndim < 2:
            return self
        if self._data.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return view_of(self, self._data.T, TRANSPOSE, True, SWAP_2D)

    def movedim(self, source, destination) -> Tensor:
        sources = [axis_of(d, self.ndim) for d in ((source,) if isinstance(source, int) else source)]
        targets = [axis_of(d, self.ndim) for d in ((destination,) if isinstance(destination, int) else destination)]
        if len(sources) != len(targets):
            raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(sources)} dims) should "
                               f"contain the same number of dims as destination ({list(targets)} dims)")
        rest = iter(d for d in range(self.ndim) if d not in sources)
        placed = dict(zip(targets, sources))
        return self.permute(*[placed[d] if d in placed else next(rest) for d in range(self.ndim)])

    def swapdims(self, dim0, dim1) -> Tensor:
        return self.transpose(dim0, dim1)

    def diagonal(self, offset=0, dim1=0, dim2=1) -> Tensor:
        """The diagonal ``offset`` of the matrices over ``dim1`` and ``dim2``, a view (its last dim)."""
        d1, d2 = axis_of(dim1, self.ndim), axis_of(dim2, self.ndim)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        n = max(min(self.shape[d1] + min(offset, 0), self.shape[d2] - max(offset, 0)), 0)
        rest = [d for d in range(self.ndim) if d not in (d1, d2)]
        return self._restrided(tuple(self.shape[d] for d in rest) + (n,),
                               lambda st: tuple(st[d] for d in rest) + (st[d1] + st[d2],),
                               lambda st: (offset * st[d2] if offset >= 0 else -offset * st[d1]) if n else 0)

    def unfold(self, dimension, size, step) -> Tensor:
        """Every window of ``size`` elements ``step`` apart along ``dimension``, a view (windows
        overlap when ``step < size``) with the window as its last dim."""
        d = axis_of(dimension, max(self.ndim, 1))
        length = self.shape[d] if self.ndim else 1
        if size > length:
            raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size is {size}")
        if step <= 0:
            raise RuntimeError(f"step is {step} but must be > 0")
        count = (length - size) // step + 1
        shape = self.shape[:d] + (count,) + self.shape[d + 1:] + (size,) if self.ndim else (size,)
        return self._restrided(shape, lambda st: st[:d] + (st[d] * step,) + st[d + 1:] + (st[d],) if st else (1,),
                               lambda st: 0)

    def as_strided(self, size, stride, storage_offset=None) -> Tensor:
        """PyTorch's ``as_strided``: the view ``(size, stride, storage_offset)`` of the base's memory
        (in elements; the offset defaults to this tensor's)."""
        root = self if self._base is None else self._base
        offset = self.storage_offset() if storage_offset is None else int(storage_offset)
        size, stride = tuple(int(d) for d in size), tuple(int(s) for s in stride)
        if len(size) != len(stride):
            raise RuntimeError(f"mismatch in length of strides and shape: {len(size)} and {len(stride)}")
        if 0 not in size and offset + sum((d - 1) * s for d, s in zip(size, stride)) >= root.numel():
            raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset} are "
                               f"out of bounds for storage of {root.numel()} elements")
        return view_of(root, _dev.strided(root._data, size, stride, offset), MEMORY_VIEW, True,
                       (("order", _dev.memory_order(root._data)), ("shape", size), ("strides", stride),
                        ("offset", offset)))

    def _restrided(self, shape: tuple, strides_from, offset_from) -> Tensor:
        """A view of ``self`` whose strides and first element are ``strides_from(s)`` and
        ``offset_from(s)`` given ``self``'s strides ``s``: in memory from ``self``'s own, recorded
        as ``lz.as_strided`` of its row-major elements."""
        root = self if self._base is None else self._base
        memory = _dev.element_strides(self._data)
        row_major = tuple(math.prod(self.shape[d + 1:]) for d in range(self.ndim))
        array = _dev.strided(root._data, shape, strides_from(memory), self.storage_offset() + offset_from(memory))
        return view_of(self, array, AS_STRIDED, True, (("shape", shape), ("strides", strides_from(row_major)),
                                                     ("offset", offset_from(row_major))))

    def expand(self, *sizes) -> Tensor:
        sizes = shape_args(sizes)
        lead = len(sizes) - self.ndim
        if lead < 0:
            raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to "
                               f"the number of dimensions in the tensor ({self.ndim})")
        shape = tuple(self.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes))
        if shape == self.shape:
            return self
        a = self._data
        for dim, (have, want) in enumerate(zip(self.shape, shape[lead:]), lead):
            if have != want and have != 1:
                raise RuntimeError(f"The expanded size of the tensor ({want}) must match the existing size ({have}) "
                                   f"at non-singleton dimension {dim}.  Target sizes: {list(sizes)}.  "
                                   f"Tensor sizes: {list(self.shape)}")
        expanded = np.broadcast_to(a, shape) if a.__class__ is np.ndarray else a.expand(shape)
        return view_of(self, expanded, BROADCAST, True, (("shape", shape),))

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(*other.shape)

    def broadcast_to(self, shape) -> Tensor:
        return self.expand(*shape)

    def repeat(self, *sizes) -> Tensor:
        sizes = shape_args(sizes)
        x = self.reshape((1,) * (len(sizes) - self.ndim) + self.shape)
        # tile as broadcast + reshape: (r0, d0, r1, d1, ...) -> (r0*d0, r1*d1, ...)
        inter = tuple(v for r, d in zip(sizes, x.shape) for v in (1, d))
        target = tuple(v for r, d in zip(sizes, x.shape) for v in (r, d))
        return x.reshape(inter).expand(*target).reshape(tuple(r * d for r, d in zip(sizes, x.shape)))

    def chunk(self, chunks: int, dim=0):
        size = self.shape[axis_of(dim, self.ndim)]
        step = -(-size // chunks)
        return self.split(step, dim)

    def split(self, split_size, dim=0):
        d = axis_of(dim, self.ndim)
        size = self.shape[d]
        sizes = [split_size] * (size // split_size) + ([size % split_size] if size % split_size else []) \
            if isinstance(split_size, int) else list(split_size)
        out, start = [], 0
        for i, s in enumerate(sizes):
            out.append(_one_of_views(self.narrow(d, start, s), "Split" if isinstance(split_size, int) else
                                     "SplitWithSizes", i))
            start += s
        return tuple(out)

    def split_with_sizes(self, split_sizes, dim=0):
        return self.split(list(split_sizes), dim)

    def tensor_split(self, indices_or_sections, dim=0):
        """Views between the given indices, or ``n`` views whose sizes differ by at most one (the
        first ones longer); unlike ``split``'s, in-place ops may write through them."""
        d = axis_of(dim, self.ndim)
        size = self.shape[d]
        if isinstance(indices_or_sections, int):
            n = indices_or_sections
            if n <= 0:
                raise RuntimeError(f"number of sections must be larger than 0, got {n}")
            bounds = [i * (size // n) + min(i, size % n) for i in range(n + 1)]
        else:
            bounds = [0] + [min(max(int(i), 0), size) for i in indices_or_sections] + [size]
        return tuple(self.narrow(d, lo, max(hi - lo, 0)) for lo, hi in zip(bounds, bounds[1:]))

    def hsplit(self, sections):
        return _split_along(self, "hsplit", 1 if self.ndim > 1 else 0, sections, 1)

    def vsplit(self, sections):
        return _split_along(self, "vsplit", 0, sections, 2)

    def dsplit(self, sections):
        return _split_along(self, "dsplit", 2, sections, 3)

    def adjoint(self) -> Tensor:
        return self.transpose(-2, -1)

    def narrow(self, dim, start, length) -> Tensor:
        d = axis_of(dim, self.ndim)
        index = [slice(None)] * self.ndim
        index[d] = slice(start, start + length)
        return self[tuple(index)]

    def unbind(self, dim=0):
        d = axis_of(dim, self.ndim)
        return tuple(_one_of_views(self.select(d, i), "Unbind", i) for i in range(self.shape[d]))

    def select(self, dim, index) -> Tensor:
        d = axis_of(dim, self.ndim)
        return self[(slice(None),) * d + (index,)]


def _split_along(x: Tensor, name: str, dim: int, sections, rank: int) -> tuple:
    """``hsplit``/``vsplit``/``dsplit``: ``tensor_split`` along ``dim`` of a tensor of at least
    ``rank`` dims, whose size a number of sections must divide."""
    if x.ndim < rank:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {rank} dimension, but got a tensor with "
                           f"{x.ndim} dimensions!")
    if isinstance(sections, int) and (sections == 0 or x.shape[dim] % sections):
        raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the size of the dimension "
                           f"{x.shape[dim]} is not divisible by the split_size {sections}!")
    return x.tensor_split(sections, dim)


def _one_of_views(view: Tensor, function: str, index: int) -> Tensor:
    """Mark ``view`` as output ``index`` of ``function``, which returns several views: PyTorch
    refuses a recorded in-place op on one (``InPlace._old``)."""
    if view._base is not None:
        view._multi = (function, index)
    return view


class Devices:
    def to(self, *args, **kwargs) -> Tensor:
        """``to(dtype)``, ``to("cuda")``, ``to(device, dtype)``, ``to(other)`` (its device and dtype).
        ``self`` when nothing changes; moving to another device copies (a cast happens on the CPU
        side of the move)."""
        dtype, target = to_arguments(args, kwargs)
        if target is None or target == self.device:
            return self if dtype is None else cast_to(self, dtype)
        if dtype is not None and target.type != "cpu":
            return _moved(cast_to(self, dtype), target)
        moved = _moved(self, target)
        return moved if dtype is None else cast_to(moved, dtype)

    def type(self, d=None):
        if d is None:
            return f"lezero.{self.dtype.name.capitalize()}Tensor"
        return cast_to(self, _dt.as_dtype(d))

    def type_as(self, other: Tensor) -> Tensor:
        return cast_to(self, _dt.as_dtype(other.dtype))  # a torch tensor's dtype too

    def cpu(self) -> Tensor:
        return self if self._data.__class__ is np.ndarray else _moved(self, _dev.CPU)

    def cuda(self, device=None, non_blocking: bool = False) -> Tensor:
        return self.to(cuda_device(device))

    def _new_like(self, make, dtype) -> Tensor:
        """A new tensor on ``self``'s device: ``make(numpy dtype)`` (a numpy array) of ``dtype``,
        default ``self``'s."""
        array = make(_dt.as_dtype(dtype).numpy if dtype else _dev.numpy_dtype(self._data))
        return wrap(_dev.like(array, self._data))

    def new_full(self, size, fill_value, dtype=None) -> Tensor:
        return self._new_like(lambda d: np.full(tuple(size), fill_value, d), dtype)

    def new_tensor(self, data, dtype=None) -> Tensor:
        return self._new_like(lambda d: storage(data, d), dtype)


def _is_device_spec(value) -> bool:
    """Whether ``value`` names a device: a string, a ``Device``, a ``torch.device``."""
    return isinstance(value, (str, Device)) or type(value).__name__ == "device"


def to_arguments(args, kwargs) -> tuple:
    """``to``'s arguments (``to(dtype)``, ``to(device, dtype)``, ``to(other)``, keywords) as
    ``(lz dtype or None, Device or None)``."""
    dtype, target = kwargs.get("dtype"), kwargs.get("device")
    for a in args:
        if isinstance(a, Tensor) or is_torch_tensor(a):  # to(other): its dtype and device
            dtype, target = a.dtype, a.device
        elif _is_device_spec(a):
            target = a
        elif a is not None:
            dtype = a
    return (None if dtype is None else _dt.as_dtype(dtype)), (None if target is None else _device(str(target)))


def cuda_device(index) -> Device:
    """``cuda()``'s argument: None, an index or a device."""
    if index is None:
        return _dev.CUDA
    return _device(f"cuda:{index}" if isinstance(index, int) else str(index))


def _moved(x: Tensor, target: Device) -> Tensor:
    """A copy of ``x`` on ``target``.  Autograd does not record moves: moving a tensor the graph
    needs would cut it, so that is an error."""
    if Mode.trace:
        raise OperatorError(f"jit.trace: moving a tensor to {target} inside a traced function is not supported: "
                            f"move the model and the inputs before tracing", user_location())
    if x.requires_grad and Mode.grad:
        raise RuntimeError(f"moving a tensor that requires grad to {target} is not recorded by autograd: move it "
                           f"before it requires grad (x.to(device).requires_grad_()) or under lz.no_grad()")
    return wrap(_dev.to_device(x._data, target))


class InPlace:
    def _old(self) -> Tensor:
        """A tensor standing for the current value before an in-place op changes ``self`` (the
        op computes its result from it, then ``_inplace``): ``self`` itself when grad mode is off,
        else a new tensor on the same memory taking over ``self``'s place in the graph (which
        ``_inplace`` gives the old value when it overwrites the memory)."""
        if self.requires_grad and Mode.grad:
            if self._node is None:
                raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
            base = self._base
            if base is not None and base._node is None and base.requires_grad:
                raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place "
                                   "operation.")
            if self._multi is not None:
                raise RuntimeError(f"Output {self._multi[1]} of {self._multi[0]} is a view and is being modified "
                                   f"inplace. This view is the output of a function that returns multiple views. Such "
                                   f"functions do not allow the output views to be modified inplace. You should "
                                   f"replace the inplace operation by an out-of-place one.")
        elif Mode.updates is not None:  # a jit trace: see ``Mode.updates``
            if id(self) in Mode.updates:
                return Mode.updates[id(self)][1]  # the traced value of an earlier in-place op
            if self._traced():  # a value the trace computed: a stand-in takes its place in the graph
                old = alias(self)
                old._node, old._index = self._node, self._index
                return old
            return self
        elif not Mode.grad:
            return self
        old = alias(self)  # grad mode: the result may require grad (``x.add_(w)``), recorded from ``old``
        old._node, old._index, old.requires_grad = self._node, self._index, self.requires_grad
        self._pending = old
        return old

    def _traced(self) -> bool:
        """Whether the running trace computed this tensor (it is no argument of the traced graph)."""
        return self._node is not None and self._node.session is Mode.session

    def _inplace(self, result: Tensor) -> Tensor:
        """Make ``self`` hold ``result`` (computed from ``_old()``), written into its memory.  When
        the graph records it, ``self`` continues the graph from ``result`` (``_rebase``)."""
        if result._data.shape != self._data.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(result.shape)}")
        old = self.__dict__.pop("_pending", None)
        if (self.requires_grad or result.requires_grad) and Mode.grad:
            self._rebase(result, old)
            return self
        if self._strided and _dev.overlaps(self._data):
            raise RuntimeError(OVERLAP)
        _dev.copy_into(self._data, result._data)
        if Mode.updates is not None and result._node is not None:
            base = self._base
            if base is not None and base._traced():  # the base's graph continues: CopySlices, as recorded
                where = geometry(self)
                old_base = alias(base)
                old_base._node, old_base._index = base._node, base._index
                remember_node(base, self._version)
                remember_node(self, self._version)
                base._node, base._index = Node(COPY_SLICES, where, (old_base, result)), 0
                self._node, self._index = Node(MEMORY_VIEW, where, (base,)), 0
            elif self._traced():  # the graph continues from ``result``
                remember_node(self, self._version)
                self._node, self._index = result._node, result._index
            else:  # an argument of the trace (a parameter or buffer): ``result`` is its new value
                Mode.updates[id(self)] = (self, result, self._version + 1)
        self._version += 1
        return self

    def _rebase(self, result: Tensor, old) -> None:
        """The recorded in-place update of ``self`` to ``result``.  A tensor whose memory nothing
        else sees takes ``result``'s buffer (the old one stays ``old``'s).  Otherwise the memory is
        overwritten, so ``old`` (and the base's stand-in) get a copy of the old value first; for a
        view, the base's new history is ``COPY_SLICES(old base, result)`` and ``self`` reads it
        through ``MEMORY_VIEW``."""
        base = self._base
        root = self if base is None else base
        if base is None and not self._shared:
            self._data = _dev.cast(result._data, _dev.numpy_dtype(self._data))
            self.__dict__.pop("_strided", None)  # contiguous now
        else:
            if self._strided and _dev.overlaps(self._data):
                raise RuntimeError(OVERLAP)
            snapshot = _dev.copy_in_layout(root._data)
            old_root = alias(root)
            old_root._data = snapshot
            old_root._node, old_root._index, old_root.requires_grad = root._node, root._index, root.requires_grad
            if old is not None:
                old._data = snapshot if base is None else _dev.strided(snapshot, self.shape, self.stride(),
                                                                       self.storage_offset())
                if base is not None:  # the stand-in is a view of the old base now, not of ``root``
                    old._node, old._index = Node(MEMORY_VIEW, geometry(self), (old_root,)), 0
                    old.requires_grad = old_root.requires_grad
            if base is not None:
                where = geometry(self)
            _dev.copy_into(self._data, result._data)
        remember_node(root, root._version_count)
        if base is not None:
            remember_node(self, root._version_count)
        root._version_count += 1
        if base is None:
            self._node, self._index, self.requires_grad = result._node, result._index, result.requires_grad
            self._made = root._version_count
            return
        root._node, root._index = Node(COPY_SLICES, where, (old_root, result)), 0
        root.requires_grad, root._made = True, root._version_count
        self._node, self._index = Node(MEMORY_VIEW, where, (root,)), 0
        self.requires_grad, self._made = True, root._version_count

    def _overwrite(self, array_or_value) -> Tensor:
        """Fill ``self`` with data that does not depend on a graph (fill_, uniform_, copy_ of a
        constant): a number or an array on either device, broadcast."""
        old = self._old()
        traced = Mode.updates is not None and (self._traced() or (self._base is not None and self._base._traced()))
        if self.requires_grad and Mode.grad or traced:  # the graph continues from the new value
            fresh = _dev.contiguous(_dev.empty_like(self._data))
            _dev.copy_into(fresh, array_or_value)
            return self._inplace(self._replacing(old, wrap(fresh)))
        self.__dict__.pop("_pending", None)
        if self._strided and _dev.overlaps(self._data):
            raise RuntimeError(OVERLAP)
        _dev.copy_into(self._data, array_or_value)
        self._version += 1
        return self

    def clamp_(self, min=None, max=None):  # noqa: A002
        return self._inplace(self._old().clamp(min, max))

    def relu_(self):
        return self._inplace(self._old().relu())

    def copy_(self, src) -> Tensor:
        if not isinstance(src, Tensor):
            src = tensor(src)
        if src.requires_grad and Mode.grad:
            return self._inplace(self._replacing(self._old(), src.to(self.dtype)))
        return self._overwrite(src._data)

    def _replacing(self, old: Tensor, new: Tensor) -> Tensor:
        """``new`` broadcast to ``self``'s shape, recorded as replacing ``old``: the old value's
        history gets a zero gradient (PyTorch's CopyBackwards and FillBackward)."""
        return where(wrap(_dev.like(np.ones((), np.bool_), self._data)), new, old)

    def zero_(self) -> Tensor:
        return self._overwrite(0)

    def fill_(self, value) -> Tensor:
        return self._overwrite(value.item() if isinstance(value, Tensor) else value)

    def uniform_(self, a=0.0, b=1.0, generator=None) -> Tensor:
        values = numpy_generator(generator).uniform(a, b, self.shape)
        return self._overwrite(values.astype(_dev.numpy_dtype(self._data)))

    def normal_(self, mean=0.0, std=1.0, generator=None) -> Tensor:
        values = numpy_generator(generator).standard_normal(self.shape) * std + mean
        return self._overwrite(values.astype(_dev.numpy_dtype(self._data)))


GROUPS = (Arithmetic, Reductions, Shapes, Devices, InPlace)
