"""Power source: mains or battery (and its state), from ``/sys/class/power_supply``.

A laptop or phone on battery and the same one on mains run at different clocks; a board
with no power-supply class (most SBCs) says it cannot tell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .sysfs import read, read_int, unreadable


def power_source(root: Path) -> dict[str, Any]:
    supplies = sorted((root / "sys/class/power_supply").glob("*"))
    mains, batteries = [], []
    for supply in supplies:
        kind = read(supply / "type")
        if kind == "Battery":
            batteries.append({"name": supply.name, "status": read(supply / "status") or None,
                              "capacity_pct": read_int(supply / "capacity")})
        elif kind in ("Mains", "USB", "USB_C", "USB_PD"):
            mains.append({"name": supply.name, "online": read_int(supply / "online") == 1})
    if not mains and not batteries:
        return unreadable("no power supply in /sys/class/power_supply: source unknown")
    discharging = any(b["status"] == "Discharging" for b in batteries)
    if any(m["online"] for m in mains) and not discharging:
        source = "mains"
    elif batteries and (discharging or not any(m["online"] for m in mains)):
        source = "battery"
    else:
        source = "unknown"
    return {"source": source, "batteries": batteries, "supplies": mains}
