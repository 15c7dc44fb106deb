"""The runtime: a scheduled function as one execution plan (``plan``) and its executors, the CPU
(``cpu``), cuda (``cuda``) and native executables without Python (``native``); ``compile``
(``lezero.compile``: a target to its executor); the kernel cache, the thread pool, the lean
launcher for the eager hot path (``launch``) and the devices (``devices``: ``lz.device``)."""
# The function, imported after its module: ``lezero.runtime.compile`` names the function (the
# frontends' ``from lezero.runtime import compile``); the module is ``sys.modules[...]``.
from lezero.runtime.compile import compile  # noqa: F401,A004
