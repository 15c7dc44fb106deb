"""Progress bars for long compiles (issue 16): a model of hundreds of kernels takes tens of seconds
to lower and compile, and a silent terminal looks hung.

``progress(total, what)`` is a tqdm bar on stderr when stderr is a terminal, and nothing otherwise
(CI logs, pipes, files), when ``LEZERO_PROGRESS=0``, and inside ``quiet()`` (``lezero-compile --quiet``).  A bar appears only once its work
has run half a second (tqdm's ``delay``), so eager ops and small functions, which compile in
milliseconds, never draw one, and it is erased when done (``leave=False``).  ``advance()`` moves the
bar this thread opened last: the kernel lowering loop (``runtime/plan.py``) advances the bar
``build_plan`` opened without carrying it through its recursion into control-flow regions.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

DELAY_SECONDS = 0.5
_open = threading.local()  # .bars: the bars this thread has open, innermost last


class _Quiet:
    depth = 0  # > 0 inside ``quiet()``


@contextlib.contextmanager
def quiet():
    """No bars inside (``lezero-compile --quiet``), in every thread."""
    _Quiet.depth += 1
    try:
        yield
    finally:
        _Quiet.depth -= 1


def enabled() -> bool:
    """Whether bars are drawn: stderr is a terminal, ``LEZERO_PROGRESS`` is not ``0`` and no
    ``quiet()`` is active."""
    if _Quiet.depth or os.environ.get("LEZERO_PROGRESS", "1") == "0":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class _NoBar:
    """What ``progress`` yields when no bar is drawn: eager compiles (thousands) make no tqdm."""

    def update(self, steps: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


@contextlib.contextmanager
def progress(total: int, what: str, unit: str = "kernel"):
    """A bar for ``total`` steps of ``what`` (``"lowering @main"``); yields it (``update(n)``)."""
    if enabled():
        from tqdm import tqdm  # here: 50 ms at import, and only a terminal draws bars

        bar = tqdm(total=total, desc=f"lezero: {what}", unit=unit, delay=DELAY_SECONDS, leave=False,
                   file=sys.stderr, dynamic_ncols=True)
    else:
        bar = _NoBar()
    bars = _open.__dict__.setdefault("bars", [])
    bars.append(bar)
    try:
        yield bar
    finally:
        bars.pop()
        bar.close()


def advance(steps: int = 1) -> None:
    """One step more on the innermost bar this thread has open (none: nothing happens)."""
    bars = getattr(_open, "bars", None)
    if bars:
        bars[-1].update(steps)
