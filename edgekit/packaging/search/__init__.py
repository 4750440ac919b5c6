"""The search (on by default; ``--no-auto-fix`` turns it off): a format whose gates failed is
rebuilt with the fixes its failures name (``fixes.py``), then with a precision plan that takes
blocks and layers out of int8 (``layers.py``; among plans that pass, the fastest here), judged
on half of the validation samples and confirmed on the other half (``confirmation``).

Tries build into scratch (``trial.py``) and are quick builds (``BuildContext.trial``); the
configuration kept is built again, in full, into the package and measured on all samples. One
budget (``budget.py``) bounds the whole search of a format, the rebuild included. Converter steps
share one child per interpreter (``worker_reuse``): a try costs its quantization, not another
start of TensorFlow or ONNX Runtime."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...formats import Builder, BuildContext
from ...formats.plan import FLOAT, INT16, PrecisionPlan
from ...conversion.worker_reuse import reusing
from ..context import PackagingContext
from ..gates import GateFailure, Remedies
from .budget import Budget
from .candidate import Candidate, improves, still_quantized
from .fixes import named_fixes
from .layers import fastest_plan, search_layers
from .mode import SearchMode
from .trial import CONFIRMATION, Trial, TrialRunner, margins


def search(builder: Builder, first: Candidate, run: PackagingContext,
           mode: SearchMode) -> tuple[Candidate, tuple[Trial, ...]]:
    """The search for a build that passes (``first`` failed), and the record of every try; which
    search, its remedies and its bounds are ``mode``'s. Every build it makes is counted in its
    budget (``Budget.builds``): a caller running rounds reads the count there."""
    budget = mode.budget(run)
    with reusing():  # the tries share converter children (already so inside a packaging run: it shares them all)
        found = _tries(builder, first, run, mode.remedies, budget, mode.fixed)
    if found.best is None:  # the package still holds the first build: tries built into scratch
        return first, _with_budget(found.trials, budget)
    return _rebuild(builder, first, run, mode.remedies, budget, found)


@dataclass
class _Found:
    """What the tries found, for the rebuild into the package."""

    started: Candidate | None  # the first build, judged as the tries were (None: no try could be judged)
    best: Candidate | None  # None: nothing better than the first build to rebuild
    halves: Any  # the search and unseen halves of the validation samples (None: judged on all)
    trials: list[Trial]
    fallbacks: list[BuildContext] = field(default_factory=list)  # what to rebuild if ``best`` fails on all samples


def _tries(builder: Builder, first: Candidate, run: PackagingContext, remedies: Remedies,
           budget: Budget, fixed: PrecisionPlan | None = None) -> _Found:
    """The search's tries and what they found."""
    from .holdout import split

    data, progress = run.data, run.progress
    halves = split(data, run.reference, run.search.min_holdout_samples)
    if halves is None:
        progress.warn(f"{builder.name}: {data.evaluation_count} validation samples are too few to keep some "
                      "unseen by the search: its result is judged on the samples it was chosen by (give more "
                      "--eval data)")
    judged = run if halves is None else run.on(halves.search, halves.search_reference)
    layers = data.evaluation_count >= run.search.min_layer_search_samples
    if not layers and remedies.builds(INT16, FLOAT):
        progress.warn(f"{builder.name}: no layer search on {data.evaluation_count} validation samples: its many tries "
                      f"need {run.search.min_layer_search_samples}+ (half to choose by, half to confirm on), or the "
                      "layers it keeps would fit the samples rather than the model (give --eval with more samples)")
    trial_context = replace(first.context, trial=True, explain_npy=None)
    on_half = judged.measure(first.built, builder, first.context)
    if on_half is None:
        progress.warn(f"{builder.name}: no search: nothing on this machine runs its artifact to judge a try by")
        return _Found(None, None, None, [])
    started = Candidate(trial_context, first.built, on_half, judged.check(builder.name, on_half, remedies))
    if halves is not None and not started.failures:
        # the failure is within what one half's sampling hides: tries judged on that half would all
        # "pass"; judged on every sample, with no unseen half left to confirm on
        progress.warn(f"{builder.name}: the gates fail on all {data.evaluation_count} validation samples but pass on "
                      "the half the search would choose by (the margin is within sampling noise): the search "
                      "judges its tries on every sample, none kept unseen")
        halves, judged = None, run
        started = Candidate(trial_context, first.built, first.measured, first.failures)
    runner = TrialRunner(builder, judged, remedies, budget, first.context.workdir)
    try:
        best = named_fixes(runner, started)
        if best.failures and layers and remedies.builds(INT16, FLOAT) and budget.allows_try():
            best = search_layers(runner, best, remedies, fixed)
        elif best is not started and best.context.plan != started.context.plan:
            best = fastest_plan(runner, best, remedies, started.context.plan)  # a named fix raised a layer
    finally:
        runner.close()
    trials = runner.trials
    if not trials:
        nothing = _nothing_to_try(started, remedies, layers, budget, run.search.min_layer_search_samples)
        progress.warn(f"{builder.name}: the search found nothing to try: {nothing}")
    elif not budget.allows_try() and best.failures:
        progress.warn(f"search {builder.name}: the search budget ({budget.describe()}) ended it "
                      f"after {len(trials)} tries ({budget.ended_by()})")
    if best is started or not improves(best, started):
        return _Found(started, None, halves, trials)
    return _Found(started, best, halves, trials,
                  _fallbacks(best, runner.passed, trials, remedies, run.search.max_fallbacks))


