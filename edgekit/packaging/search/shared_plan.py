"""One search per model, on a simulation every format shares.

A try of the per-format search is a whole conversion of that format (seconds to minutes), so a
search per format is either starved or unaffordable. Here the precision plan is searched once, on
the model's float ONNX graph with the INT8 grid applied in float arithmetic (``graph.py``): a try
costs building a graph and a forward pass over the validation samples. The search itself is the
packager's (``search/``: the per-layer report, blocks, single layers, most-integer, the held-out
check), run on ``edgekit.simulation.SimulatedBuilder``'s builds and bounded by a number of tries.

Every format whose route honours per-layer precision then converts once with the plan found, and
its verdict is on its own real artifact; where that misses, the format's own search continues
from the plan with a few real tries, and the gap between the simulation and the format is
recorded in the artifact's ``details.simulation``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...conversion.layer_names import LayerNames
from ...errors import EdgekitError
from ...formats.building import BuildContext
from ...formats.base import EXPLAIN
from ...formats.plan import FLOAT, PrecisionPlan
from ..context import PackagingContext
from .equalized_forms import SourceForms
from ..gates import Remedies
from .grid_plans import GridChecks, graph_of
from .rounds import search_rounds
from .trial import Trial


@dataclass(frozen=True)
class Simulated:
    """What the shared search found: the plan (None: plain INT8 passes in the simulation, or the
    search found none), its record, and how it was found."""

    plan: PrecisionPlan | None
    passed: bool  # the simulation of ``plan`` (or of plain INT8) passes every gate
    tries: int = 0
    seconds: float = 0.0
    margins: dict[str, Any] = field(default_factory=dict)
    trials: tuple[Trial, ...] = ()
    # the simulated graph's layer names (the plan's vocabulary, each ONNX node's PyTorch module where it
    # was exported from PyTorch): what carries the plan into each route's names (``LayerNames.resolve``)
    names: LayerNames = field(default_factory=LayerNames)
    # plan layer -> its relative compute (``simulation/costs.py``): what the searches weigh layers by
    costs: dict[str, float] = field(default_factory=dict)
    # where cross-layer equalization repaired plain INT8 (``simulation/equalize.py``): the graph it
    # rescaled (``source``), the equalized one (``path``), the pairs and the largest factor
    equalized: dict[str, Any] = field(default_factory=dict)
    links: tuple[tuple[str, str, float], ...] = ()  # tensors between plan layers (``costs.layer_links``)
    # the outcome again in each format's own grid, simulated when its first format asks (``grid_plans``)
    grids: Any = field(default=None, compare=False)

    def model_for(self, model: Any) -> Any:
        """The form a format converts: the equalized graph where the format converts the graph the
        simulation equalized, the source's own model equalized alike where the format converts that
        (``equalized["forms"]``, ``equalize_source.py``), else ``model`` as it is."""
        from ...conversion.forms import ModelForm

        if not self.equalized:
            return model
        via = ", ".join(x for x in (model.via, "cross-layer equalization") if x)
        if model.path == self.equalized["source"]:
            return model._replace(path=self.equalized["path"], via=via)
        forms = self.equalized.get("forms")
        carried = (forms.get() if forms is not None else {}).get(model.form)
        if carried is None or (model.path, model.loader) != (carried["from"]["path"], carried["from"]["loader"]):
            return model
        return ModelForm.from_dict(carried["to"])._replace(via=via)

    def plan_for(self, grid: Any, equalized: bool = False) -> PrecisionPlan | None:
        """The plan a format of ``grid`` builds first on the (equalized) graph: the shared one, or
        what its grid's search added to it (``GridChecks``); None: plain INT8. Asked only for a
        format whose route builds plans (it may search its grid)."""
        outcome = self.grids.outcome(grid, equalized) if self.grids is not None else None
        if outcome is not None and outcome.passed:
            return outcome.plan
        return self.equalized.get("plan") if equalized else self.plan

    def passes_on(self, grid: Any, equalized: bool = False) -> bool:
        """Whether the outcome for ``grid`` passes in the simulation, in that grid where it was run."""
        outcome = self.grids.outcome(grid, equalized, search=False) if self.grids is not None else None
        if outcome is not None:
            return outcome.passed
        return bool(self.equalized) if equalized else self.passed

    def margins_for(self, grid: Any, equalized: bool = False) -> dict[str, Any]:
        """The simulated margins of the outcome for ``grid``: the prediction its real build is judged against."""
        outcome = self.grids.outcome(grid, equalized, search=False) if self.grids is not None else None
        if outcome is not None:
            return outcome.margins
        return (self.equalized.get("margins") or self.margins) if equalized else self.margins

    def costs_for(self, route: Any) -> tuple[dict[str, float], tuple[tuple[str, str, float], ...]]:
        """The layers' costs and links in the names of ``route``'s form (a module weighs the ONNX
        nodes it became), so that format's own search weighs its layers too, instead of taking
        every name for the median."""
        return self.names.resolve_costs(self.costs, self.links, route.names)

    def builds_equalized(self, model: Any) -> bool:
        """Whether ``model`` (a format's form) is an equalized one (``model_for``)."""
        if not self.equalized:
            return False
        return model.path == self.equalized["path"] or any(
            (model.path, model.loader) == (f["to"]["path"], f["to"]["loader"])
            for f in (self.equalized["forms"].known() if self.equalized.get("forms") is not None else {}).values())

    def equalized_context(self, context: BuildContext, user: PrecisionPlan, route: Any,
                          grid: Any = None) -> BuildContext:
        """``context`` (already on an equalized form) with the plan found on the equalized graph
        (in ``grid``, the format's) on top of the user's ``user`` plan, in the names of ``route``'s
        form, in place of the plan found on the graph as given."""
        if FLOAT not in route.honours:
            return context
        found = (self.plan_for(grid, equalized=True) if grid is not None else self.equalized.get("plan")) \
            or PrecisionPlan()
        plan, _ = placed(found.layers, route, user, self.names)
        return context if plan == context.plan else context.with_plan(plan)

    def record(self, real: dict[str, Any] | None = None, shipped: dict[str, Any] | None = None, grid: Any = None,
               equalized: bool = False, built_float: list[str] | None = None) -> dict[str, Any]:
        """``details.simulation`` of an artifact built with this plan (or with plain INT8, where the
        simulation predicted that passes): the simulated margins beside the real build's (``real``,
        before any search of its own) and what shipped after it, so the gap between the simulation
        and the format is on record; ``built_float``: the layers the real build kept float, where
        its converter kept more than the plan's (``gap_built``: the simulation of exactly those)."""
        from .cost import LayerCosts

        outcome = self.grids.outcome(grid, equalized, search=False) if self.grids is not None and grid is not None \
            else None
        plan = outcome.plan if outcome is not None and outcome.passed else \
            (self.equalized.get("plan") if equalized else self.plan)
        predicted = self.margins_for(grid, equalized) if grid is not None else self.margins
        share = LayerCosts(self.costs).share(plan.layers if plan else ())
        found = {"plan": dict(plan.layers) if plan else {}, "passed": self.passed, "tries": self.tries,
                 **({"grid": {"name": grid.name, "passed": outcome.passed, "tries": outcome.tries}} if outcome else {}),
                 **({"plan_as_given": dict(self.plan.layers)} if equalized and self.plan else {}),
                 **({"equalized": {"pairs": len(self.equalized["pairs"]),
                                   "largest_factor": self.equalized["largest_factor"]}} if self.equalized else {}),
                 **({"raised_compute_share": round(share, 4)} if share is not None else {}),
                 "seconds": round(self.seconds, 1), "simulated": predicted,
                 "trials": [t.summary() for t in self.trials]}
        if real is not None:
            found["real"] = real
            found["gap"] = prediction_gap(predicted, real)
        if built_float is not None and self.grids is not None and grid is not None and real is not None:
            # the converter kept other layers float beside the plan's: what the simulation says of exactly those
            planned = set(plan.layers if plan else ())
            # in the plan's names (an ONNX node of a PyTorch model: its module); a float tail is not listed
            names = planned | {self.names.plan_layer(layer.rsplit(" (", 1)[0]) or layer.rsplit(" (", 1)[0]
                               for layer in built_float}
            if names <= set(self.costs) and names != planned:
                of_built = self.grids.of_built(grid, equalized, frozenset(names))
                if of_built is not None:
                    found["built_float"] = sorted(names)
                    found["gap_built"] = prediction_gap(of_built, real)
        if shipped is not None and shipped != real:
            found["shipped"] = shipped
        return found

    def predicts(self, model: Any, grid: Any) -> bool:
        """Whether the simulation predicted a plain INT8 build of ``model`` (a format's form, of
        ``grid``) passes: on the graph as given, or on the equalized one where ``model`` is equalized."""
        equalized = self.builds_equalized(model)
        if self.equalized and not equalized and self.plan is None:  # only the equalized graph passed
            return False
        outcome = self.grids.outcome(grid, equalized, search=False) if self.grids is not None else None
        plan = outcome.plan if outcome is not None and outcome.passed else \
            (self.equalized.get("plan") if equalized else self.plan)
        return plan is None and self.passes_on(grid, equalized)


def prediction_gap(simulated: dict[str, Any], real: dict[str, Any]) -> float | None:
    """The largest difference between a gate's figure in the simulation and on the real build, per
    output: task margins in points (0.01 of agreement is one), SQNR in dB; None without both."""
    predicted, measured = simulated.get("outputs") or {}, real.get("outputs") or {}
    gaps = []
    for name, figures in predicted.items():
        for key, value in figures.items():
            other = (measured.get(name) or {}).get(key)
            if isinstance(value, (int, float)) and isinstance(other, (int, float)):
                gaps.append(abs(value - other) * (100.0 if key == "task_margin" else 1.0))
    return round(max(gaps), 3) if gaps else None


def wanted(run: PackagingContext, described: Any, planned: list[Any]) -> str | None:
    """Why the shared search does not run here, or None when it does."""
    options, data = run.options, run.data
    if not options.auto_fix:
        return "--no-auto-fix"
    if not options.simulate:
        return "--no-simulate"
    if described.precision.learned:
        return "the source is already quantized"
    if data.unrepresentative:
        return "the held-out data lie outside the calibration data"
    if data.evaluation_count < run.search.min_layer_search_samples:
        return (f"{data.evaluation_count} validation samples (the search needs "
                f"{run.search.min_layer_search_samples}+)")
    if not any(p.remedies.floats for p in planned):
        return "no requested format's route honours per-layer precision"
    return None


def simulated_plan(planned: list[Any], context: BuildContext, described: Any, steps: Any,
                   run: PackagingContext) -> Simulated | None:
    """The plan every format builds first, searched on the simulation; None when the shared search
    does not apply (``wanted``: each format then searches on its own, as it did before) or the
    model has no route to the simulated form."""
    from ...routing.routes import model_form
    from .candidate import Candidate
    from .trial import margins
    from ...simulation import SIMULATED_FORM, SimulatedBuilder

    progress = run.progress
    why_not = wanted(run, described, planned)
    if why_not is not None:
        return None
    # the form the simulation runs: the shortest route that ends in it (no steps where the source is one)
    route = min((r for p in planned for r in p.others if r.form == SIMULATED_FORM), key=lambda r: len(r.steps),
                default=None)
    if route is None:
        return None
    began = time.monotonic()
    try:
        with progress.step("INT8 simulation: the float graph and its activation ranges"):
            form = model_form(route, described.forms, steps)
            folder = Path(context.workdir) / "simulation"
            sim_form = _folded(form, folder, context)  # as every format's converter folds it
            builder = SimulatedBuilder(sim_form.path, [t.name for t in described.inputs], list(described.output_names))
            # the plan in the source's names: a PyTorch model's by module (``plan_layers``)
            sim_context = replace(context, model=sim_form, package_dir=folder, trial=False, explain_npy=None,
                                  layer_names=described.plan_layers)
            builder.calibrate(sim_context)
            built = builder.build(sim_context)
        judged = replace(run, staged=folder, layer_costs=dict(builder.costs), layer_links=builder.links)
        measured = judged.measure(built, builder, sim_context)
    except EdgekitError as exc:  # no simulation: every format searches on its own, as before
        progress.warn(f"INT8 simulation unavailable ({exc.message}); each format searches on its own artifact")
        return None
    if measured is None:
        return None
    remedies = Remedies(layers=(FLOAT, EXPLAIN))
    failures = judged.check(builder.name, measured, remedies)
    first = Candidate(sim_context, built, measured, failures)
    repaired = _equalized(form, described, sim_context, judged, remedies, first) \
        if failures and run.options.equalize else None
    if repaired is not None and not repaired[1].failures:  # repair before revert: every layer stays int8
        record = repaired[2]
        progress.say(f"INT8 simulation: plain INT8 fails ({failures[0].what}); with cross-layer equalization "
                     f"({len(record['pairs'])} convolution pairs rescaled, the float function unchanged) it passes "
                     f"every gate ({time.monotonic() - began:.0f} s): the formats that convert this graph build it "
                     "equalized, every layer int8")
        record = {**record, "forms": SourceForms(record, described, sim_context, builder.names.module_paths, progress)}
        grids = GridChecks({True: graph_of(repaired[0], repaired[1].context, repaired[3], None,
                                           margins(repaired[1]))}, remedies)
        return Simulated(None, True, 2, time.monotonic() - began, margins(repaired[1]),
                         names=builder.names, costs=builder.costs, equalized=record, links=builder.links,
                         grids=grids)
    if not failures:
        progress.say(f"INT8 simulation: plain INT8 passes every gate ({time.monotonic() - began:.0f} s): every format "
                     "builds it")
        return Simulated(None, True, 1, time.monotonic() - began, margins(first), names=builder.names,
                         costs=builder.costs, links=builder.links,
                         grids=GridChecks({False: graph_of(builder, sim_context, judged, None, margins(first))}, remedies))
    progress.say(f"INT8 simulation: plain INT8 fails ({failures[0].what}); searching the precision plan on the "
                 f"simulation, at most {judged.search.simulated_tries} tries")
    return _searched(builder, first, sim_context, judged, remedies, repaired, described, began)


def _searched(builder: Any, first: Any, sim_context: BuildContext, judged: PackagingContext, remedies: Remedies,
              repaired: Any, described: Any, began: float) -> Simulated:
    """Where plain INT8 fails: the plan searched on the graph as given, and on the equalized one
    where equalization brought plain INT8 closer (``repaired``)."""
    from .cost import LayerCosts
    from .trial import margins

    progress = judged.progress
    found, trials, tries = search_rounds(builder, first, judged, remedies, time.monotonic() - began)
    weigh = LayerCosts(builder.costs, builder.links, judged.search.boundary_cost)
    equalized = _equalized_plan(repaired, found, remedies, weigh, began) if repaired else {}
    if equalized:
        equalized = {**equalized, "forms": SourceForms(equalized, described, sim_context, builder.names.module_paths,
                                                       progress)}
    seconds = time.monotonic() - began
    graphs = {True: graph_of(repaired[0], repaired[1].context, repaired[3], equalized["plan"], equalized["margins"])} \
        if equalized and repaired is not None else {}
    if not found.failures:
        graphs[False] = graph_of(builder, sim_context, judged, found.context.plan, margins(found))
    grids = GridChecks(graphs, remedies)
    if found.failures:
        progress.warn(f"INT8 simulation: no plan passed in {tries} tries ({seconds:.0f} s; best "
                      f"{found.context.plan.describe()}: {found.failures[0].what}); each format searches on its own")
        return Simulated(None, False, tries, seconds, margins(found), trials, builder.names,
                         builder.costs, equalized, links=builder.links, grids=grids)
    plan = found.context.plan
    compute = weigh.describe(plan.layers)
    progress.say(f"INT8 simulation: {plan.describe()}{f' ({compute} out of int8)' if compute else ''} passes every "
                 f"gate ({tries} tries, {seconds:.0f} s): every format whose route honours per-layer precision builds it")
    return Simulated(plan, True, tries, seconds, margins(found), trials, builder.names, builder.costs,
                     equalized, links=builder.links, grids=grids)


def _folded(form: Any, folder: Path, context: BuildContext) -> Any:
    """``form`` with its Conv -> BatchNormalization pairs folded (``simulation/fold.py``), where it
    has any; ``form`` itself otherwise."""
    from ...conversion import worker
    from ...simulation import FoldRequest, fold_graph

    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / "folded.onnx")
    report = worker.convert(fold_graph, FoldRequest(form.path, path), what="INT8 simulation: batch norms folded",
                            timeout=context.timeout_s)
    return form._replace(path=path) if report.folded else form


