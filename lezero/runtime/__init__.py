"""The runtime: the kernel cache, the thread pool, and whole-function execution (``compile``)."""
