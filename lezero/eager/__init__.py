"""The eager engine: ``import lezero as lz`` as PyTorch's API, every op a one-op function compiled
through the one pipeline.

From the bottom up: ``dtypes`` and ``device_arrays`` (a tensor's storage on its device);
``dispatch`` (``EagerOp``, the cache of compiled one-op runners, ``OperatorError``); ``ops`` (the
eager ops the methods run); ``core`` (the tensor's state and the hot path: ``apply1``/``apply2``/
``apply``, ``wrap``, ``record``, ``Mode``); ``creation`` (``lz.tensor``, ``zeros``, generators);
``promotion`` (PyTorch's dtype rules); ``indexing``; ``autograd`` (grad mode, ``backward``,
``grad``, ``trace`` and ``graph_capture``, the hook ``lezero.jit`` traces under); ``functions``
(``lz.cat``, ``lz.where``, ``lz.exp``, ...); ``methods`` (the methods with real logic) and
``tensor`` (``Tensor`` composed from them and from its table of one-line methods);
``serialization`` (``lz.save``/``lz.load``) and ``cuda`` (``lz.cuda``).  Each imports only those
before it.
"""
