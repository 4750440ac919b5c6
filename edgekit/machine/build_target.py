"""A device a package is built for, as the build side sees it (``--profile``): its name, the CPU
architectures it may have and the quantized builds of each format it needs. The formats' builders
read this, below ``device/``; ``device.devices.Profile.build_target`` makes it from a profile."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple


class BuildTarget(NamedTuple):
    name: str
    archs: tuple[str, ...] | None = None  # None: any architecture (the profile has no arch rule)
    quantization: Mapping[str, tuple[str, ...]] = MappingProxyType({})  # format -> its builds ([quantization])

    def builds(self, format_name: str) -> tuple[str, ...]:
        """The quantized builds of ``format_name`` this device needs (none named: the format's default)."""
        return tuple(self.quantization.get(format_name, ()))

    def covers_arch(self, arch: str) -> bool:
        """Whether this device may have this CPU architecture."""
        return self.archs is None or arch in self.archs
