"""``lezero.profiler`` (``lz.profiler``): torch.profiler's API on lezero's kernels: ``profile``,
``record_function``, ``ProfilerActivity``, ``schedule``, ``tensorboard_trace_handler``; ``host_peak`` is the
machine's measured GFLOP/s and GB/s the table rates kernels against."""
from lezero.profiler.peak import HostPeak, host_peak
from lezero.profiler.profiler import (
    ProfilerAction,
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    tensorboard_trace_handler,
)

__all__ = ["HostPeak", "ProfilerAction", "ProfilerActivity", "host_peak", "profile", "record_function", "schedule",
           "tensorboard_trace_handler"]
