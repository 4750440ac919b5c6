"""Build-side output formats, registered by name (``--target NAME``).

Not to be confused with the device profiles in the repository's top-level ``targets/``
directory, which are data files describing devices.
"""

from __future__ import annotations

from ..errors import EdgekitError
from .base import BuildContext, Target
from .coreml import CoreMLTarget
from .onnx import ONNXTarget
from .tflite import TFLiteTarget

TARGETS: dict[str, type[Target]] = {}


def register(target: type[Target]) -> None:
    if target.name in TARGETS:
        raise ValueError(f"target {target.name!r} is registered twice")
    TARGETS[target.name] = target


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]()
    except KeyError:
        raise EdgekitError(
            f"unknown target {name!r}", hint="choose one of: " + ", ".join(sorted(TARGETS))
        ) from None


def expand_targets(names: list[str]) -> list[str]:
    """Target names with ``all`` expanded and duplicates dropped (order kept)."""
    expanded: list[str] = []
    for name in names:
        expanded.extend(TARGETS if name == "all" else [name])
    return list(dict.fromkeys(expanded))


register(TFLiteTarget)
register(ONNXTarget)
register(CoreMLTarget)

__all__ = ["TARGETS", "BuildContext", "Target", "expand_targets", "get_target", "register"]
