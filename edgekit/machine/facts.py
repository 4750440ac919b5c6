"""What edgekit knows about the machine it runs on: the OS, the CPU and its int8-relevant
features, a GPU. Read from ``/proc`` (below ``EDGEKIT_SYSROOT`` in tests), by this one module: the
runtime, the formats' backends and builders, and the benchmarks ask ``DeviceFacts``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

SYSROOT_ENV = "EDGEKIT_SYSROOT"
# the CPU features int8 and float kernels are chosen by: two CPUs of one model name with these alike
# run a package's artifacts in the same order of speed
KERNEL_FEATURES = frozenset({"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "fma", "neon", "asimd",
                             "asimddp", "i8mm", "sve"})


class DeviceFacts(NamedTuple):
    """What edgekit knows about the machine it runs on (a NamedTuple: cheap to define at start-up)."""

    os: str
    arch: str
    device_tree_model: str = ""
    nv_tegra_release: str = ""
    cuda: bool = False
    cpu_count: int = 1
    cpu_flags: frozenset[str] = frozenset()  # /proc/cpuinfo flags (x86) or Features (ARM): int8 kernels differ by them
    cpu_model: str = ""  # /proc/cpuinfo's model name (x86) or Hardware/Model (ARM)

    def cpu_kind(self) -> str:
        """The kind of CPU a speed measurement holds for: architecture, model name, the kernel
        features (``KERNEL_FEATURES``) and whether a GPU is there (its providers run first)."""
        features = ",".join(sorted(self.cpu_flags & KERNEL_FEATURES))
        return f"{self.arch} | {self.cpu_model or 'unknown CPU'} | {features or '-'}" + (" | cuda" if self.cuda else "")

    @classmethod
    def read(cls, root: str | os.PathLike[str] | None = None) -> DeviceFacts:
        base = Path(root or os.environ.get(SYSROOT_ENV) or "/")
        model = read_or_empty(base / "proc/device-tree/model").replace("\x00", "").strip()
        tegra = read_or_empty(base / "etc/nv_tegra_release").strip()
        cuda = (base / "proc/driver/nvidia/version").exists() or (base / "dev/nvidia0").exists() or bool(tegra)
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # macOS
            cpus = os.cpu_count() or 1
        system = os.uname()  # platform.system()/machine() without importing platform
        cpu = read_or_empty(base / "proc/cpuinfo")  # the one reader of the CPU's description (below the test sysroot)
        return cls(
            os=system.sysname.lower(),
            arch=system.machine,
            device_tree_model=model,
            nv_tegra_release=tegra.splitlines()[0] if tegra else "",
            cuda=cuda,
            cpu_count=cpus,
            cpu_flags=_flags(cpu),
            cpu_model=_cpu_model(cpu),
        )


def _flags(cpuinfo: str) -> frozenset[str]:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return frozenset()


def _cpu_model(cpuinfo: str) -> str:
    """The CPU's name: ``model name`` (x86), else the board's ``Model``, ``Hardware`` or ``cpu model`` (ARM, MIPS)."""
    order = ("model name", "model", "hardware", "cpu model")
    found = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in order and value.strip() and key not in found:
            found[key] = value.strip()
    return next((found[k] for k in order if k in found), "")


def read_or_empty(path: Path) -> str:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:
        return ""

