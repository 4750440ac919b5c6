"""CPU frequency scaling: governor, allowed and hardware frequency range, current frequency.

Read per cpufreq policy (big.LITTLE boards have several) from
``/sys/devices/system/cpu/cpufreq/policy*`` or, on older kernels, ``cpu*/cpufreq``. A cap
(``scaling_max_freq`` below ``cpuinfo_max_freq``) is what a thermal daemon or a power mode
leaves behind, and is reported as such.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .sysfs import read, read_int, unreadable


def _policy_dirs(root: Path) -> list[Path]:
    base = root / "sys/devices/system/cpu"
    policies = sorted((base / "cpufreq").glob("policy*"), key=lambda p: int(p.name[6:] or 0))
    if policies:
        return policies
    return sorted((p / "cpufreq" for p in base.glob("cpu[0-9]*") if (p / "cpufreq").is_dir()),
                  key=lambda p: int(p.parent.name[3:]))


def _mhz(path: Path) -> float | None:
    khz = read_int(path)
    return round(khz / 1000, 1) if khz is not None else None


def frequency_policies(root: Path) -> dict[str, Any]:
    """Static part of the context: governors and frequency ranges (the range a run may use)."""
    policies = []
    for folder in _policy_dirs(root):
        policies.append({
            "cpus": read(folder / "related_cpus") or read(folder / "affected_cpus") or folder.parent.name,
            "governor": read(folder / "scaling_governor") or None,
            "min_mhz": _mhz(folder / "scaling_min_freq"),
            "max_mhz": _mhz(folder / "scaling_max_freq"),
            "hardware_min_mhz": _mhz(folder / "cpuinfo_min_freq"),
            "hardware_max_mhz": _mhz(folder / "cpuinfo_max_freq"),
        })
    if not policies:
        return unreadable("no cpufreq in /sys/devices/system/cpu (a VM or a kernel without frequency scaling): "
                          "governor and frequency unknown")
    governors = sorted({p["governor"] for p in policies if p["governor"]})
    capped = [p["cpus"] for p in policies
              if p["max_mhz"] and p["hardware_max_mhz"] and p["max_mhz"] < p["hardware_max_mhz"]]
    return {"governor": "/".join(governors) or None, "policies": policies, "capped_cpus": capped}


def current_mhz(root: Path) -> dict[str, float] | None:
    """Current frequency per policy (what throttling lowers), None without cpufreq."""
    found = {}
    for folder in _policy_dirs(root):
        value = _mhz(folder / "scaling_cur_freq") or _mhz(folder / "cpuinfo_cur_freq")
        if value is not None:
            found[read(folder / "related_cpus") or folder.name] = value
    return found or None
