"""The shared plan in each format's own arithmetic.

The shared search runs the grid every format has in common (``simulation/graph.py``). A format
whose quantizer places scales otherwise (``Builder.grid``: TFLite and XNNPACK tie a Concat's
inputs to its output's scale, Core ML quantizes activations symmetrically) gets the shared
outcome simulated again in its grid before it converts, once per grid and graph: where it still
passes, the format builds it as it is; where it misses, the search continues from it on that
grid (it only adds layers, at most ``SearchSettings.grid_tries`` tries), so the format's first real build is
already judged in its own arithmetic instead of spending its few real tries finding that out."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import EdgekitError
from ...formats.building import BuildContext, QuantGrid
from ...formats.plan import PrecisionPlan
from ..context import PackagingContext
from ..gates import Remedies


@dataclass(frozen=True)
class GridOutcome:
    """The shared outcome on one format's grid: the plan to build (None: plain INT8), whether it
    passes there, its margins (the prediction a real build is compared with) and the tries added."""

    plan: PrecisionPlan | None
    passed: bool
    margins: dict[str, Any]
    tries: int = 0


@dataclass(frozen=True)
class Graph:
    """One graph the shared search judged, with the plan the formats converting it build."""

    builder: Any  # SimulatedBuilder of the common grid, calibrated
    context: BuildContext
    judged: PackagingContext
    plan: PrecisionPlan | None
    passed: bool = True  # what the common grid said of the plan: the outcome where a grid changes nothing
    margins: dict[str, Any] = field(default_factory=dict)


@dataclass
class GridChecks:
    """Each (grid, graph) outcome, simulated once, when the first format of that grid asks."""

    graphs: dict[bool, Graph]  # equalized? -> the graph
    remedies: Remedies
    found: dict[tuple[str, bool], tuple[GridOutcome | None, bool]] = field(default_factory=dict)
    built: dict[tuple[str, bool, frozenset[str]], dict[str, Any] | None] = field(default_factory=dict)

    def outcome(self, grid: QuantGrid, equalized: bool, search: bool = True) -> GridOutcome | None:
        """The outcome on ``grid`` for the formats converting the (equalized) graph; None where the
        grid is the common one or the simulation had no passing outcome for that graph. ``search``:
        where it misses, search on from it (for a format that can build a plan)."""
        if grid is None or grid.common or equalized not in self.graphs:
            return None
        key = (grid.name, equalized)
        known, searched = self.found.get(key, (None, False))
        if key not in self.found or (search and not searched and known is not None and not known.passed):
            self.found[key] = (self._simulate(grid, self.graphs[equalized], search), search)
        return self.found[key][0]

    def of_built(self, grid: QuantGrid, equalized: bool, layers: frozenset[str]) -> dict[str, Any] | None:
        """The simulated margins of exactly these layers in float (what a converter built, where it
        kept neighbours of the plan float too), in ``grid``; None where the graph was not judged."""
        from .candidate import Candidate
        from .trial import margins

        graph = self.graphs.get(equalized)
        if graph is None:
            return None
        key = (grid.name, equalized, layers)
        if key not in self.built:
            builder = graph.builder if grid.common else graph.builder.on(grid)
            context = graph.context.with_plan(PrecisionPlan({layer: "float" for layer in sorted(layers)}))
            try:
                built = builder.build(context)
                measured = graph.judged.measure(built, builder, context)
            except EdgekitError:
                measured = None
            self.built[key] = None if measured is None else margins(Candidate(
                context, built, measured, graph.judged.check(builder.name, measured, self.remedies)))
        return self.built[key]

    def _simulate(self, grid: QuantGrid, graph: Graph, search: bool) -> GridOutcome | None:
        from .candidate import Candidate
        from .trial import margins
        from .rounds import search_rounds

        progress = graph.judged.progress
        builder = graph.builder.on(grid)
        context = graph.context if graph.plan is None else graph.context.with_plan(graph.plan)
        began = time.monotonic()
        try:
            built = builder.build(context)
            if not builder.regridded:  # the grid changes no scale of this graph: the common outcome is its own
                return GridOutcome(graph.plan, graph.passed, graph.margins, 0)
            plain = self._plain(builder, graph) if graph.plan is not None else None
            if plain is not None:
                return plain
            measured = graph.judged.measure(built, builder, context)
        except EdgekitError as exc:
            progress.warn(f"INT8 simulation: the {grid.name} grid not simulated ({exc.message})")
            return None
        if measured is None:
            return None
        first = Candidate(context, built, measured, graph.judged.check(builder.name, measured, self.remedies))
        described = graph.plan.describe() if graph.plan else "plain INT8"
        if not first.failures:
            progress.say(f"INT8 simulation: {described} passes in the {grid.name} grid too")
            return GridOutcome(graph.plan, True, margins(first), 1)
        if not search:
            progress.say(f"INT8 simulation: {described} misses in the {grid.name} grid ({first.failures[0].what})")
            return GridOutcome(graph.plan, False, margins(first), 1)
        progress.say(f"INT8 simulation: {described} misses in the {grid.name} grid ({first.failures[0].what}); "
                     f"searching on from it there, at most {graph.judged.search.grid_tries} tries")
        found, _, builds = search_rounds(builder, first, graph.judged, self.remedies, time.monotonic() - began,
                                         tries=graph.judged.search.grid_tries, outer_s=graph.judged.search.grid_outer_s,
                                         spent=1 if graph.plan is None else 2)  # plain INT8 in the grid too
        if found.failures:
            progress.warn(f"INT8 simulation: nothing passed in the {grid.name} grid ({builds} tries); its "
                          "formats build the shared outcome and search on their own artifacts")
            return GridOutcome(graph.plan, False, margins(found), builds)
        plan = found.context.plan
        progress.say(f"INT8 simulation: {plan.describe()} passes in the {grid.name} grid ({builds} tries): "
                     "its formats build that")
        return GridOutcome(plan, True, margins(found), builds)


    def _plain(self, builder: Any, graph: Graph) -> GridOutcome | None:
        """Plain INT8 in a format's own grid, where the common grid needed a plan: its quantizer's
        arithmetic (XNNPACK's histogram ranges and float sigmoids, TFLite's fixed score grid) may
        need none, and every layer int8 is the fastest build. None where it misses there too."""
        from .candidate import Candidate
        from .trial import margins

        built = builder.build(graph.context)
        measured = graph.judged.measure(built, builder, graph.context)
        if measured is None or graph.judged.check(builder.name, measured, self.remedies):
            return None
        graph.judged.progress.say(f"INT8 simulation: plain INT8 passes in the {builder.on_grid.name} grid (its "
                                  "quantizer's arithmetic needs no plan): its formats build every layer int8")
        return GridOutcome(None, True, margins(Candidate(graph.context, built, measured, [])), 1)


def graph_of(builder: Any, context: BuildContext, judged: PackagingContext, plan: PrecisionPlan | None,
             margins: dict[str, Any]) -> Graph:
    """A judged graph, the plan the formats converting it build (``None``: plain INT8) and its
    margins in the common grid (it passed there)."""
    return Graph(builder, replace(context, trial=False), judged, plan, True, margins)
