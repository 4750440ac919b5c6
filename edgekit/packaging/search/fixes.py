"""The search's first stage: the fixes a failure names (``gates.py``), tried one at a time.

Keep the node that joins quantities into one output (the Concat of box and score rows) in float
where the route honours ``--keep-float``, then the format's own rebuilds (``Builder.fixes``:
7-bit weights where this CPU's fused int8 kernels saturate, percentile calibration where a
range is dominated by outliers), each on top of the fixes kept so far. A rebuild is kept only
when it improves the failing gates on their own numbers (``candidate.improves``). At most
``SearchSettings.max_fix_attempts`` rebuilds, and a fix is never tried twice."""

from __future__ import annotations

from ...formats import BuildContext
from ...formats.building import Fix
from .candidate import Candidate, improves
from .trial import NAMED_FIX, TrialRunner


def named_fixes(runner: TrialRunner, best: Candidate) -> Candidate:
    """The best build after the named fixes; every try is in ``runner.trials``."""
    tried: set[str] = set()
    progress, name = runner.run.progress, runner.builder.name
    for _ in range(runner.run.search.max_fix_attempts):
        if not best.failures or not runner.budget.allows_try():
            break
        fix, context = _next_fix(best, tried)
        if fix is None or context is None:
            break
        tried.add(fix.flag)
        candidate, trial = runner.attempt(fix.flag, context, best, NAMED_FIX)
        if candidate is None:
            progress.warn(f"search {name}: {fix.flag} failed: {trial.error}")
            continue
        trial.kept = improves(candidate, best)
        verdict = "passes" if not candidate.failures else f"{len(candidate.failures)} gate(s) still fail"
        progress.say(f"search {name}: {fix.flag}: {gate_change(trial.before, trial.after)}, {verdict}"
                     f"{'' if trial.kept else ' (not kept: the failing gates did not improve)'}")
        if trial.kept:
            best = candidate
    return best


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


def gate_change(before: dict, after: dict | None) -> str:
    """The failing gates' margins before -> after (what decided), e.g. ``output0 task -0.61 -> -0.02``."""
    old = before["gates"]
    new = (after or {}).get("gates") or {}
    shown = [f"{name} {_margin(value)} -> {_margin(new[name]) if name in new else 'passes'}"
             for name, value in old.items()]
    shown += [f"{name} now fails ({_margin(value)})" for name, value in new.items() if name not in old]
    return "margin vs floor: " + "; ".join(shown) if shown else "no failing gates"


def _margin(value: float | None) -> str:
    return "-inf" if value is None else f"{value:+.3g}"
