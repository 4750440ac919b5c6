"""Temperatures of every Linux thermal zone (``/sys/class/thermal/thermal_zone*``), in °C."""

from __future__ import annotations

from pathlib import Path

from .sysfs import read


def zone_temperatures(root: Path) -> dict[str, float]:
    zones: dict[str, float] = {}
    for zone in sorted((root / "sys/class/thermal").glob("thermal_zone*"), key=lambda p: int(p.name[12:] or 0)):
        temp = read(zone / "temp")
        if temp.lstrip("-").isdigit():
            name = read(zone / "type") or zone.name
            zones[name if name not in zones else f"{name}:{zone.name}"] = int(temp) / 1000
    return zones
