"""The conditions a benchmark ran under: what makes two latency figures comparable or not.

``static_context`` is read once per run (governor and frequency range, power source, Jetson
power mode, runtime versions); ``snapshot`` is read before, after and (in a sustained run)
between windows (temperatures, current clocks, throttling flags, load). ``conditions`` boils
them down to the few facts ``edgekit compare`` checks two reports for. A signal this machine
does not expose is written as ``{"unreadable": why}``, never guessed.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Any

from . import cpu, jetson, load, power, raspberry_pi, thermal
from .sysfs import root as sysroot
from .sysfs import unreadable

HOT_C = 80.0  # a zone at or over this during a run is reported as a throttling risk
BUSY_SHARE = 0.15  # other processes using this share of the CPU time (or more) make a run "shared"



VENDOR_SIGNALS = ("raspberry_pi", "jetson")  # unreadable on every other device: not a gap in what was read


def unreadable_signals(context: dict[str, Any]) -> list[str]:
    """The signals a report's device could have exposed and did not (cpufreq, power, clocks...);
    "not a Raspberry Pi" / "not a Jetson" are left out of this list (the report keeps them)."""
    return [key.replace("_", " ") for key, value in context.items()
            if isinstance(value, dict) and "unreadable" in value and key not in VENDOR_SIGNALS]


def versions() -> dict[str, str]:
    """edgekit, Python and every runtime library this process has loaded, with their versions."""
    from ...formats import runtime_libraries
    from ...version import __version__

    found = {"edgekit": __version__, "python": platform.python_version()}
    for module in ("numpy", *runtime_libraries()):
        loaded = sys.modules.get(module)
        if loaded is not None:
            found[module] = str(getattr(loaded, "__version__", None) or getattr(loaded, "get_version", lambda: "?")())
    return found


def static_context(root: Path | None = None) -> dict[str, Any]:
    root = root or sysroot()
    pi = raspberry_pi.throttled(root)
    mode = jetson.power_mode(root)
    clocks = jetson.devfreq_clocks(root)
    return {
        "cpu_frequency": cpu.frequency_policies(root),
        "power": power.power_source(root),
        "raspberry_pi": {"throttled_at_start": pi} if pi else unreadable(
            "no Raspberry Pi firmware (no get_throttled in sysfs, no vcgencmd)"),
        "jetson": {"power_mode": mode} if mode else unreadable("not a Jetson (no nvpmodel state or tool)"),
        "accelerator_clocks": clocks or unreadable("no devfreq device (no GPU/NPU clock exposed)"),
        "versions": versions(),
        "cpus": cpus_allowed(),
    }


def cpus_allowed() -> dict[str, int | None]:
    """How many CPUs this process may run on (taskset, a cgroup cpuset) and how many are online:
    a run pinned to fewer cores than its baseline is not the same machine's speed."""
    import os

    try:
        allowed: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        allowed = None
    return {"allowed": allowed, "online": os.cpu_count()}


def snapshot(root: Path | None = None, started: float | None = None) -> dict[str, Any]:
    """The time-varying signals at one instant (``t_s`` from ``started``, a ``time.monotonic``)."""
    root = root or sysroot()
    zones = thermal.zone_temperatures(root)
    pi = raspberry_pi.throttled(root)
    clocks = jetson.devfreq_clocks(root)
    current = cpu.current_mhz(root)
    state: dict[str, Any] = {
        "t_s": round(time.monotonic() - started, 3) if started is not None else 0.0,
        "zones_c": zones,
        "max_c": max(zones.values()) if zones else None,
        "cpu_mhz": current,
        "load_average": load.load_average(root),
        "counters": load.cpu_counters(root),
    }
    if pi:
        state["raspberry_pi"] = pi
    if clocks:
        state["accelerator_mhz"] = {name: c["cur_mhz"] for name, c in clocks.items()}
    return state


def throttle_reasons(before: dict[str, Any], after: dict[str, Any], limit_c: float = HOT_C) -> list[str]:
    """Reasons to distrust a run: throttling flags set, or a zone at/over ``limit_c``."""
    reasons = []
    for state, when in ((before, "before"), (after, "after")):
        pi = state.get("raspberry_pi")
        if pi and pi.get("throttling_now"):
            reasons.append(f"Raspberry Pi reports {', '.join(pi['flags'])} ({when} the run)")
    if (after.get("raspberry_pi") or {}).get("throttled_since_boot") and not (before.get("raspberry_pi") or {}).get(
        "throttled_since_boot"
    ):
        reasons.append("Raspberry Pi throttled during the run")
    hottest = after.get("max_c")
    if hottest is not None and hottest >= limit_c:
        reasons.append(f"a thermal zone reached {hottest:.1f} °C (limit {limit_c:.0f} °C)")
    return reasons


def during(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Other processes' CPU use over the run, or why it is unknown."""
    usage = load.usage_between(before.get("counters"), after.get("counters"))
    if usage is None:
        return unreadable("no /proc/stat: CPU use by other processes unknown")
    return usage | {"load_average_after": after.get("load_average")}


def conditions(static: dict[str, Any], before: dict[str, Any], after: dict[str, Any],
               usage: dict[str, Any]) -> dict[str, Any]:
    """The facts two reports must share to be compared: throttling, governor and caps, load,
    power source and mode. None where the signal was unreadable."""
    frequency = static.get("cpu_frequency") or {}
    reasons = throttle_reasons(before, after)
    readable_thermal = bool(before.get("zones_c") or after.get("zones_c") or after.get("raspberry_pi"))
    mode = (static.get("jetson") or {}).get("power_mode") or {}
    share = usage.get("other_share")
    return {
        "throttled": True if reasons else (False if readable_thermal else None),
        "throttle_reasons": reasons,
        "max_c": after.get("max_c"),
        "governor": frequency.get("governor"),
        "capped": bool(frequency.get("capped_cpus")) if "policies" in frequency else None,
        "other_cores": usage.get("other_cores"),
        "other_share": share,
        "shared": share >= BUSY_SHARE if share is not None else None,
        "power_source": (static.get("power") or {}).get("source"),
        "power_mode": mode.get("name") or (str(mode["id"]) if mode.get("id") is not None else None),
        "cpus_allowed": (static.get("cpus") or {}).get("allowed"),
        "cpus_online": (static.get("cpus") or {}).get("online"),
        "under_voltage": bool((after.get("raspberry_pi") or {}).get("under_voltage")) if after.get("raspberry_pi")
        else None,
    }
