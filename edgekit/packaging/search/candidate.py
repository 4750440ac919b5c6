"""A build the search judged, and when one is better than another by the gates that failed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...formats import BuildContext, BuildResult
from ..gates import GateFailure
from ..validate import Measured
from ..search_settings import DEFAULT_SETTINGS


@dataclass(frozen=True)
class Candidate:
    """A format's build, its measurement and the gates it fails, with the context that made it."""

    context: BuildContext
    built: BuildResult
    measured: Measured
    failures: list[GateFailure]
    files: Path | None = None  # a search try that passed: the scratch folder its artifact is in (to time it)


def still_quantized(built: BuildResult) -> bool:
    """Whether a build still computes in integers: a configuration that left no layer with weights
    in integers (every convolution and dense layer raised to float) is the float model under
    another name, never a fix; the format's precision record counts them (``ops.integer_weighted``)."""
    precision = built.artifact.about.precision
    weighted = (precision.get("ops") or {}).get("integer_weighted")
    return built.artifact.precision != "float" and weighted != 0


def improves(new: Candidate, old: Candidate, improvement: float = DEFAULT_SETTINGS.improvement) -> bool:
    """Whether ``new`` is better than ``old`` by the gates ``old`` failed, on their own metrics
    (by more than ``improvement``: rounding noise is no change)."""
    before = {f.key: f.margin for f in old.failures}
    after = {f.key: f.margin for f in new.failures}
    if any(key not in before for key in after):  # a gate that passed now fails
        return False
    if any(after[key] < before[key] - improvement for key in after):  # a failing gate got worse
        return False
    return len(after) < len(before) or any(after[key] > before[key] + improvement for key in after)

