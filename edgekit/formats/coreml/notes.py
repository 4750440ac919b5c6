"""What `edgekit package` says of a CoreML artifact, from the details only the CoreML build writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base import BuildNote


def build_notes(details: Mapping[str, Any]) -> tuple[BuildNote, ...]:
    """Weights-only INT8 (float16 activations) the user did not ask for, and why: said, not only recorded."""
    reason = str(details.get("activations_reason") or "")
    if details.get("activations") == "float16" and not reason.startswith("--coreml-activations"):
        return (BuildNote(reason),)
    return ()