def _equalized(form: Any, described: Any, sim_context: BuildContext, judged: PackagingContext,
               remedies: Remedies, plain: Any) -> tuple[Any, Any, dict[str, Any], PackagingContext] | None:
    """The equalized graph in the simulation (its builder, its plain INT8 candidate, the record of
    what was rescaled, the run judging it) where equalization rescaled a pair and brought plain
    INT8 closer to its gates than ``plain``; None otherwise."""
    from ...conversion import worker
    from ...simulation import SimulatedBuilder
    from ...simulation import EqualizeRequest, equalize_graph
    from .candidate import Candidate, improves

    folder = Path(sim_context.workdir) / "simulation-equalized"
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / "equalized.onnx")
    try:
        report = worker.convert(equalize_graph, EqualizeRequest(sim_context.model.path, path),
                                what="cross-layer equalization", timeout=sim_context.timeout_s)
        if not report.pairs:
            return None
        builder = SimulatedBuilder(path, [t.name for t in described.inputs], list(described.output_names))
        context = replace(sim_context, model=form._replace(path=path), package_dir=folder)
        builder.calibrate(context)
        built = builder.build(context)
        run = replace(judged, staged=folder)
        measured = run.measure(built, builder, context)
    except EdgekitError as exc:
        judged.progress.warn(f"INT8 simulation: cross-layer equalization not tried ({exc.message})")
        return None
    if measured is None:
        return None
    candidate = Candidate(context, built, measured, run.check(builder.name, measured, remedies))
    if candidate.failures and not improves(candidate, plain):
        return None
    return builder, candidate, {"source": form.path, "path": path, "pairs": report.pairs,
                                "largest_factor": report.largest_factor, "plan": None,
                                "scales_json": report.scales_json}, run


