"""Peak memory of the current process, as the benchmarks report it."""

from __future__ import annotations

import resource
from pathlib import Path


def own_peak_mib() -> float:
    """Peak resident memory of this process since its last exec (VmHWM), in MiB.

    Not getrusage's ru_maxrss alone: Linux carries it over fork and exec, so a child
    started by a large parent (a benchmark holding a DuckDB buffer pool) would report
    the parent's size.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
