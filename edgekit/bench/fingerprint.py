"""Device fingerprint and thermal state for benchmark reports.

Everything is read from files below a root (``EDGEKIT_SYSROOT`` or ``/``) and from optional
vendor tools (``vcgencmd`` on Raspberry Pi, ``nvpmodel`` on Jetson; overridable with
``EDGEKIT_VCGENCMD`` / ``EDGEKIT_NVPMODEL``), so tests can fake a Pi or a Jetson. A missing
file or tool is simply absent from the fingerprint, never an error.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..devices import SYSROOT_ENV, DeviceFacts

# vcgencmd get_throttled bits (Raspberry Pi firmware documentation)
THROTTLED_BITS = {
    0: "under-voltage detected",
    1: "arm frequency capped",
    2: "currently throttled",
    3: "soft temperature limit active",
    16: "under-voltage has occurred",
    17: "arm frequency capping has occurred",
    18: "throttling has occurred",
    19: "soft temperature limit has occurred",
}
NOW_THROTTLING = {0, 1, 2, 3}


def _root() -> Path:
    return Path(os.environ.get(SYSROOT_ENV) or "/")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _tool(env: str, name: str, *args: str) -> str | None:
    executable = os.environ.get(env) or shutil.which(name)
    if not executable:
        return None
    try:
        result = subprocess.run([executable, *args], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def decode_throttled(value: int) -> dict[str, Any]:
    flags = [text for bit, text in THROTTLED_BITS.items() if value & (1 << bit)]
    return {
        "raw": hex(value),
        "flags": flags,
        "throttling_now": any(value & (1 << bit) for bit in NOW_THROTTLING),
        "throttled_since_boot": bool(value & (0xF << 16)),
    }


def cpu_info(root: Path) -> dict[str, Any]:
    text = _read(root / "proc/cpuinfo")
    model = ""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            model = match.group(1).strip()
            break
    flags_match = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.MULTILINE)
    flags = set(flags_match.group(1).split()) if flags_match else set()
    interesting = {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "fma", "neon", "asimd", "asimddp", "i8mm"}
    cpufreq = root / "sys/devices/system/cpu/cpu0/cpufreq"
    khz = lambda name: int(_read(cpufreq / name)) if _read(cpufreq / name).isdigit() else None  # noqa: E731
    return {
        "model": model or platform.processor() or "unknown",
        "simd": sorted(flags & interesting),
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
    zones = {}
    for zone in sorted((root / "sys/class/thermal").glob("thermal_zone*")):
        temp = _read(zone / "temp")
        if temp.lstrip("-").isdigit():
            zones[_read(zone / "type") or zone.name] = int(temp) / 1000
    state: dict[str, Any] = {"zones_c": zones, "max_c": max(zones.values()) if zones else None}
    throttled = _tool("EDGEKIT_VCGENCMD", "vcgencmd", "get_throttled")
    if throttled and "=" in throttled:
        try:
            state["raspberry_pi"] = decode_throttled(int(throttled.split("=", 1)[1], 16))
        except ValueError:
            pass
        temp = _tool("EDGEKIT_VCGENCMD", "vcgencmd", "measure_temp")
        match = re.search(r"temp=([\d.]+)", temp or "")
        if match:
            state["raspberry_pi"]["soc_temp_c"] = float(match.group(1))
    mode = _tool("EDGEKIT_NVPMODEL", "nvpmodel", "-q")
    if mode:
        match = re.search(r"NV Power Mode:\s*(\S+)", mode)
        state["jetson"] = {"power_mode": match.group(1) if match else mode.splitlines()[0]}
    return state


def fingerprint(backend: dict[str, Any] | None = None, profile: str | None = None) -> dict[str, Any]:
    root = _root()
    facts = DeviceFacts.read(root)
    uname = os.uname()
    libraries = {}
    for module in ("numpy", "ai_edge_litert", "tflite_runtime", "onnxruntime", "coremltools"):
        loaded = sys.modules.get(module)
        if loaded is not None:
            libraries[module] = getattr(loaded, "__version__", "?")
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


def throttled_during(before: dict[str, Any], after: dict[str, Any], limit_c: float = 80.0) -> list[str]:
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
