"""The search's last stage: raise the layers that cost a failing gate most to float (or 16-bit
activations), NNCF-style, until the gates pass or the budget ends.

1. **Sensitivity, measured once.** The failing build is made again with the per-layer report on
   (``--explain``'s SQNR of each layer's activations against float); the ``CANDIDATES`` worst
   layers are the candidates (on a route with no report, CoreML's, the layers with weights the
   build lists, nearest the output first). Each is then built alone in float (16-bit activations where the
   route has no float layers) and judged by the failing gates' own numbers
   (``GateFailure.margin``), so a layer is ranked by what it does to the decision or metric that
   failed, not by its SQNR alone; ties keep the report's order.
2. **Greedy.** Layers are raised in that order, each on top of those kept so far (a layer that
   makes the failing gates worse is dropped again), until every gate passes. A tensor between
   two layers is quantized where one writes it and again where the next reads it, so a layer
   that helps nothing alone can help on top of its neighbour: every candidate is tried on top of
   the others, not only those that helped alone.
3. **Most integer.** Once the gates pass, each raised layer but the last (the one that made
   them pass) is tried back at int8; what still passes is kept.

Convert once, quantize many: the formats keep their float conversion and calibration ranges in
the work folder, so a try costs one quantization and one measurement. Every try is recorded.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import EdgekitError
from ..formats import Builder, BuildContext
from .candidate import Candidate, improves, restore as _restore, still_quantized
from .context import PackagingContext
from .gates import GateFailure, Remedies

CANDIDATES = 12  # layers whose effect on the failing gates is measured one by one
FLOAT, INT16 = "keep_float", "int16_layers"


def search_layers(builder: Builder, best: Any, run: PackagingContext,
                  remedies: Remedies) -> tuple[Any, list[dict[str, Any]]]:
    """The best build found (a ``Candidate``) and the record of every try (``--search-budget``
    bounds them)."""
    raised_to = [s for s, honoured in ((FLOAT, "keep_float"), (INT16, "int16")) if honoured in remedies.layers]
    if not raised_to:
        return best, []
    budget_s = run.options.search_budget_s
    search = _LayerSearch(builder, run, remedies, probe=raised_to[0], deadline=time.monotonic() + budget_s,
                          start=best)
    layers, ranked_on = _ranked_by_report(builder, best, run, remedies)
    if ranked_on is not None:
        search.attempts.append({"change": "per-layer report", "stage": "layer search", "plan": {},
                                "before": _margins(best.failures), "after": _margins(ranked_on.failures),
                                "kept": not ranked_on.failures})
        if not ranked_on.failures:  # the route's per-layer quantizer passes as it is (its context, report
            return ranked_on, search.attempts  # on, says how: litert-torch's route quantizes it per layer)
        # the tries are quantized as the report's build was (a format may quantize per-layer plans
        # with another tool than its plain build): they are compared with it, not with the first build
        search.start = replace(ranked_on, context=best.context)
    if not layers:
        return best, search.attempts
    found, plan = search.greedy(search.ranked(layers))
    if found is search.start:
        return best, search.attempts  # nothing helped: the artifact in the package is still the first build's
    if found.failures or not plan:
        return found, search.attempts
    return search.most_integer(found, plan), search.attempts


class _LayerSearch:
    """The layer search's state: what every try needs, the tries so far, and the time left."""

    def __init__(self, builder: Builder, run: PackagingContext, remedies: Remedies, probe: str, deadline: float,
                 start: Any) -> None:
        self.builder, self.run, self.progress = builder, run, run.progress
        self.remedies, self.probe, self.deadline = remedies, probe, deadline
        self.start = start  # the build the tries are compared with
        self.attempts: list[dict[str, Any]] = []

    def late(self) -> bool:
        return time.monotonic() > self.deadline

    def attempt(self, plan: dict[str, str], change: str, base: Any,
                accept: Callable[[Any, Any], bool] | None = None) -> Any:
        """One build with ``plan``; its artifact stays in the package when ``accept(candidate, base)``."""
        began = time.monotonic()
        with self.progress.step(f"search {self.builder.name}: {change}"):
            candidate = _try(self.builder, _with_plan(self.start.context, plan), base, self.run, self.remedies,
                             accept)
        record = {"change": change, "stage": "layer search", "plan": dict(plan), "before": _margins(base.failures)}
        record.update(after=None if candidate is None else _margins(candidate.failures),
                      kept=bool(accept and candidate is not None and accept(candidate, base)),
                      seconds=round(time.monotonic() - began, 2))
        self.attempts.append(record)
        return candidate

    def ranked(self, layers: list[str]) -> list[str]:
        """The candidate layers by what each alone, raised, does to the failing gates."""
        scored = []
        for rank, layer in enumerate(layers):
            if self.late():
                break
            candidate = self.attempt({layer: self.probe}, f"{_flag(self.probe)} {layer} (sensitivity)", self.start)
            if candidate is not None:
                scored.append((_quality(candidate, self.start), -rank, layer))
        order = [layer for *_, layer in sorted(scored, reverse=True)]
        if order:
            self.progress.say(f"search {self.builder.name}: layers by their effect on the failing gates: "
                              f"{', '.join(order)}")
        elif layers:
            why = "the search budget ran out first" if self.late() else "no layer could be rebuilt on its own"
            self.progress.warn(f"search {self.builder.name}: no layer ranked ({why}; {len(layers)} candidates)")
        return order

    def greedy(self, order: list[str]) -> tuple[Any, dict[str, str]]:
        """Layers raised in ``order``, each on top of those kept, until the gates pass."""
        best, plan = self.start, {}
        tentative: list[str] = []  # in the plan for being no worse, not for helping; least helpful last
        for layer in order + order:  # most helpful first; a second pass for what the first left out
            if not best.failures or self.late():
                break
            if layer in plan:
                continue
            # with the layer added; where that leaves no layer with weights in integers, the same
            # without one of the layers that did not help (least helpful first), or without all of them
            trials = [{**plan, layer: self.probe}]
            trials += [{**{k: v for k, v in plan.items() if k != drop}, layer: self.probe}
                       for drop in reversed(tentative)]
            if len(tentative) > 1:
                trials.append({**{k: v for k, v in plan.items() if k not in tentative}, layer: self.probe})
            for trial in trials:
                if self.late():
                    break
                candidate = self.attempt(trial, _describe(trial), best, improves)
                if candidate is None:
                    continue  # did not build, or nothing left in integers: the next variant
                if improves(candidate, best):
                    best, plan = candidate, trial
                    tentative = [t for t in tentative if t in trial]
                elif _quality(candidate, best) >= _quality(best, best):
                    # no worse: kept in the plan (a tensor between two layers needs both; NNCF keeps
                    # reverting in rank order too); the most-integer stage drops it if not needed
                    plan = trial
                    tentative = [t for t in tentative if t in trial] + [layer]
                break
        return best, plan

    def most_integer(self, best: Any, plan: dict[str, str]) -> Any:
        """Each raised layer but the last put back to int8 where the gates still pass."""
        for layer in list(plan)[:-1]:
            if self.late():
                break
            trial = {k: v for k, v in plan.items() if k != layer}
            candidate = self.attempt(trial, _describe(trial) + " (most integer)", best, _passes)
            if candidate is not None and not candidate.failures:
                best, plan = candidate, trial
        return best


