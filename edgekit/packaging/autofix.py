"""The search (on by default; ``--no-auto-fix`` turns it off): rebuild a format whose gates
failed with the fixes its failures point to, then with per-layer precision (``layer_search``),
judged on half of the validation samples and confirmed on the other half (``holdout``).

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
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EdgekitError
from ..formats import Builder, BuildContext
from ..formats.building import Fix
from ..worker_reuse import reusing
from .candidate import Candidate, improves, restore as _restore, still_quantized
from .context import PackagingContext
from .gates import GateFailure, Remedies
from .layer_search import search_layers

MAX_ATTEMPTS = 3
# the layer search's many tries choose among configurations by their numbers: with fewer validation
# samples than this (the verdict's own "enough evidence" rule) it would fit the samples, not the model
LAYER_SEARCH_MIN_SAMPLES = 50


def search(builder: Builder, first: Candidate, run: PackagingContext,
           remedies: Remedies = Remedies()) -> tuple[Candidate, list[dict[str, Any]]]:
    """The search for a build that passes (``first`` failed). Tries are quick builds
    (``BuildContext.trial``) judged on half of the validation samples; the configuration kept is
    built again in full, measured on all of them, and must pass on the half no try was judged on
    (``holdout``). Its converter steps share one child per interpreter (``worker_reuse``): a try
    then costs its quantization, not another start of TensorFlow or ONNX Runtime."""
    with reusing():
        return _search(builder, first, run, remedies)


def _search(builder: Builder, first: Candidate, run: PackagingContext,
            remedies: Remedies) -> tuple[Candidate, list[dict[str, Any]]]:
    from .holdout import split

    data, progress = run.data, run.progress
    halves = split(data, run.reference)
    if halves is None:
        progress.warn(f"{builder.name}: {data.evaluation_count} validation samples are too few to keep some "
                      "unseen by the search: its result is judged on the samples it was chosen by (give more "
                      "--eval data)")
    judged = run if halves is None else run.on(halves.search, halves.search_reference)
    layers = data.evaluation_count >= LAYER_SEARCH_MIN_SAMPLES
    if not layers and {"int16", "keep_float"} & set(remedies.layers):
        progress.warn(f"{builder.name}: no layer search on {data.evaluation_count} validation samples: its many tries "
                      f"need {LAYER_SEARCH_MIN_SAMPLES}+ (half to choose by, half to confirm on), or the layers it "
                      "keeps would fit the samples rather than the model (give --eval with more samples)")
    trial_context = replace(first.context, trial=True, explain_npy=None)
    on_half = judged.measure(first.built, builder, first.context)
    if on_half is None:
        return first, []
    started = Candidate(trial_context, first.built, on_half, judged.check(builder.name, on_half, remedies))
    best, attempts = auto_fix(builder, started, judged, remedies, layers=layers)
    if not attempts:
        progress.warn(f"{builder.name}: the search found nothing to try: {_nothing_to_try(started, remedies, layers)}")
    if best is started:
        return first, attempts
    if not improves(best, started):  # a try replaced the artifact without beating the first build
        with progress.step(f"search {builder.name}: building the first configuration again"):
            return replace(first, built=builder.build(first.context)), attempts
    # the report stays on where the kept build had it (a route may quantize per layer because of it)
    context = replace(best.context, trial=False, explain_npy=first.context.explain_npy or best.context.explain_npy)
    with progress.step(f"search {builder.name}: building the configuration kept"):
        built = builder.build(context)
    whole = run.measure(built, builder, context)
    if whole is None:
        return first, attempts
    failures = run.check(builder.name, whole, remedies)
    if halves is not None:
        failures += _held_out_check(builder, run, halves, started, Candidate(context, built, whole, failures),
                                    attempts)
    return Candidate(context, built, whole, failures), attempts


def _held_out_check(builder: Builder, run: PackagingContext, halves: Any, started: Candidate, kept: Candidate,
                    attempts: list[dict[str, Any]]) -> list[GateFailure]:
    """The kept configuration judged on all samples (``kept.failures``), then tested for fitting
    only the half the search chose by (``confirmation``): a gate whose unseen half is worse than
    sampling noise allows is a failure of its own (cause "overfit"); a difference within noise is
    not. Recorded in ``attempts`` as the last entry."""
    from .confirmation import confirm

    data = run.data
    search_rows, unseen_rows = np.asarray(halves.search.rows), np.asarray(halves.unseen.rows)
    test = confirm(kept.measured, run.reference, search_rows, unseen_rows, run.judging, run.options.min_sqnr_db,
                   data.targets_y, data.labelled_output)
    if test is None:
        return []
    overfit = test.overfit
    failures = [GateFailure(builder.name, gate.rsplit(" ", 1)[0] or None, "overfit",
                            f"{gate}: margin {test.search[gate]:+.3g} on the {len(search_rows)} samples the search "
                            f"chose by but {test.unseen[gate]:+.3g} on the {len(unseen_rows)} it never judged by "
                            f"(one-sided p = {p:.3g} < {test.threshold:.3g}): the configuration fits the samples it "
                            "was chosen on, not the model", (), margin=test.unseen[gate] - test.search[gate])
                for gate, p in overfit.items()]
    attempts.append({"change": "held-out check", "stage": "confirmation", "samples": len(unseen_rows),
                     "before": _numbers(started), "after": _numbers(kept), "test": test.to_dict(),
                     "kept": not failures and not kept.failures})
    differences = ", ".join(f"{g} {test.search[g]:+.3g} vs {test.unseen[g]:+.3g} (p {test.p_values[g]:.2f})"
                            for g in test.p_values)
    run.progress.say(f"search {builder.name}: search half vs the {len(unseen_rows)} samples no try was judged by: "
                     f"{differences}: " + ("the unseen half is worse than sampling noise allows (overfit)" if failures
                                           else "within sampling noise"))
    return failures


def _nothing_to_try(started: Candidate, remedies: Remedies, layers: bool) -> str:
    """Why the search made no try: the fixes the failures name do not apply, and no layer search."""
    named = sorted({flag for f in started.failures for flag in f.flags})
    fixes = (f"none of the fixes the failures name ({', '.join(named)}) applies to this build" if named
             else "the failed gates name no fix for this format")
    if not {"int16", "keep_float"} & set(remedies.layers):
        search = "and this format's route honours no per-layer precision (--keep-float, --int16-activations)"
    elif not layers:
        search = f"and the layer search needs {LAYER_SEARCH_MIN_SAMPLES}+ validation samples"
    else:
        search = "and the layer search had no layer to try"
    return f"{fixes}, {search}"


def auto_fix(builder: Builder, first: Candidate, run: PackagingContext, remedies: Remedies = Remedies(),
             layers: bool = True) -> tuple[Candidate, list[dict[str, Any]]]:
    """The best build found and the record of every attempt: the fixes the failures name, then
    the layer search."""
    best, tried, attempts = first, set(), []
    for _ in range(MAX_ATTEMPTS):
        if not best.failures:
            break
        fix, context = _next_fix(best, tried)
        if fix is None or context is None:
            break
        tried.add(fix.flag)
        found, record = _try_fix(builder, best, fix, context, run, remedies)
        if found is None and "error" not in record:
            break  # nothing here can measure it
        attempts.append(record)
        if found is not None and record["kept"]:
            best = found
    if best.failures and layers and {"int16", "keep_float"} & set(remedies.layers):
        best, searched = search_layers(builder, best, run, remedies)
        attempts += searched
    return best, attempts


def _try_fix(builder: Builder, best: Candidate, fix: Fix, context: BuildContext, run: PackagingContext,
             remedies: Remedies) -> tuple[Candidate | None, dict[str, Any]]:
    """One named fix built and measured; its artifact stays in the package only when it improves
    the failing gates (``improves``). The candidate (None: it failed or was not measured) and its record."""
    progress = run.progress
    artifact_dir = run.staged / Path(best.built.artifact.path).parts[0]
    backup = best.context.workdir / f"{builder.name}.before-fix"
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(artifact_dir, backup)
    record: dict[str, Any] = {"change": fix.flag, "before": _numbers(best)}
    began = time.monotonic()
    try:
        with progress.step(f"search {builder.name}: {fix.flag}"):
            built = builder.build(context)
            if not still_quantized(built):
                raise EdgekitError(f"{fix.flag} leaves no layer in integers ({built.artifact.precision})")
            measured = run.measure(built, builder, context)
    except EdgekitError as exc:
        record.update(after=None, kept=False, error=exc.message)
        _restore(backup, artifact_dir)
        progress.warn(f"search {builder.name}: {fix.flag} failed: {exc.message}")
        return None, record
    if measured is None:
        _restore(backup, artifact_dir)
        record.update(after=None, kept=False)
        return None, record
    candidate = Candidate(context, built, measured, run.check(builder.name, measured, remedies))
    record.update(after=_numbers(candidate), seconds=round(time.monotonic() - began, 2),
                  kept=improves(candidate, best))
    if record["kept"]:
        shutil.rmtree(backup, ignore_errors=True)
    else:
        _restore(backup, artifact_dir)
    verdict = "passes" if not candidate.failures else f"{len(candidate.failures)} gate(s) still fail"
    progress.say(f"search {builder.name}: {fix.flag}: {_gate_change(record)}, {verdict}"
                 f"{'' if record['kept'] else ' (not kept: the failing gates did not improve)'}")
    return candidate, record


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


__all__ = ["Candidate", "auto_fix", "improves", "search"]
