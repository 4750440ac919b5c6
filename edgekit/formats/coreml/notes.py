"""What `edgekit package` says of a CoreML artifact, from the details only the CoreML build writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base import BuildNote


def build_notes(details: Mapping[str, Any]) -> tuple[BuildNote, ...]:
    """Weights-only INT8 (float16 activations) the user did not ask for, and why: said, not only
    recorded; a quantized source's ranges, how many were carried."""
    learned = details.get("learned_ranges")
    if learned:  # a quantized source: its pairs carried into Core ML's quantize ops, counted
        carried, missing = learned.get("carried") or {}, learned.get("not_found") or []
        weights = learned.get("weights") or {}
        floats = learned.get("float_layers") or details.get("float_weight_ops") or []
        return (BuildNote(
            f"the source's learned activation ranges carried: {len(carried)} of {len(carried) + len(missing)}"
            + (f" (not found: {', '.join(missing)})" if missing else "")
            + f" (scales stored in float16); int8 weights with their learned scales: {weights.get('int8_constants', 0)}"
            + (f"; float16 weights the source left float: {', '.join(floats)}" if floats else "")),)
    reason = str(details.get("activations_reason") or "")
    if details.get("activations") == "float16" and not reason.startswith("--coreml-activations"):
        return (BuildNote(reason),)
    return ()
