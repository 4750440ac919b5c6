"""The registry of output formats and their device backends.

Every folder below ``edgekit/formats/`` whose ``__init__.py`` defines ``FORMAT`` is a format;
they are found by themselves (``FORMATS``), so a new format is one new folder. Command-line
choices, pip-extra hints, device-profile sections, the runtime's choice and the server's
metadata all read from here. Built-in formats come first, in this order; others follow by name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailableError, EdgekitError
from ..registry import Registry, discover
from .backend import Backend, TensorInfo
from .base import Accepts, Format, Option

if TYPE_CHECKING:
    from .building import Builder, BuildContext, BuildResult

_FIRST = ("tflite", "onnx", "coreml")
DEFAULT_FORMAT = "tflite"  # what `edgekit package` builds without --format


def register(fmt: Format, into: Registry[Format] | None = None) -> None:
    """Add a format (discovery does this for folders; tests and plugins may call it). A format's
    name and each of its backends' names must be new."""
    target = FORMATS if into is None else into
    for backend in fmt.backends:
        for other in target.values():
            if other.name != fmt.name and any(b.name == backend.name and b is not backend for b in other.backends):
                raise ValueError(f"backend name {backend.name!r} of format {fmt.name!r} is already used by {other.name!r}")
    target.add(fmt.name, fmt)


def _discover() -> Registry[Format]:
    found: Registry[Format] = Registry("format")
    for module in discover(__name__, os.path.dirname(__file__), folders=True, first=_FIRST):
        fmt = getattr(module, "FORMAT", None)
        if fmt is None:
            continue
        if not isinstance(fmt, Format):
            raise TypeError(f"{module.__name__}.FORMAT is not an edgekit.formats.Format")
        register(fmt, found)
    return found


FORMATS: Registry[Format] = _discover()


def __getattr__(name: str) -> Any:
    """The build side (``Builder``, ``BuildContext``, ``BuildResult``) is imported when asked for,
    so a device importing the registry never loads it."""
    if name in ("Builder", "BuildContext", "BuildResult"):
        from . import building

        return getattr(building, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def device_artifacts(present: set[str], facts: Any) -> dict[str, str]:
    """Each format's build this device runs (``DeviceRules``), where that is not the format's own
    key: ``{"onnx": "onnx-u8s8"}`` on an x86 CPU with VNNI when the package has that build."""
    found = {}
    for name, fmt in FORMATS.items():
        key = fmt.device_rules.artifact_for_device(present, facts)
        if key is not None and key != name:
            found[name] = key
    return found


def exact_key(name: str) -> str:
    """The artifact key a name that loads one build exactly stands for (``DeviceRules.exact_key``)."""
    return _renamed(name, lambda rules: rules.exact_key)


def exact_name(key: str) -> str:
    """The name that loads exactly the build with this artifact key (``DeviceRules.exact_name``):
    what code that iterates a manifest's keys passes, since a format's name means this device's best."""
    return _renamed(key, lambda rules: rules.exact_name)


def _renamed(name: str, rule: Any) -> str:
    """``name`` as the first format whose rule changes it says, else unchanged."""
    for fmt in FORMATS.values():
        changed = rule(fmt.device_rules)(name)
        if changed != name:
            return changed
    return name


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise EdgekitError(f"unknown format {name!r}", hint="choose one of: " + ", ".join(FORMATS)) from None


def expand_formats(names: list[str]) -> list[str]:
    """Format names with ``all`` expanded and duplicates dropped (order kept)."""
    expanded: list[str] = []
    for name in names:
        expanded.extend(FORMATS if name == "all" else [name])
    return list(dict.fromkeys(expanded))


def missing_converter(fmt: Format) -> str | None:
    """Why this machine cannot build ``fmt`` (its converter's modules are not installed), or None."""
    import importlib.util

    def installed(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a finder refusing it: not usable
            return False

    missing = [m for m in fmt.build_requires if not installed(m)]
    if not missing:
        return None
    return f"its converter needs {', '.join(missing)}, not installed here"


def backends() -> dict[str, type[Backend]]:
    """Every device backend by name (``--backend NAME``), in format order."""
    return {b.name: b for f in FORMATS.values() for b in f.backends}


def runtime_libraries() -> tuple[str, ...]:
    """Every backend's runtime library (top-level module names), in format order: what a benchmark
    report's versions and a tuned choice's identity name."""
    return tuple(dict.fromkeys(m for b in backends().values() for m in b.libraries))


def get_backend(name: str) -> type[Backend]:
    found = backends()
    if name not in found:
        raise BackendUnavailableError(f"unknown backend {name!r}", hint="choose one of: " + ", ".join(found))
    return found[name]


def format_of_backend(name: str) -> Format:
    return next(f for f in FORMATS.values() if any(b.name == name for b in f.backends))


def build_options() -> list[tuple[Format, Option]]:
    """Every format's own build options, in format order (the CLI turns them into flags)."""
    return [(f, o) for f in FORMATS.values() for o in f.options]


def format_for_file(path: Path) -> Format | None:
    """The format whose bare artifact files end like ``path`` (``model.tflite`` -> tflite)."""
    suffix = path.suffix.lower()
    return next((f for f in FORMATS.values() if suffix in f.bare_suffixes), None)


__all__ = ["DEFAULT_FORMAT", "FORMATS", "Accepts", "Backend", "BuildContext", "BuildResult", "Builder", "Format", "Option", "TensorInfo", "backends",
           "build_options", "expand_formats",
           "format_for_file", "format_of_backend", "get_backend", "get_format", "register"]
