"""What `edgekit package` says of a TFLite artifact, from the details only the TFLite build writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base import BuildNote


def build_notes(details: Mapping[str, Any]) -> tuple[BuildNote, ...]:
    """A quantized source's learned ranges: how many were carried, which were left to calibration,
    and the weight channels TFLite's symmetric int8 grid had to quantize again."""
    learned = details.get("learned_ranges")
    if not learned:
        return ()
    if learned.get("by"):
        return (BuildNote(f"the source's learned ranges taken by {learned['by']}"),)
    carried, missing = learned.get("carried") or {}, learned.get("not_found") or []
    text = (f"the source's learned activation ranges carried: {len(carried)} of {len(carried) + len(missing)}"
            + (f" (calibrated here instead: {', '.join(missing)})" if missing else ""))
    here = learned.get("calibrated_here") or []
    if here:
        text += f"; tensors the source did not quantize, calibrated here: {', '.join(here[:6])}" + (
            f" and {len(here) - 6} more" if len(here) > 6 else "")
    weights = learned.get("weights") or {}
    again = {layer: w for layer, w in weights.items() if w["requantized"]}
    if weights:
        text += (f"; weights on their learned scales in {len(weights) - len(again)} of {len(weights)} layers"
                 + (" (quantized again at 128/127 of the learned scale, as TFLite's int8 weights are symmetric in "
                    "[-127, 127]: " + ", ".join(f"{layer} {w['requantized']} of {w['channels']} channels"
                                                 for layer, w in again.items()) + ")" if again else ""))
    return (BuildNote(text),)
