"""What each format came to, one line each, printed at the end of ``edgekit package``: shipped
(precision and the tightest gate margin), shipped as a float fallback, refused (why, and the
best configuration the search found with its margins) or not built, with the seconds each took.
With ``--format all`` some formats ship and some do not; this is where that reads at a glance."""

from __future__ import annotations

import math
from typing import Any

from ..validation_record import ValidationRecord, Verdict
from .verdict import undecided_line
from .search.trial import CONFIRMATION, SPEED, Trial


def lines(outcomes: list[Any], kept_failed: bool, left_out: list[Any] = (),
          validation: ValidationRecord | None = None) -> list[str]:
    """One line per format outcome (``packaging.each_format.FormatOutcome``); ``kept_failed``: failed
    artifacts stay in the package (``--allow-accuracy-drop``); ``left_out``: refused formats the
    package is written without (``partial.py``); ``validation``: the package's record, whose
    verdicts (a pass the sample cannot support: not decidable) the lines say, never decide again.
    Where a failed gate stops the package, the artifacts that passed are not shipped either: their
    lines say so."""
    stopped = not kept_failed and any(o.failures for o in outcomes if o.error is None and not any(o is r for r in left_out))
    shipped = "passes (not shipped: the package is refused)" if stopped else "shipped"
    found = []
    for outcome in outcomes:
        seconds = f"{outcome.seconds:.0f} s" if outcome.seconds else ""
        if outcome.error is not None:
            found.append(f"{outcome.name}: not built: {outcome.error.message}" + (f"; {seconds}" if seconds else ""))
            continue
        artifact = outcome.built.artifact
        search = ", ".join(x for x in (_simulated(artifact), _search(outcome.fixes)) if x)
        timing = ", ".join(x for x in (seconds, search) if x)
        timing = f" ({timing})" if timing else ""
        if outcome.name.endswith(("-float16", "-float32")):
            found.append(f"{outcome.name}: float fallback ({artifact.precision}), {shipped}")
        elif outcome.comparison is None:
            found.append(f"{outcome.name}: built, unverified {artifact.precision}: not measured here, no verdict"
                         f"{timing}")
        elif validation is not None and (record := validation.artifact(outcome.name)).verdict is Verdict.NOT_DECIDABLE:
            open_gates = list(record.undecided)
            found.append(f"{undecided_line(outcome.name, open_gates)}; {artifact.precision}, written{timing}")
        elif not outcome.failures and (slower := _slower_than_float(artifact)):
            found.append(f"{outcome.name}: {artifact.precision} passes ({_tightest(outcome.comparison)}) but {slower}: "
                         f"not INT8 delivered here (the side-by-side timing of every passing artifact, "
                         f"below, decides what the runtime runs){timing}")
        elif not outcome.failures:
            found.append(f"{outcome.name}: {shipped} {artifact.precision}; {_tightest(outcome.comparison)}"
                         f"{_against_float(outcome.comparison)}{timing}")
        else:
            what = ("kept though it failed (--allow-accuracy-drop)" if kept_failed
                    else "refused, left out of the package" if any(outcome is r for r in left_out) else "refused")
            margins = "; ".join(f"{f.output or 'artifact'} {f.cause} {_number(f.margin)}" for f in outcome.failures)
            found.append(f"{outcome.name}: {what}: {outcome.failures[0].what}; best configuration "
                         f"{_configuration(outcome)} (margins {margins}){timing}")
    return found


def _slower_than_float(artifact: Any) -> str:
    """How a mixed artifact timed against its float fallback where it was packaged, when it was not
    faster by the runtime's margin (``runtime.FASTER_THAN_FLOAT``); "" otherwise."""
    from ..device.runtime import FASTER_THAN_FLOAT

    speed = artifact.about.speed_vs_float or {}
    speedup = speed.get("speedup")
    if not isinstance(speedup, (int, float)) or speedup >= FASTER_THAN_FLOAT:
        return ""
    return f"runs {speedup:.2f}x its float fallback {speed.get('float_artifact')} here"


def _tightest(measured: Any) -> str:
    """The smallest margin above a gate's floor among the task metrics, else the worst SQNR."""
    margins = [t.margin for t in measured.tasks.values() if t.margin is not None and math.isfinite(t.margin)]
    if margins:
        return f"tightest gate margin {_number(min(margins))}"
    sqnr = min((c.sqnr_db for c in measured.outputs.values() if c.sqnr_db == c.sqnr_db), default=float("nan"))
    return f"worst SQNR {sqnr:.1f} dB" if math.isfinite(sqnr) else "exact"


def _against_float(measured: Any) -> str:
    """A quantized source's artifact against the float model given beside it (--float-reference)."""
    if measured.against_float is None:
        return ""
    tightest = _tightest(measured.against_float)
    if tightest.startswith("worst SQNR") or tightest == "exact":  # no task metric: SQNR says it all
        return f"; against the float reference: {tightest}"
    sqnr = min((c.sqnr_db for c in measured.against_float.outputs.values() if c.sqnr_db == c.sqnr_db),
               default=float("nan"))
    return f"; against the float reference: {tightest}, worst SQNR {sqnr:.1f} dB"


def _configuration(outcome: Any) -> str:
    context = outcome.context
    parts = []
    if context is not None:
        if context.plan:
            parts.append(context.plan.describe())
        parts += [t.change for t in outcome.fixes if not t.stage and t.kept]
    return " ".join(dict.fromkeys(parts)) or "plain INT8"


def _simulated(artifact: Any) -> str:
    """Where the plan came from: the shared search on the INT8 simulation (``details.simulation``)."""
    simulation = artifact.about.simulation or {}
    return f"the simulated plan ({simulation['tries']} simulated tries)" if simulation.get("plan") else ""


def _search(tries: tuple[Trial, ...]) -> str:
    count = sum(1 for t in tries if t.stage not in (CONFIRMATION, SPEED))  # builds, not decisions
    return f"search: {count} tr{'y' if count == 1 else 'ies'}" if count else ""


def _number(value: float | None) -> str:
    return "-inf" if value is None or not math.isfinite(value) else f"{value:+.3g}"
