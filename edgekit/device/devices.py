"""Device detection and device profiles (the TOML files in the repository's top-level ``targets/``).

A profile says how to recognise a device and how to run on it: artifact/backend preference,
threads, and one ``[runtime.BACKEND]`` table per backend (LiteRT delegate, ONNX Runtime
providers, ...) that only that backend reads (``Backend.profile_options``). Detection reads plain
files (``/proc/device-tree/model``, ``/etc/nv_tegra_release``, ``/proc/driver/nvidia/version``)
below a root directory, so tests can point it at a fake root.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import EdgekitError
from ..machine.build_target import BuildTarget
from ..machine.facts import SYSROOT_ENV, DeviceFacts  # noqa: F401  (a profile is matched against them)

PROFILE_DIRS_ENV = "EDGEKIT_PROFILES"


# Runtime threads beyond this many per core only contend: LiteRT crashes (rc 139) and ONNX
# Runtime holds one OS thread each, which can exhaust the machine's thread limit for every
# other process. A count above the bound is a usage error, never attempted.
THREADS_PER_CORE_LIMIT = 4


def max_threads(cpu_count: int | None = None) -> int:
    """The most runtime threads edgekit accepts on a machine with ``cpu_count`` cores (this one's by default)."""
    cores = cpu_count or DeviceFacts.read().cpu_count
    return THREADS_PER_CORE_LIMIT * max(1, cores)


def check_threads(threads: object, what: str = "threads", cpu_count: int | None = None) -> int:
    """``threads`` when it is a whole number from 1 to ``max_threads()``; else a usage error."""
    from ..errors import InputError

    limit = max_threads(cpu_count)
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= limit:
        raise InputError(f"{what} must be from 1 to {limit} on this device ({limit // THREADS_PER_CORE_LIMIT} "
                         f"cores, at most {THREADS_PER_CORE_LIMIT} threads each), got {threads!r}",
                         hint="leave it out to use the profile's count, or run `edgekit tune` to measure the best")
    return threads


def runtime_threads(profile: Profile, facts: DeviceFacts, asked: int | None = None) -> int:
    """The threads a runtime gets here, decided in one place: ``asked`` (the caller's or what
    ``edgekit tune`` stored; the caller's is checked by ``check_threads`` where it is given), else
    the profile's count (0: every core). A count above this device's limit (a profile or a tuned
    record written for a bigger machine) is lowered to the limit, said out loud: never oversubscribe."""
    count = asked or profile.resolved_threads(facts)
    limit = max_threads(facts.cpu_count)
    if count > limit:
        from ..logs import loud

        loud("edgekit.runtime").warning("%d threads is more than this device runs well (%d cores); using %d", count,
                                        facts.cpu_count, limit)
        return limit
    return count


def _quantization(table: Any, path: Path) -> dict[str, list[str]]:
    """A profile's ``[quantization]`` table, each entry checked by its format's ``DeviceRules``;
    formats it does not name get their default builds."""
    from ..formats import FORMATS

    table = table or {}
    if not isinstance(table, dict):
        raise EdgekitError(f"device profile {path}: [quantization] must be a table of format = [builds]")
    unknown = [name for name in table if name not in FORMATS]
    if unknown:
        raise EdgekitError(f"device profile {path}: [quantization] names unknown format(s) {unknown}",
                           hint=f"use {', '.join(FORMATS)}")
    found = {name: list(fmt.device_rules.default_builds) for name, fmt in FORMATS.items()
             if fmt.device_rules.default_builds}
    for name, value in table.items():
        found[name] = FORMATS[name].device_rules.profile_builds(value, f"device profile {path}")
    return found


@dataclass
class Profile:
    """A device profile (``targets/NAME.toml``): how to recognise the device and how to run on it."""

    name: str
    description: str = ""
    priority: int = 0
    detect: dict[str, Any] = field(default_factory=dict)
    prefer: list[tuple[str, str]] = field(default_factory=list)  # (artifact target, backend)
    threads: int = 0  # 0: all available cores
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)  # [runtime.BACKEND] tables, by backend
    require_signature: bool = False  # refuse packages not signed by a key in trusted_keys
    trusted_keys: str | None = None  # folder of KEY.pub files
    use_tuned: bool = True  # false: the prefer order always decides (a choice `edgekit tune` stored is ignored)
    # [quantization] FORMAT: the quantized builds of a format this profile's devices may need (a format
    # with several, as ONNX's INT8 schemes: its DeviceRules); a format not named gets its default builds
    quantization: dict[str, list[str]] = field(default_factory=dict)
    path: str = ""

    @classmethod
    def from_file(cls, path: Path) -> Profile:
        from .profile_store import parse_profile

        return cls.from_table(parse_profile(path), path)

    @classmethod
    def from_table(cls, data: dict[str, Any], path: Path) -> Profile:
        """A profile from its parsed TOML (``path`` names it in errors)."""
        name = data.get("name") or path.stem
        runtime = data.get("runtime", {})
        prefer = []
        for entry in runtime.get("prefer", []):
            if not isinstance(entry, dict) or "artifact" not in entry or "backend" not in entry:
                raise EdgekitError(
                    f"device profile {path}: each runtime.prefer entry needs artifact and backend",
                    hint='write prefer = [{ artifact = "tflite", backend = "litert" }]',
                )
            prefer.append((str(entry["artifact"]), str(entry["backend"])))
        threads = runtime.get("threads", 0)
        if not isinstance(threads, int) or threads < 0:
            raise EdgekitError(f"device profile {path}: runtime.threads must be an integer >= 0")
        quantization = _quantization(data.get("quantization"), path)
        return cls(
            name=str(name),
            description=str(data.get("description", "")),
            priority=int(data.get("priority", 0)),
            detect=dict(data.get("detect", {})),
            prefer=prefer,
            threads=threads,
            sections={key: dict(value) for key, value in runtime.items() if isinstance(value, dict)},
            require_signature=bool(runtime.get("require_signature", False)),
            trusted_keys=runtime.get("trusted_keys"),
            use_tuned=bool(runtime.get("use_tuned", True)),
            quantization=quantization,
            path=str(path),
        )

    def builds(self, format_name: str) -> list[str]:
        """The quantized builds of ``format_name`` this profile's devices need (``[quantization]``)."""
        return self.quantization.get(format_name, [])

    def resolved_threads(self, facts: DeviceFacts) -> int:
        return self.threads or facts.cpu_count

    def section(self, backend: str) -> dict[str, Any]:
        """The profile's ``[runtime.BACKEND]`` table (empty when it has none)."""
        return self.sections.get(backend, {})

    def build_target(self) -> BuildTarget:
        """What a package build reads of this profile (the formats stand below ``device/``)."""
        arch = self.detect.get("arch")
        archs = None if arch is None else tuple(str(a) for a in (arch if isinstance(arch, list) else [arch]))
        return BuildTarget(self.name, archs, MappingProxyType({k: tuple(v) for k, v in self.quantization.items()}))

    def covers_arch(self, arch: str) -> bool:
        """Whether this profile's devices may have this CPU architecture (any, without an arch rule)."""
        return self.build_target().covers_arch(arch)

    def match(self, facts: DeviceFacts) -> tuple[bool, list[str]]:
        """Whether every detection rule holds, with one line per rule saying why."""
        if not self.detect:
            return False, ["no detection rules: selected only with --profile " + self.name]
        reasons = []
        ok = True
        for key, expected in self.detect.items():
            hit, why = _rule(key, expected, facts)
            ok = ok and hit
            reasons.append(("yes: " if hit else "no: ") + why)
        return ok, reasons


