"""System load: the load average, and how much CPU other processes took during a run.

The load average lags by a minute, so the figure that says whether a run was shared is
taken from ``/proc/stat`` over the run itself: busy CPU time of the whole machine minus this
process's own (``os.times``), in cores. On a VM, ``steal`` is time the hypervisor gave to
another guest: the same effect, from outside.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .sysfs import read

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def load_average(root: Path) -> list[float] | None:
    fields = read(root / "proc/loadavg").split()
    try:
        return [float(v) for v in fields[:3]] if len(fields) >= 3 else None
    except ValueError:
        return None


def cpu_counters(root: Path) -> dict[str, float] | None:
    """Whole-machine CPU seconds (busy, total, steal) and this process's own, at one instant."""
    line = read(root / "proc/stat").split("\n", 1)[0].split()
    if len(line) < 5 or line[0] != "cpu":
        return None
    try:
        values = [int(v) for v in line[1:]]
    except ValueError:
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    steal = values[7] if len(values) > 7 else 0
    total = sum(values[:8])  # guest time is already counted in user
    mine = os.times()
    return {"busy_s": (total - idle - steal) / _TICKS, "total_s": total / _TICKS, "steal_s": steal / _TICKS,
            "self_s": mine.user + mine.system, "wall_s": time.monotonic()}


def usage_between(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """Cores used by other processes (and stolen) between two ``cpu_counters`` readings."""
    if not before or not after:
        return None
    wall = after["wall_s"] - before["wall_s"]
    total = after["total_s"] - before["total_s"]
    if wall <= 0 or total <= 0:
        return None
    cores = total / wall  # the CPU time the machine had in that wall time
    others = max(0.0, (after["busy_s"] - before["busy_s"]) - (after["self_s"] - before["self_s"]))
    stolen = max(0.0, after["steal_s"] - before["steal_s"])
    return {"seconds": round(wall, 3), "other_cores": round(others / wall, 3),
            "other_share": round(min(1.0, others / total), 3), "steal_share": round(min(1.0, stolen / total), 3),
            "cores_seen": round(cores, 2)}
