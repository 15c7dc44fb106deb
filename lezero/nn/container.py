"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict`` (children named "0", "1", ... or by
key, as PyTorch names them in state dicts)."""
from __future__ import annotations

from collections import OrderedDict

from lezero.nn.module import Module


class Sequential(Module):
    """Calls its modules in order: ``Sequential(Linear(4, 8), ReLU())`` or from an OrderedDict."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(modules):
                self.add_module(str(i), module)

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(OrderedDict(list(self._modules.items())[index]))
        return list(self._modules.values())[index]

    def __setitem__(self, index: int, module: Module) -> None:
        key = list(self._modules)[index]
        self.add_module(key, module)

    def __delitem__(self, index) -> None:
        keys = list(self._modules)[index]
        for key in keys if isinstance(keys, list) else [keys]:
            del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ..."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return self._modules[str(self._index(index))]

    def __setitem__(self, index: int, module: Module) -> None:
        self.add_module(str(self._index(index)), module)

    def __delitem__(self, index) -> None:
        items = list(self._modules.values())
        del items[index]
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)

    def _index(self, index: int) -> int:
        n = len(self._modules)
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range")
        return index % n

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)


class ModuleDict(Module):
    """Modules by name."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules) -> None:
        items = modules.items() if hasattr(modules, "items") else modules
        for key, module in items:
            self.add_module(key, module)
