"""``--auto-fix``: rebuild a format whose gates failed with the fixes its failures point to.

Each failure names its fixes (``gates.py``): keep the node that joins quantities into one
output (the Concat of box and score rows) in float where the route honours ``--keep-float``,
then the format's own rebuilds (``Builder.fixes``: e.g. 7-bit weights where this CPU's fused
int8 kernels saturate, percentile calibration where a range is dominated by outliers). They
are tried one at a time, in that order, each on top of the fixes kept so far.

A rebuild is judged by the gates that failed, on their own numbers (``GateFailure.margin``):
it is kept only when no gate that passed starts failing, no failing gate's metric gets worse,
and one of them improves (or passes). A rebuild that raises the output's SQNR while detection
recall falls is not kept. At most ``MAX_ATTEMPTS`` rebuilds per format, and a fix is never tried
twice, so the loop always ends. Every attempt is recorded in the manifest.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EdgekitError
from ..formats import Builder, BuildContext, BuildResult
from ..formats.building import Fix
from ..progress import Progress
from .gates import GateFailure, Remedies, check
from .validate import Judging, Measured, measure

MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Candidate:
    """A format's build, its measurement and the gates it fails, with the context that made it."""

    context: BuildContext
    built: BuildResult
    measured: Measured
    failures: list[GateFailure]


IMPROVEMENT = 1e-6  # margins are dB or fractions: anything above rounding noise counts


def improves(new: Candidate, old: Candidate) -> bool:
    """Whether ``new`` is better than ``old`` by the gates ``old`` failed, on their own metrics."""
    before = {f.key: f.margin for f in old.failures}
    after = {f.key: f.margin for f in new.failures}
    if any(key not in before for key in after):  # a gate that passed now fails
        return False
    if any(after[key] < before[key] - IMPROVEMENT for key in after):  # a failing gate got worse
        return False
    return len(after) < len(before) or any(after[key] > before[key] + IMPROVEMENT for key in after)


def auto_fix(builder: Builder, first: Candidate, staged: Path, data: Any, reference: dict[str, Any],
             judging: Judging, min_sqnr_db: float, producers: dict[str, str],
             progress: Progress, remedies: Remedies = Remedies()) -> tuple[Candidate, list[dict[str, Any]]]:
    """The best build found and the record of every attempt."""
    best, tried, attempts = first, set(), []
    for _ in range(MAX_ATTEMPTS):
        if not best.failures:
            break
        fix, context = _next_fix(best, tried)
        if fix is None or context is None:
            break
        tried.add(fix.flag)
        artifact_dir = staged / Path(best.built.artifact.path).parts[0]
        backup = best.context.workdir / f"{builder.name}.before-fix"
        shutil.rmtree(backup, ignore_errors=True)
        shutil.copytree(artifact_dir, backup)
        record: dict[str, Any] = {"change": fix.flag, "before": _numbers(best)}
        try:
            with progress.step(f"auto-fix {builder.name}: rebuilding with {fix.flag}"):
                built = builder.build(context)
                measured = measure(built, builder, staged, data, reference, judging,
                                   as_quantized=builder.judged_as_quantized(context))
        except EdgekitError as exc:
            record.update(after=None, kept=False, error=exc.message)
            _restore(backup, artifact_dir)
            attempts.append(record)
            progress.warn(f"auto-fix {builder.name}: {fix.flag} failed: {exc.message}")
            continue
        if measured is None:
            _restore(backup, artifact_dir)
            break
        candidate = Candidate(context, built, measured,
                              check(builder.name, measured, min_sqnr_db, producers, judging.kinds, remedies))
        record["after"] = _numbers(candidate)
        record["kept"] = improves(candidate, best)
        if record["kept"]:
            best = candidate
            shutil.rmtree(backup, ignore_errors=True)
        else:
            _restore(backup, artifact_dir)
        attempts.append(record)
        verdict = "passes" if not candidate.failures else f"{len(candidate.failures)} gate(s) still fail"
        progress.say(f"auto-fix {builder.name}: {fix.flag}: {_gate_change(record)}, {verdict}"
                     f"{'' if record['kept'] else ' (not kept: the failing gates did not improve)'}")
    return best, attempts


def _next_fix(best: Candidate, tried: set[str]) -> tuple[Fix | None, BuildContext | None]:
    for failure in best.failures:
        for fix in failure.fixes:
            if fix.flag in tried:
                continue
            context = fix.apply(best.context)
            if context is not None:
                return fix, context
            tried.add(fix.flag)
    return None, None


def _numbers(candidate: Candidate) -> dict[str, Any]:
    """What the manifest records before and after a fix: failed gates, each with its own margin,
    and the worst SQNR (slices included) for reference."""
    worst = min((min(c.sqnr_db, c.worst_slice["sqnr_db"] if c.worst_slice else float("inf"))
                 for c in candidate.measured.outputs.values()), default=float("inf"))
    return {"failed_gates": [f.what for f in candidate.failures],
            "gates": {_gate_name(f): round(f.margin, 4) if math.isfinite(f.margin) else None
                      for f in candidate.failures},
            "worst_sqnr_db": round(worst, 2) if math.isfinite(worst) else None}


def _gate_name(failure: GateFailure) -> str:
    where = failure.output if failure.output is not None else "artifact"
    rows = f" rows {failure.channels[0]}..{failure.channels[1] - 1}" if failure.channels else ""
    return f"{where} {failure.cause}{rows}"


def _gate_change(record: dict[str, Any]) -> str:
    """The failing gates' margins before -> after (what decided), e.g. ``output0 task -0.61 -> -0.02``."""
    before = record["before"]["gates"]
    after = (record.get("after") or {}).get("gates") or {}
    shown = [f"{name} {_margin(value)} -> {_margin(after[name]) if name in after else 'passes'}"
             for name, value in before.items()]
    shown += [f"{name} now fails ({_margin(value)})" for name, value in after.items() if name not in before]
    return "margin vs floor: " + "; ".join(shown) if shown else "no failing gates"


def _margin(value: float | None) -> str:
    return "-inf" if value is None else f"{value:+.3g}"


def _restore(backup: Path, artifact_dir: Path) -> None:
    shutil.rmtree(artifact_dir, ignore_errors=True)
    shutil.move(str(backup), str(artifact_dir))
