"""The search's last stage: the layers that cost a failing gate most leave int8, in whole blocks
first (16-bit activations before float where the format's runtimes run them fast; float alone
elsewhere), until the gates pass or the budget ends; then as many layers as still pass go back
to int8, the heaviest first (``cost.py``: what a layer costs in speed).

1. **Where.** The failing build is made again with the per-layer report on (``--explain``'s
   SQNR of each layer's activations against float); its worst layers lead. On a route with no
   report (CoreML's), the layers with weights the build lists, nearest the output first.
2. **Blocks** (``blocks.py``): the worst layers together, path scopes (attention, residual and
   recurrent blocks, heads), the output and input ends; each raised to 16-bit activations
   where the route runs them, then to float. A block that passes ends this stage; one that
   improves the failing gates is kept and the next is tried on top of it.
3. **Single layers**, NNCF-style, where no block passed: each candidate raised alone and
   ranked by what it does to the failing gates (``GateFailure.margin``), then raised in that
   order on top of each other (a tensor between two layers is quantized where one writes it
   and where the next reads it: a layer that helps nothing alone can help with its neighbour).
4. **Most integer.** Once the gates pass, the raised layers go back to int8 in halves, then
   quarters, down to one at a time (least costly first); what still passes is kept.
5. **Fastest.** The layers left raised are tried at the route's other precision (float for
   16-bit activations, and back); the plans that pass are timed here against each other, and
   the fastest is kept (``fastest``).

Every try is a ``Trial`` (``trial.py``); the budget (``budget.py``) bounds them all.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from ...formats.plan import FLOAT, INT16, PrecisionPlan
from ..gates import GateFailure, Remedies
from .blocks import blocks
from .candidate import Candidate, improves
from .cost import LayerCosts
from .trial import LAYERS, SPEED, Trial, TrialRunner, margins

SPEED_ROUNDS, SPEED_RUNS = 5, 5  # interleaved rounds of calls when passing plans are timed against each other


def search_layers(runner: TrialRunner, best: Candidate, remedies: Remedies,
                  fixed: PrecisionPlan | None = None) -> Candidate:
    """The best build found; every try is in ``runner.trials``; ``fixed``: the layers never put
    back to int8 (default: those ``best`` raises). 16-bit activations are a probe only where the
    format's runtimes run them fast (``Builder.fast_int16_activations``) or its route keeps no
    layer in float."""
    probes = [p for p in (INT16, FLOAT) if p in remedies.layers]
    if FLOAT in probes and not runner.builder.fast_int16_activations:
        probes = [FLOAT]
    if not probes:
        return best
    search = _LayerSearch(runner, probes, best, lowerable_from=fixed)
    worst, ordered = search.where(remedies)
    if not search.start.failures:  # the report's build passes as it is (a route quantizing per layer)
        return search.start
    found = search.blocks(worst, ordered)
    if found.failures and worst and not search.late():
        single = search.singles(search.start, worst)
        found = single if _quality(single, search.start) >= _quality(found, search.start) else found
    if not found.failures:
        found = search.fastest(search.most_integer(found, worst))
    return found


def fastest_plan(runner: TrialRunner, found: Candidate, remedies: Remedies, user_plan: PrecisionPlan) -> Candidate:
    """A passing build from the named fixes, timed against its raised layers at the route's other
    precision (``_LayerSearch.fastest``); ``user_plan`` (the user's own layers) is never changed."""
    probes = [p for p in (INT16, FLOAT) if p in remedies.layers]
    if len(probes) < 2 or found.failures:
        return found
    return _LayerSearch(runner, probes, found, base=user_plan).fastest(found)


class _LayerSearch:
    def __init__(self, runner: TrialRunner, probes: list[str], start: Candidate,
                 base: PrecisionPlan | None = None, lowerable_from: PrecisionPlan | None = None) -> None:
        self.runner, self.probes, self.start = runner, probes, start
        # what the user (or a named fix) already raised: never lowered
        self.base = start.context.plan if base is None else base
        # what the most-integer stage never lowers: the base, or less where a search goes on from
        # its own earlier plan (the simulation's rounds), whose layers may then go back to int8
        self.fixed = self.base if lowerable_from is None else lowerable_from
        self.inputs = set(runner.run.data.evaluation)  # model inputs: a report may name them, no op computes them
        self.say, self.warn = runner.run.progress.say, runner.run.progress.warn
        self.name = runner.builder.name
        self.seen: dict[str, Candidate | None] = {}  # plan -> its build: a plan is built once per search
        # what leaving each layer out of int8 costs, its boundaries with int8 layers included
        self.costs = LayerCosts(runner.run.layer_costs, runner.run.layer_links, runner.run.search.boundary_cost)

    def late(self, reserved: int = 0) -> bool:
        return not self.runner.budget.allows_try(reserved)

    def attempt(self, plan: PrecisionPlan, base: Candidate, accept: Callable[[Candidate, Candidate], bool],
                note: str = "") -> Candidate | None:
        """One build of ``plan``; recorded as kept when ``accept(candidate, base)``."""
        key = json.dumps(plan.to_dict(), sort_keys=True)
        if key in self.seen:
            return self.seen[key]
        label = plan.describe() + (f" ({note})" if note else "")
        candidate, trial = self.runner.attempt(label, self.start.context.with_plan(plan), base, LAYERS, plan)
        trial.kept = candidate is not None and accept(candidate, base)
        self.seen[key] = candidate
        return candidate

    def where(self, remedies: Remedies) -> tuple[list[str], list[str]]:
        """The worst layers (worst first) and every layer the route can raise (input to output);
        with the per-layer report, its build becomes the start (a route may quantize per-layer
        plans with another tool than its plain build: tries are compared with that)."""
        context = self.start.context
        if "explain" not in remedies.layers or context.sensitivity_npy is None:
            weighted = [layer for layer in self.start.built.artifact.about.weighted_layers if layer not in self.base]
            return list(reversed(weighted))[:self.runner.run.search.candidates], weighted
        made, trial = self.runner.attempt("per-layer report", replace(context, explain_npy=context.sensitivity_npy),
                                          self.start, LAYERS, self.base, typical=False)
        trial.kept = made is not None and not made.failures
        rows = () if made is None else made.built.artifact.about.explain
        if made is not None:
            self.start = replace(made, context=context)
        reported = list(dict.fromkeys(row["layer"] for row in rows if row.get("layer") and row.get("sqnr_db") is not None
                                      and row["layer"] not in self.base and row["layer"] not in self.inputs))
        if not reported:  # the report could not rank them: the model's layers, the output's end first
            named = [layer for layer in context.layer_names if layer not in self.base and layer not in self.inputs]
            why = f"did not build ({trial.error})" if made is None else "ranked no layer"
            self.warn(f"search {self.name}: the per-layer report {why}; trying the model's layers from the output "
                      f"end ({len(named)} named)")
            return list(reversed(named))[:self.runner.run.search.candidates], named
        position = {layer: i for i, layer in enumerate(context.layer_names)}
        # a route whose layers the source does not name (a PyTorch program's modules) orders its
        # report's rows itself: "order", the op's place in its graph
        order = {row["layer"]: row["order"] for row in reversed(rows) if row.get("layer") and "order" in row}

        def place(layer: str) -> int:  # a route's name may add the op it became: "conv1/Conv (Conv2d)"
            found = position.get(layer, position.get(layer.rsplit(" (", 1)[0]))
            return found if found is not None else len(position) + order.get(layer, len(order))

        # every row placed by its op: that order alone (a source's name among a route's own, such as
        # the output's writer named after the source's softmax, is not "nearest the inputs")
        ordered = sorted(reported, key=order.__getitem__) if all(layer in order for layer in reported) \
            else sorted(reported, key=place)
        return reported[:self.runner.run.search.candidates], ordered

    def blocks(self, worst: list[str], ordered: list[str]) -> Candidate:
        """Each block raised whole on top of the start, 16-bit activations first: the first plan
        that passes, else the best that improved (the single layers then start from the start
        again: a block that only helps would lift far more layers than a plan needs)."""
        best = self.start
        tried = blocks(worst, ordered, cheap=self.runner.builder.cheap_tries, settings=self.runner.run.search)
        if self.costs:  # the cheapest block that passes is the one kept: cheap blocks first
            tried.sort(key=lambda block: self.costs.total(block.layers))
        if tried:
            self.say(f"search {self.name}: blocks to raise: {'; '.join(b.name for b in tried)}")
        for block in tried:
            for precision in self.probes:
                if self.late():
                    return best
                plan = self.base.raised([layer for layer in block.layers if layer not in self.base], precision)
                candidate = self.attempt(plan, self.start, _passes, block.name)
                if candidate is None:
                    continue
                if not candidate.failures:
                    self.say(f"search {self.name}: {block.name} at {precision} passes")
                    return candidate
                if _quality(candidate, self.start) > _quality(best, self.start):
                    best = candidate
        return best

    def singles(self, best: Candidate, worst: list[str]) -> Candidate:
        """The candidate layers ranked alone, then raised in that order on top of each other."""
        probe = self.probes[-1]  # the most precise: blocks tried 16-bit activations already
        scored = []
        for rank, layer in enumerate(worst):
            if self.late():
                break
            if best.context.plan.precision(layer) == probe:
                continue
            candidate = self.attempt(best.context.plan.raised([layer], probe), best, improves, "sensitivity")
            if candidate is not None:
                if not candidate.failures:
                    return candidate
                scored.append((self._per_cost(candidate, best, layer), -rank, layer))
        order = [layer for *_, layer in sorted(scored, reverse=True)]
        if order:
            self.say(f"search {self.name}: layers by their effect on the failing gates: {', '.join(order)}")
        elif worst:
            why = "the search budget ran out first" if self.late() else "no layer could be rebuilt on its own"
            self.warn(f"search {self.name}: no layer ranked ({why}; {len(worst)} candidates)")
        plan = best.context.plan
        tentative: list[str] = []  # in the plan for being no worse, not for helping; least helpful last
        for layer in order + order:  # most helpful first; a second pass for what the first left out
            if not best.failures or self.late():
                break
            if plan.precision(layer) == probe:
                continue
            # with the layer added; where that leaves no layer with weights in integers, the same
            # without one of the layers that did not help (least helpful first), or without all of them
            trials = [plan.raised([layer], probe)]
            trials += [plan.without([drop]).raised([layer], probe) for drop in reversed(tentative)]
            if len(tentative) > 1:
                trials.append(plan.without(tentative).raised([layer], probe))
            for trial in trials:
                if self.late():
                    break
                candidate = self.attempt(trial, best, improves)
                if candidate is None:
                    continue  # did not build, or nothing left in integers: the next variant
                if improves(candidate, best):
                    best, plan = candidate, trial
                    tentative = [t for t in tentative if t in trial]
                elif trial is trials[0] and _quality(candidate, best) >= _quality(best, best):
                    # no worse: kept in the plan (a tensor between two layers needs both; NNCF keeps
                    # reverting in rank order too); the most-integer stage drops it if not needed.
                    # A variant that dropped a layer kept for its neighbour must improve to replace it
                    plan = trial
                    tentative = [t for t in tentative if t in trial] + [layer]
                break
        return best

    def fastest(self, found: Candidate) -> Candidate:
        """Among the plans that pass, the one this CPU runs fastest (batch 1, one thread, the
        build this CPU runs): the plan found, and its raised layers at the route's other
        precision. Accuracy alone would keep 16-bit activations (closer to int8), but TFLite's
        int16x8 kernels run several times slower than its float ones on x86, and ONNX Runtime
        runs a 16-bit QDQ pair around a float kernel; neither is known before it is timed. The
        plans are timed interleaved in one child; another replaces the plan found only when it
        is at least ``SearchSettings.faster`` times faster, and the timings are recorded."""
        plan = found.context.plan
        raised = [layer for layer in plan.layers if layer not in self.base]
        if not raised or found.files is None:
            return found
        passing = [found]
        for precision in self.probes:
            if all(plan.precision(layer) == precision for layer in raised):
                continue
            if self.late():
                self.say(f"search {self.name}: no time left to try the raised layers at {precision} for speed")
                continue
            candidate = self.attempt(plan.raised(raised, precision), found, _never, "speed")
            if candidate is not None and not candidate.failures and candidate.files is not None:
                passing.append(candidate)
        if len(passing) < 2:
            return found
        from ..speed import median_ms

        labels = [c.context.plan.describe() for c in passing]
        timed = median_ms(self.runner.builder, {label: c.files / c.built.artifact.path
                                                for label, c in zip(labels, passing) if c.files is not None},
                          self.runner.run.data.evaluation, f"timing {len(passing)} passing plans of {self.name}",
                          rounds=SPEED_ROUNDS, runs=SPEED_RUNS)
        if timed is None:
            self.warn(f"search {self.name}: {len(passing)} plans pass; nothing here could time them, so the plan "
                      "found first is kept")
            return found
        chosen = min(passing, key=lambda c: timed[c.context.plan.describe()])
        if timed[labels[0]] < self.runner.run.search.faster * timed[chosen.context.plan.describe()]:
            chosen = found
        kept_label = chosen.context.plan.describe()
        # six significant digits: a plan's median is often ~0.01 ms, where four decimals would lose the
        # digits the ``faster`` ratio was decided on, and the record could not show why this plan was kept
        ms = {label: float(f"{timed[label]:.6g}") for label in labels}
        self.say(f"search {self.name}: {len(passing)} plans pass; timed here (batch 1, 1 thread): "
                 + ", ".join(f"{label} {value:.3g} ms" for label, value in ms.items()) + f"; keeping {kept_label}")
        self.runner.trials.append(Trial(f"fastest passing plan: {kept_label}", SPEED, chosen.context.plan,
                                        before=margins(found), after=margins(chosen), kept=True,
                                        extra={"timed_ms": ms, "how": f"interleaved in one child, {SPEED_ROUNDS} "
                                               f"rounds of {SPEED_RUNS} calls, batch 1, 1 thread; another plan "
                                               f"replaces the one found when {self.runner.run.search.faster:g}x faster"}))
        return chosen

    def _per_cost(self, candidate: Candidate, best: Candidate, layer: str) -> tuple[float, ...]:
        """How a layer raised alone ranks: the failing gates it passes, then what it repairs per
        unit of compute it takes out of int8 (with costs), then the closeness to float."""
        quality = _quality(candidate, best)
        if not self.costs:
            return quality
        before = _quality(best, best)
        closer = quality[2] - before[2] if math.isfinite(quality[2]) and math.isfinite(before[2]) else 0.0
        margin = quality[1] - before[1] if math.isfinite(quality[1]) and math.isfinite(before[1]) else 0.0
        repaired = margin + 0.01 * closer
        return quality[0], repaired / max(self.costs.added(layer, best.context.plan.layers), 1e-9), quality[1], quality[2]

    def most_integer(self, best: Candidate, worst: Sequence[str]) -> Candidate:
        """The raised layers back to int8 in halves, quarters, ... one, least costly first."""
        rank = {layer: i for i, layer in enumerate(worst)}
        # the heaviest first (with costs: what a float layer costs in speed), then the mildest
        raised = sorted((layer for layer in best.context.plan.layers if layer not in self.fixed),
                        key=lambda layer: (-self.costs.saved(layer, best.context.plan.layers) if self.costs else 0.0,
                                           -rank.get(layer, -1)))
        size = max(1, len(raised) // 2)
        reserved = len(self.probes) - 1  # the speed stage's tries at the other precision (``fastest``)
        while raised and not self.late(reserved):
            for start in range(0, len(raised), size):
                if self.late(reserved):
                    break
                chunk = [layer for layer in raised[start:start + size] if layer in best.context.plan]
                if not chunk or len(chunk) == len(best.context.plan.layers):
                    continue
                plan = best.context.plan.without(chunk)
                candidate = self.attempt(plan, best, _passes, "most integer")
                if candidate is not None and not candidate.failures:
                    best = candidate
            if size == 1:
                break
            size = max(1, size // 2)
            raised = [layer for layer in raised if layer in best.context.plan]
        return best


def _never(candidate: Candidate, best: Candidate) -> bool:
    return False


def _passes(candidate: Candidate, best: Candidate) -> bool:
    return not candidate.failures


def _score(after: list[GateFailure], before: list[GateFailure]) -> tuple[int, float]:
    """How good a build is by the gates that failed before: how many now pass, then the sum of
    their margins (a passing gate counts as 0, its floor)."""
    found = {f.key: f.margin for f in after}
    keys = [f.key for f in before]
    passing = sum(1 for key in keys if key not in found)
    total = sum(min(found.get(key, 0.0), 0.0) if math.isfinite(found.get(key, 0.0)) else -1e9 for key in keys)
    return passing, total


def _quality(candidate: Candidate, before: Candidate) -> tuple[int, float, float]:
    """``_score`` on the gates ``before`` failed, then the worst output SQNR: a decision metric
    moves in whole samples, so between two builds that flip as many decisions the one closer to
    float is the better step."""
    sqnr = min((c.sqnr_db for c in candidate.measured.outputs.values() if c.sqnr_db == c.sqnr_db),
               default=float("inf"))
    return (*_score(candidate.failures, before.failures), round(sqnr, 2))