def _equalized_plan(repaired: tuple[Any, Any, dict[str, Any], PackagingContext], found: Any, remedies: Remedies,
                    weigh: Any, began: float) -> dict[str, Any]:
    """The search on the equalized graph too, where plain INT8 of it comes closer: its plan, for
    the formats that convert that graph, where it passes and leaves less compute out of int8 than
    the plan ``found`` on the graph as given (every other format builds that one)."""
    from .trial import margins

    builder, plain, record, run = repaired
    run.progress.say("INT8 simulation: cross-layer equalization brings plain INT8 closer "
                     f"({len(record['pairs'])} convolution pairs rescaled): searching its plan too")
    other = search_rounds(builder, plain, run, remedies, time.monotonic() - began).found
    if other.failures:
        return {}
    if not found.failures and weigh.total(other.context.plan.layers) >= weigh.total(found.context.plan.layers):
        return {}
    plan = other.context.plan
    run.progress.say(f"INT8 simulation: on the equalized graph {plan.describe() or 'plain INT8'} passes "
                     f"({weigh.describe(plan.layers) or 'its layers'} out of int8): the formats that convert this "
                     "graph build it equalized")
    return {**record, "plan": plan, "margins": margins(other)}


def for_format(simulated: Simulated | None, context: BuildContext, route: Any,
               grid: Any = None) -> tuple[BuildContext, list[str]]:
    """The context a format builds first: the simulated plan on top of the user's, where its route
    honours per-layer precision, in the names of the route's form (``LayerNames.resolve``: by
    module where the route converts the PyTorch program itself, an op written in a ``forward`` by
    its traced name where the route keeps such an op in float); also the plan's layers the route
    cannot name, left out."""
    if simulated is None or FLOAT not in route.honours:
        return context, []
    found = simulated.plan_for(grid) if grid is not None else simulated.plan
    if found is None:
        return context, []
    plan, unnamed = placed(found.layers, route, context.plan, simulated.names)
    return (context if plan == context.plan else context.with_plan(plan)), unnamed


def placed(layers: Any, route: Any, plan: PrecisionPlan, names: LayerNames) -> tuple[PrecisionPlan, list[str]]:
    """``plan`` with the simulated plan's ``layers`` (name -> precision) on top, in the names of
    ``route``'s form, and the layers it cannot name."""
    own, unnamed = names.resolve(layers, route.names, route.names_ops)
    for layer, precision in own.items():
        if layer not in plan:
            plan = plan.raised([layer], precision if precision != "int16" or "int16" in route.honours else "float")
    return plan, unnamed
