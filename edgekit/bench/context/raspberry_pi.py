"""Raspberry Pi firmware throttling flags (``get_throttled``) and SoC temperature.

The flags come from the firmware's sysfs node (``.../soc:firmware/get_throttled`` on
Raspberry Pi OS kernels) or, failing that, from ``vcgencmd get_throttled``; the bits are the
firmware's documented ones. Under-voltage is the Pi's power signal: a weak supply throttles
the CPU exactly like heat does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .sysfs import read, tool

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
_SYSFS_GLOBS = ("sys/devices/platform/soc/soc:firmware/get_throttled", "sys/devices/platform/*/*firmware/get_throttled",
                "sys/devices/platform/*firmware/get_throttled")


def decode_throttled(value: int) -> dict[str, Any]:
    flags = [text for bit, text in THROTTLED_BITS.items() if value & (1 << bit)]
    return {
        "raw": hex(value),
        "flags": flags,
        "throttling_now": any(value & (1 << bit) for bit in NOW_THROTTLING),
        "throttled_since_boot": bool(value & (0xF << 16)),
        "under_voltage": bool(value & 0x10001),
    }


def _sysfs_value(root: Path) -> tuple[int, str] | None:
    for pattern in _SYSFS_GLOBS:
        for path in sorted(root.glob(pattern)):
            text = read(path)
            try:
                return int(text, 16), str(path.relative_to(root))
            except ValueError:
                continue
    return None


def throttled(root: Path) -> dict[str, Any] | None:
    """Decoded flags and where they were read, or None on anything that is not a Pi."""
    found = _sysfs_value(root)
    if found is None:
        output = tool("EDGEKIT_VCGENCMD", "vcgencmd", "get_throttled")
        if not output or "=" not in output:
            return None
        try:
            found = int(output.split("=", 1)[1], 16), "vcgencmd get_throttled"
        except ValueError:
            return None
    state = decode_throttled(found[0]) | {"from": found[1]}
    temp = tool("EDGEKIT_VCGENCMD", "vcgencmd", "measure_temp")
    match = re.search(r"temp=([\d.]+)", temp or "")
    if match:
        state["soc_temp_c"] = float(match.group(1))
    return state