def _fallbacks(best: Candidate, passed: list[Candidate], trials: list[Trial], remedies: Remedies,
               most: int) -> list[BuildContext]:
    """What to rebuild in place of ``best`` if it fails on all samples, at most ``most`` (the plan
    kept is chosen on half the samples; the most-integer stage walks from broad plans to narrow
    ones, so going back raises layers):
    its 16-bit layers in float where the route runs them and no try of that plan failed (the
    same layers, closer to float), then the other plans that passed, found last first."""
    plan = best.context.plan
    failed = {t.plan.describe() for t in trials if t.plan is not None and (t.after is None or t.after["gates"])}
    seen = {plan.describe()}
    found: list[BuildContext] = []
    int16 = [layer for layer, precision in plan.layers.items() if precision == INT16]
    if int16 and remedies.floats:
        precise = plan.raised(int16, FLOAT)
        if precise.describe() not in failed:
            seen.add(precise.describe())
            found.append(best.context.with_plan(precise))
    for candidate in reversed(passed):
        key = candidate.context.plan.describe()
        if candidate is best or key in seen:
            continue
        seen.add(key)
        found.append(candidate.context)
    return found[:most]


def _rebuild(builder: Builder, first: Candidate, run: PackagingContext, remedies: Remedies, budget: Budget,
             found: _Found) -> tuple[Candidate, tuple[Trial, ...]]:
    """The configuration kept, built again in full into the package and judged on every sample;
    where it fails there (its half of the samples hid a flip or two), the next plan that passed
    is rebuilt in its place (once even past the budget, then while it covers a rebuild;
    ``SearchSettings.max_fallbacks``)."""
    progress, trials = run.progress, found.trials
    assert found.best is not None and found.started is not None  # ``search`` rebuilds only what was found
    kept: Candidate | None = None
    for attempt, chosen in enumerate([found.best.context, *found.fallbacks]):
        if kept is not None:
            # one rebuild in place of a kept plan that failed may overrun the budget (said below):
            # a search that found plans that pass does not end on the one that fails
            if attempt > 1 and budget.left() < budget.rebuild_estimate():
                progress.warn(f"search {builder.name}: no time left in its budget ({budget.describe()}) to rebuild "
                              f"another plan ({chosen.plan.describe()}); {budget.ended_by()}")
                break
            progress.say(f"search {builder.name}: the plan kept fails on all {run.data.evaluation_count} samples "
                         f"({'; '.join(f.what for f in kept.failures)}); rebuilding the next plan in its place "
                         f"({chosen.plan.describe()})")
        rebuilt = _rebuild_one(builder, first, run, remedies, found, chosen, budget)
        if rebuilt is None:  # nothing measured it; what the package holds is the last build measured
            break
        kept = rebuilt  # the package holds the build made last: it is the one judged and returned
        if not rebuilt.failures:
            break
        trials.append(Trial(f"all samples: {rebuilt.context.plan.describe() or 'no layer raised'}", CONFIRMATION,
                            rebuilt.context.plan, before=margins(found.best), after=margins(rebuilt), kept=False,
                            extra={"samples": run.data.evaluation_count}))
    if budget.left() < 0:
        progress.warn(f"search {builder.name}: took {budget.spent():.0f} s, over its budget ({budget.describe()}): " + ("the plan kept failed on all samples and was rebuilt in another's place"
                                             if any(t.change.startswith("all samples: ") for t in trials)
                                             else "the rebuild of the plan kept took longer than its estimate"))
    return (first if kept is None else kept), _with_budget(trials, budget)


