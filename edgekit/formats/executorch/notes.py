"""What `edgekit package` says of an ExecuTorch artifact: what XNNPACK took and what it left to
the portable kernels (float ops outside the delegate), from the placement the build recorded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base import BuildNote
from .ops import LAYOUT_OPS  # layout copies around the delegate, not compute


def build_notes(details: Mapping[str, Any]) -> tuple[BuildNote, ...]:
    return _learned(details) + _placement(details)


def _learned(details: Mapping[str, Any]) -> tuple[BuildNote, ...]:
    """A quantized source's pairs: how many of its learned ranges the program holds."""
    learned = details.get("learned_ranges")
    if not learned:
        return ()
    carried, missing = learned.get("carried") or {}, learned.get("not_found") or []
    return (BuildNote(f"the source's learned activation ranges carried: {len(carried)} of {len(carried) + len(missing)}"
                      + (f" (not found: {', '.join(missing)})" if missing else "")),)


def _placement(details: Mapping[str, Any]) -> tuple[BuildNote, ...]:
    placement = details.get("placement") or {}
    if not placement:
        return ()
    portable = {op: n for op, n in (placement.get("portable") or {}).items() if op not in LAYOUT_OPS}
    line = f"XNNPACK runs {placement.get('delegated_ops', 0)} ops in {placement.get('partitions', 0)} partition(s)"
    if not portable:
        return (BuildNote(line + "; no compute is left to ExecuTorch's portable kernels"),)
    left = ", ".join(f"{op} x{n}" for op, n in portable.items())
    return (BuildNote(f"{line}; ExecuTorch's portable kernels run {sum(portable.values())} ops in float "
                      f"outside it ({left})"),)
