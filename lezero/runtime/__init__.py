"""The runtime: the kernel cache, the thread pool, whole-function execution (``compile``) on the
CPU (``compiled_function``) and on cuda (``cuda``), and the devices (``devices``: ``lz.device``)."""