def _rebuild_one(builder: Builder, first: Candidate, run: PackagingContext, remedies: Remedies, found: _Found,
                 chosen: BuildContext, budget: Budget) -> Candidate | None:
    """One configuration built in full into the package, judged on every sample and, where the
    search judged on half, tested for fitting only that half; None when nothing here measures it."""
    # the report stays on where the kept build had it (a route may quantize per layer because of it)
    context = replace(chosen, trial=False, package_dir=first.context.package_dir,
                      explain_npy=first.context.explain_npy or chosen.explain_npy)
    with run.progress.step(f"search {builder.name}: building the configuration kept ({context.plan.describe()})"):
        try:
            built = builder.build(context)
        finally:
            budget.rebuilds += 1
    whole = run.measure(built, builder, context)
    if whole is None:
        return None
    failures = run.check(builder.name, whole, remedies)
    if found.halves is not None:
        assert found.started is not None
        failures += _held_out_check(builder, run, found.halves, found.started,
                                    Candidate(context, built, whole, failures), found.trials)
    return Candidate(context, built, whole, failures)


def _with_budget(trials: list[Trial], budget: Budget) -> tuple[Trial, ...]:
    """Every try, the budget as spent on the last (the manifest's record of the search)."""
    if not trials:
        return ()
    return (*trials[:-1], replace(trials[-1], budget=budget.to_dict()))


def _held_out_check(builder: Builder, run: PackagingContext, halves: Any, started: Candidate, kept: Candidate,
                    trials: list[Trial]) -> list[GateFailure]:
    """The kept configuration judged on all samples (``kept.failures``), then tested for fitting
    only the half the search chose by (``confirmation``): a gate whose unseen half is worse than
    sampling noise allows is a failure of its own (cause "overfit"); a difference within noise is
    not. Recorded as the last trial."""
    from .confirmation import confirm

    data = run.data
    search_rows, unseen_rows = np.asarray(halves.search.rows), np.asarray(halves.unseen.rows)
    test = confirm(kept.measured, run.reference, search_rows, unseen_rows, run.judging, run.options.min_sqnr_db,
                   data.targets_y, data.labelled_output, run.search)
    if test is None:
        return []
    failures = [GateFailure(builder.name, gate.rsplit(" ", 1)[0] or None, "overfit",
                            f"{gate}: margin {test.search[gate]:+.3g} on the {len(search_rows)} samples the search "
                            f"chose by but {test.unseen[gate]:+.3g} on the {len(unseen_rows)} it never judged by "
                            f"(one-sided p = {p:.3g} < {test.threshold:.3g}): the configuration fits the samples it "
                            "was chosen on, not the model", (), margin=test.unseen[gate] - test.search[gate])
                for gate, p in test.overfit.items()]
    trials.append(Trial("held-out check", CONFIRMATION, before=margins(started), after=margins(kept),
                        kept=not failures and not kept.failures,
                        extra={"samples": len(unseen_rows), "test": test.to_dict()}))
    differences = ", ".join(f"{g} {test.search[g]:+.3g} vs {test.unseen[g]:+.3g} (p {test.p_values[g]:.2f})"
                            for g in test.p_values)
    run.progress.say(f"search {builder.name}: search half vs the {len(unseen_rows)} samples no try was judged by: "
                     f"{differences}: " + ("the unseen half is worse than sampling noise allows (overfit)" if failures
                                           else "within sampling noise"))
    return failures


def _nothing_to_try(started: Candidate, remedies: Remedies, layers: bool, budget: Budget, min_samples: int) -> str:
    """Why the search made no try: the fixes the failures name do not apply, and no layer search."""
    named = sorted({flag for f in started.failures for flag in f.flags})
    fixes = (f"none of the fixes the failures name ({', '.join(named)}) applies to this build" if named
             else "the failed gates name no fix for this format")
    if not remedies.builds(INT16, FLOAT):
        search = "and this format's route honours no per-layer precision (--keep-float, --int16-activations)"
    elif not layers:
        search = f"and the layer search needs {min_samples}+ validation samples"
    elif not budget.allows_try():
        search = f"and its budget ({budget.describe()}) leaves no room for a try and the rebuild"
    else:
        search = "and the layer search had no layer to try"
    return f"{fixes}, {search}"


__all__ = ["Budget", "Candidate", "improves", "search", "still_quantized"]