def _ranked_by_report(builder: Builder, best: Any, run: PackagingContext,
                      remedies: Remedies) -> tuple[list[str], Any]:
    """The worst layers by SQNR in the failing configuration's per-layer report, and that build
    (built again with the report on; in the package only if it passes), or None."""
    context = best.context
    if "explain" not in remedies.layers:  # no per-layer report on this route: its weighted layers, the
        done = set(context.keep_float) | set(context.int16_layers)  # output's end first (the probes rank them)
        weighted = best.built.artifact.details.get("weighted_layers") or []
        return [layer for layer in reversed(weighted) if layer not in done][:CANDIDATES], None
    if context.sensitivity_npy is None:
        return [], None
    made = _try(builder, replace(context, explain_npy=context.sensitivity_npy), best, run, remedies, _passes)
    rows = (made.built.artifact.details.get("explain") if made is not None else None) or []
    done = set(context.keep_float) | set(context.int16_layers)
    layers: list[str] = []
    for row in rows:
        layer = row.get("layer")
        if layer and layer not in layers and layer not in done and row.get("sqnr_db") is not None:
            layers.append(layer)
    return layers[:CANDIDATES], made


def _try(builder: Builder, context: BuildContext, best: Any, run: PackagingContext, remedies: Remedies,
         accept: Callable[[Any, Any], bool] | None = None) -> Any:
    """One build and its measurement; the artifact in the staging tree is put back as it was
    unless ``accept(candidate, best)``. None when it did not build."""
    artifact_dir = run.staged / Path(best.built.artifact.path).parts[0]
    backup = best.context.workdir / f"{builder.name}.before-layer-try"
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(artifact_dir, backup)
    try:
        built = builder.build(context)
        measured = run.measure(built, builder, context) if still_quantized(built) else None
    except EdgekitError:
        measured = None
    if measured is None:
        _restore(backup, artifact_dir)
        return None
    candidate = Candidate(context, built, measured, run.check(builder.name, measured, remedies))
    if accept is not None and accept(candidate, best):
        shutil.rmtree(backup, ignore_errors=True)
    else:
        _restore(backup, artifact_dir)
    return candidate


