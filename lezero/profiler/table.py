"""``prof.key_averages()``: the events of a profile grouped by name, and their table as
``torch.profiler`` prints it (Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg,
# of Calls), with what lezero knows besides: each row's kind, and for kernels the achieved GFLOP/s
and GB/s and their share of the host's peak (the larger share is the kernel's bound: a kernel far
below both is latency- or overhead-bound)."""
from __future__ import annotations

from dataclasses import dataclass

SORT_KEYS = {
    "self_cpu_time_total": lambda r: r.self_cpu_time_total,
    "cpu_time_total": lambda r: r.cpu_time_total,
    "cpu_time": lambda r: r.cpu_time,
    "self_cpu_time": lambda r: r.self_cpu_time_total,
    "count": lambda r: r.count,
    "flops": lambda r: r.flops,
}


@dataclass
class FunctionEventAvg:
    """One row: times in microseconds, as torch's (``self_cpu_time_total``, ``cpu_time_total``,
    ``cpu_time``: the average)."""

    key: str
    kind: str
    count: int = 0
    self_cpu_time_total: float = 0.0
    cpu_time_total: float = 0.0
    flops: int = 0
    bytes: int = 0
    input_shapes: tuple = ()
    fused_ops: tuple = ()

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def gflops_per_second(self) -> float:
        return self.flops / (self.cpu_time_total * 1e-6) / 1e9 if self.cpu_time_total > 0 else 0.0

    @property
    def gbytes_per_second(self) -> float:
        return self.bytes / (self.cpu_time_total * 1e-6) / 1e9 if self.cpu_time_total > 0 else 0.0


class EventList(list):
    """The rows of ``key_averages()``; ``wall_seconds`` is the profiled block's time, ``peak`` the
    ``HostPeak`` kernels are rated against (None when nothing had FLOPs or bytes)."""

    def __init__(self, rows, peak, wall_seconds: float):
        super().__init__(rows)
        self.peak = peak
        self.wall_seconds = wall_seconds

    @property
    def self_cpu_time_total(self) -> float:
        return sum(r.self_cpu_time_total for r in self)

    def table(self, sort_by: str | None = None, row_limit: int = 100, max_name_column_width: int = 55,
              header: str | None = None) -> str:
        if sort_by is not None and sort_by not in SORT_KEYS:
            raise ValueError(f"table: sort_by={sort_by!r} is not one of {', '.join(SORT_KEYS)}")
        rows = sorted(self, key=SORT_KEYS[sort_by or "self_cpu_time_total"], reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        total = self.self_cpu_time_total
        width = min(max([len(r.key) for r in rows] + [4]), max_name_column_width)
        columns = [("Name", width), ("Kind", 8), ("Self CPU %", 10), ("Self CPU", 10), ("CPU total %", 11),
                   ("CPU total", 10), ("CPU time avg", 12), ("# of Calls", 10), ("GFLOP/s", 8), ("%peak", 6),
                   ("GB/s", 7), ("%peak", 6)]
        line = "-" * (sum(w for _, w in columns) + 2 * (len(columns) - 1))

        def fmt(cells):
            return "  ".join(str(c)[:w].ljust(w) if i == 0 else str(c).rjust(w)
                             for i, (c, (_, w)) in enumerate(zip(cells, columns)))

        out = [header] if header else []
        out += [line, fmt([name for name, _ in columns]), line]
        for r in rows:
            rated = r.flops or r.bytes
            peak = self.peak
            out.append(fmt([
                r.key if len(r.key) <= width else r.key[:width - 3] + "...", r.kind,
                _percent(r.self_cpu_time_total, total), _time(r.self_cpu_time_total),
                _percent(r.cpu_time_total, total), _time(r.cpu_time_total), _time(r.cpu_time), r.count,
                f"{r.gflops_per_second:.1f}" if rated else "",
                f"{100 * r.gflops_per_second / peak.gflops:.1f}%" if rated and peak else "",
                f"{r.gbytes_per_second:.1f}" if rated else "",
                f"{100 * r.gbytes_per_second / peak.gbytes:.1f}%" if rated and peak else "",
            ]))
        out.append(line)
        out.append(f"Self CPU time total: {_time(total)}")
        out.append(f"Wall time of the profiled block: {_time(self.wall_seconds * 1e6)} "
                   f"(events cover {_percent(total, self.wall_seconds * 1e6)})")
        if self.peak is not None:
            out.append(f"Host peak: {self.peak.gflops:.0f} GFLOP/s (float32 1024^3 matmul), "
                       f"{self.peak.gbytes:.1f} GB/s (64 MiB copy, read + write)")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.2f}%" if whole > 0 else "0.00%"


def _time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def averages(events, group_by_input_shape: bool, peak, wall_seconds: float) -> EventList:
    rows: dict[tuple, FunctionEventAvg] = {}
    for e in events:
        key = (e.name, e.shapes) if group_by_input_shape else (e.name,)
        row = rows.get(key)
        if row is None:
            row = rows[key] = FunctionEventAvg(e.name, e.kind, input_shapes=e.shapes, fused_ops=e.fused_ops)
        row.count += 1
        row.self_cpu_time_total += e.self_seconds * 1e6
        row.cpu_time_total += e.seconds * 1e6
        row.flops += e.flops
        row.bytes += e.bytes
    return EventList(rows.values(), peak, wall_seconds)