def _rule(key: str, expected: Any, facts: DeviceFacts) -> tuple[bool, str]:
    values = expected if isinstance(expected, list) else [expected]
    if key == "os":
        return facts.os in [str(v).lower() for v in values], f"os {facts.os} in {values}"
    if key == "arch":
        return facts.arch in values, f"arch {facts.arch} in {values}"
    if key == "device_tree_model":
        model = facts.device_tree_model or "(none)"
        return any(str(v) in facts.device_tree_model for v in values), f"device-tree model {model!r} contains one of {values}"
    if key == "nv_tegra_release":
        present = bool(facts.nv_tegra_release)
        return present == bool(expected), f"/etc/nv_tegra_release {'present' if present else 'absent'}"
    if key == "cuda":
        return facts.cuda == bool(expected), f"NVIDIA driver {'present' if facts.cuda else 'absent'}"
    return False, f"unknown detection rule {key!r}"


def profile_dirs() -> list[Path]:
    """Where profiles are read from, later directories overriding earlier ones by name."""
    dirs = [
        Path(__file__).resolve().parents[2] / "targets",  # source checkout / editable install
        Path(sys.prefix) / "share" / "edgekit" / "targets",  # wheel install (data files)
    ]
    try:
        from ..machine.userdirs import user_config_dir

        dirs.append(user_config_dir() / "targets")
    except ImportError:  # platformdirs is a dependency; keep detection working without it
        pass
    extra = os.environ.get(PROFILE_DIRS_ENV, "")
    dirs.extend(Path(p) for p in extra.split(os.pathsep) if p)
    return dirs


def load_profiles(dirs: list[Path] | None = None) -> dict[str, Profile]:
    from .profile_store import read_profile_tables

    files = []
    for directory in profile_dirs() if dirs is None else dirs:
        if directory.is_dir():
            files.extend(sorted(directory.glob("*.toml")))
    profiles: dict[str, Profile] = {}
    for file, table in zip(files, read_profile_tables(files)):
        profile = Profile.from_table(table, file)
        profiles[profile.name] = profile
    return profiles


def detect(facts: DeviceFacts | None = None, profiles: dict[str, Profile] | None = None) -> Profile:
    """The matching profile with the highest priority (a generic CPU profile if none matches)."""
    facts = facts or DeviceFacts.read()
    profiles = load_profiles() if profiles is None else profiles
    matches = [p for p in profiles.values() if p.match(facts)[0]]
    if matches:
        return max(matches, key=lambda p: (p.priority, p.name))
    from ..formats import FORMATS

    return Profile(
        name="generic",
        description=f"no profile matched {facts.os}/{facts.arch}: defaults",
        prefer=[(f.name, b.name) for f in FORMATS.values() for b in f.backends],
    )


def get_profile(name: str, profiles: dict[str, Profile] | None = None) -> Profile:
    profiles = load_profiles() if profiles is None else profiles
    if name not in profiles:
        raise EdgekitError(
            f"unknown device profile {name!r}",
            hint="choose one of: auto, " + ", ".join(sorted(profiles)) + " (see `edgekit profiles`)",
        )
    return profiles[name]


def resolve_profile(profile: str | Profile | None, facts: DeviceFacts | None = None) -> Profile:
    """A profile given as itself, by name, or as "auto"/None (detected from this device's facts)."""
    if isinstance(profile, Profile):
        return profile
    if profile in (None, "auto"):
        return detect(facts)
    return get_profile(profile)