def _passes(candidate: Any, best: Any) -> bool:
    return not candidate.failures


def _with_plan(context: BuildContext, plan: dict[str, str]) -> BuildContext:
    """``context`` with each layer of ``plan`` at its precision (on top of what it keeps already)."""
    floats = [layer for layer, precision in plan.items() if precision == FLOAT]
    int16 = [layer for layer, precision in plan.items() if precision == INT16]
    return replace(context, keep_float=tuple(dict.fromkeys([*context.keep_float, *floats])),
                   int16_layers=tuple(dict.fromkeys([*context.int16_layers, *int16])))


def _describe(plan: dict[str, str]) -> str:
    """The plan as flags, e.g. ``--keep-float conv2 conv3 --int16-activations conv1``."""
    parts = []
    for precision in (FLOAT, INT16):
        layers = [layer for layer, p in plan.items() if p == precision]
        if layers:
            parts.append(f"{_flag(precision)} {' '.join(layers)}")
    return " ".join(parts) or "plain int8"


def _flag(option: str) -> str:
    return "--int16-activations" if option == INT16 else "--keep-float"


def _score(after: list[GateFailure], before: list[GateFailure]) -> tuple[int, float]:
    """How good a build is by the gates that failed before: how many now pass, then the sum of
    their margins (a passing gate counts as 0, its floor)."""
    found = {f.key: f.margin for f in after}
    keys = [f.key for f in before]
    passing = sum(1 for key in keys if key not in found)
    total = sum(min(found.get(key, 0.0), 0.0) if math.isfinite(found.get(key, 0.0)) else -1e9 for key in keys)
    return passing, total


def _quality(candidate: Any, before: Any) -> tuple[int, float, float]:
    """``_score`` on the gates ``before`` failed, then the worst output SQNR: a decision metric
    moves in whole samples (one flip in 180 is 0.56%), so between two builds that flip as many
    decisions the one closer to float is the better step."""
    sqnr = min((c.sqnr_db for c in candidate.measured.outputs.values() if c.sqnr_db == c.sqnr_db),
               default=float("inf"))
    return (*_score(candidate.failures, before.failures), round(sqnr, 2))


def _margins(failures: list[GateFailure]) -> dict[str, Any]:
    return {"failed_gates": [f.what for f in failures],
            "gates": {f"{f.output} {f.cause}": round(f.margin, 4) if math.isfinite(f.margin) else None
                      for f in failures}}
