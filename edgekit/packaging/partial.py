"""A package of several formats in which one format's INT8 artifact fails its gates.

The formats whose INT8 artifacts passed still ship: the refused one is left out of the package
as a format that did not build is (``manifest.failed`` names it, with its failed gates and what
the search tried), its float fallback ships where that passed, and ``edgekit package`` exits
non-zero unless ``--allow-partial`` (``PartialPackageError``). When every requested format's
INT8 artifact fails, nothing is written (the user came for INT8, and no format has it) unless
``--allow-partial`` asks for what passed: the float fallbacks, with every INT8 recorded as refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..formats import FORMATS
from ..manifest import FailedFormat
from .fallback import discard
from .gates import failure_hint, failure_message
from .search.trial import LAYERS


def refused_formats(outcomes: list[Any], allow_accuracy_drop: bool, allow_partial: bool = False) -> list[Any]:
    """The ``FormatOutcome``s of main INT8 artifacts refused while another format's passed (or,
    with ``allow_partial``, while a float fallback passed)."""
    if allow_accuracy_drop:
        return []
    mains = [o for o in outcomes if o.built is not None and o.name in FORMATS]
    refused = [o for o in mains if o.failures]
    if len(refused) < len(mains) or (refused and allow_partial and passed_fallbacks(outcomes)):
        return refused
    return []


def passed_fallbacks(outcomes: list[Any]) -> list[str]:
    """The float fallbacks that passed validation (what can ship when every INT8 is refused)."""
    return [o.name for o in outcomes if o.built is not None and o.name not in FORMATS and not o.failures
            and o.comparison is not None and o.built.artifact.precision.startswith("float")]


def leave_out(outcome: Any, staged: Path, searched: bool) -> FailedFormat:
    """Remove a refused artifact (and its companions) from the staged package; its ``failed`` entry."""
    artifact = outcome.built.artifact
    for path in [artifact.path, *(c["path"] for c in artifact.companions)]:
        discard(staged / path)
    tried = {outcome.name: {t.change for t in outcome.fixes if not t.stage}} if searched else None
    plans = {outcome.name: sum(1 for t in outcome.fixes if t.stage == LAYERS)}
    message = failure_message(list(outcome.failures), tried).removesuffix("; no package was written")
    # what the search tried, as the hint says: kept with the entry, not lost with the artifact
    return FailedFormat(outcome.name, f"{message}; left out of the package", failure_hint(tried, plans),
                        tuple(t.to_dict() for t in outcome.fixes))
