"""NVIDIA Jetson power mode (nvpmodel) and accelerator clocks (devfreq).

The power mode caps clocks and cores (an Orin Nano at 7 W runs far slower than at MAXN): two
Jetson figures taken in different modes are different devices. The mode is read from
nvpmodel's state file and named from ``/etc/nvpmodel.conf``; ``nvpmodel -q`` is the fallback.
Devfreq devices (a Jetson GPU, a Rockchip NPU, a Mali GPU) are read on every board.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .sysfs import read, read_int, tool

STATE_FILE = "var/lib/nvpmodel/status"
CONFIG_FILE = "etc/nvpmodel.conf"


def power_mode(root: Path) -> dict[str, Any] | None:
    """{"id", "name", "from"} of the active nvpmodel mode, or None when this is not a Jetson."""
    match = re.search(r"pmode:\s*(\d+)", read(root / STATE_FILE))
    if match:
        mode_id = int(match.group(1))
        names = dict(re.findall(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=([^\s>]+)", read(root / CONFIG_FILE)))
        return {"id": mode_id, "name": names.get(str(mode_id)), "from": STATE_FILE}
    output = tool("EDGEKIT_NVPMODEL", "nvpmodel", "-q")
    if not output:
        return None
    name = re.search(r"NV Power Mode:\s*(\S+)", output)
    number = re.search(r"^\s*(\d+)\s*$", output, re.MULTILINE)
    return {"id": int(number.group(1)) if number else None, "name": name.group(1) if name else output.splitlines()[0],
            "from": "nvpmodel -q"}


def devfreq_clocks(root: Path) -> dict[str, dict[str, Any]]:
    """Per devfreq device: governor and current/min/max clock in MHz."""
    clocks = {}
    for device in sorted((root / "sys/class/devfreq").glob("*")):
        current = read_int(device / "cur_freq")
        if current is None:
            continue
        entry: dict[str, Any] = {"cur_mhz": round(current / 1e6, 1)}
        for key in ("min_freq", "max_freq"):
            value = read_int(device / key)
            if value is not None:
                entry[key.replace("_freq", "_mhz")] = round(value / 1e6, 1)
        entry["governor"] = read(device / "governor") or None
        clocks[device.name] = entry
    return clocks
