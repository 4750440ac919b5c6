"""Device fingerprint and thermal state for benchmark reports.

What the device is (CPU, cores, memory, OS, libraries). The conditions it ran under
(clocks, temperatures, throttling, load, power) are ``edgekit.bench.context``'s; the thermal
helpers here are kept for callers of the first report schema.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

from ..machine.facts import KERNEL_FEATURES, DeviceFacts
from ..formats import runtime_libraries
from .context import HOT_C, jetson, raspberry_pi, throttle_reasons
from .context.raspberry_pi import decode_throttled
from .context.sysfs import read, root
from .context.thermal import zone_temperatures

__all__ = ["cpu_info", "decode_throttled", "fingerprint", "memory_mib", "thermal_state", "throttled_during"]
_root, _read = root, read


def cpu_info(root: Path) -> dict[str, Any]:
    facts = DeviceFacts.read(root)
    model, flags = facts.cpu_model, facts.cpu_flags
    cpufreq = root / "sys/devices/system/cpu/cpu0/cpufreq"
    khz = lambda name: int(_read(cpufreq / name)) if _read(cpufreq / name).isdigit() else None  # noqa: E731
    return {
        "model": model or platform.processor() or "unknown",
        "simd": sorted(flags & KERNEL_FEATURES),
        "governor": _read(cpufreq / "scaling_governor") or None,
        "cur_freq_mhz": (khz("scaling_cur_freq") or 0) / 1000 or None,
        "max_freq_mhz": (khz("cpuinfo_max_freq") or 0) / 1000 or None,
    }


def memory_mib(root: Path) -> float | None:
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", _read(root / "proc/meminfo"), re.MULTILINE)
    return round(int(match.group(1)) / 1024, 1) if match else None


def thermal_state(root: Path | None = None) -> dict[str, Any]:
    """Temperatures of every thermal zone, Pi throttling flags, Jetson power mode."""
    root = root or _root()
    zones = zone_temperatures(root)
    state: dict[str, Any] = {"zones_c": zones, "max_c": max(zones.values()) if zones else None}
    pi = raspberry_pi.throttled(root)
    if pi:
        state["raspberry_pi"] = pi
    mode = jetson.power_mode(root)
    if mode:
        state["jetson"] = {"power_mode": mode["name"] or mode["id"]}
    return state


def _distribution_version(module: str) -> str:
    """The installed distribution's version for a module without ``__version__`` (ExecuTorch's)."""
    from importlib import metadata

    for name in metadata.packages_distributions().get(module, [module]):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def fingerprint(backend: dict[str, Any] | None = None, profile: str | None = None) -> dict[str, Any]:
    root = _root()
    facts = DeviceFacts.read(root)
    uname = os.uname()
    libraries = {}
    for module in ("numpy", *runtime_libraries()):
        loaded = sys.modules.get(module)
        if loaded is not None:
            libraries[module] = getattr(loaded, "__version__", None) or _distribution_version(module)
    return {
        "arch": facts.arch,
        "cpu": cpu_info(root),
        "cores": facts.cpu_count,
        "memory_mib": memory_mib(root),
        "os": f"{uname.sysname} {uname.release}",
        "device_model": facts.device_tree_model or None,
        "jetson": facts.nv_tegra_release or None,
        "python": platform.python_version(),
        "libraries": libraries,
        "profile": profile,
        "backend": backend or {},
    }


def throttled_during(before: dict[str, Any], after: dict[str, Any], limit_c: float = HOT_C) -> list[str]:
    """Reasons to distrust a run: throttling flags set, or a zone at/over ``limit_c``."""
    return throttle_reasons(before, after, limit_c)
