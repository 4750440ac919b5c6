"""How one search runs, chosen once by its caller rather than read from a mix of parameters: a
format's own search from its first build, the few real tries a format makes after the simulated
plan missed on its artifact, or one round of the search on the simulation (its tries cost forward
passes, and its budget is the round's)."""

from __future__ import annotations

from dataclasses import dataclass

from ...conversion import deadline
from ...formats.plan import PrecisionPlan
from ..context import PackagingContext
from ..gates import Remedies
from .budget import Budget

OWN = "own"  # the format's own search on its budget (SearchSettings.tries builds, or --search-budget)
AFTER_SIMULATION = "after-simulation"  # from the simulated plan: SearchSettings.real_tries_after_simulation builds
SIMULATED = "simulated"  # one round on the simulation: the budget its caller carved for the round


@dataclass(frozen=True)
class SearchMode:
    """Which search, the remedies it may use and what bounds it. ``plain_s``: what the first build
    and its measurement took (what a rebuild is expected to cost); ``shared_s``: the format's share
    of the steps every format needed first; ``fixed``: layers never put back to int8 (default:
    every layer the first build already raises)."""

    kind: str
    remedies: Remedies = Remedies()
    plain_s: float = 0.0
    shared_s: float = 0.0
    round_budget: Budget | None = None
    fixed: PrecisionPlan | None = None

    @classmethod
    def own(cls, remedies: Remedies, plain_s: float = 0.0, shared_s: float = 0.0) -> SearchMode:
        return cls(OWN, remedies, plain_s, shared_s)

    @classmethod
    def after_simulation(cls, remedies: Remedies, plain_s: float = 0.0, shared_s: float = 0.0) -> SearchMode:
        return cls(AFTER_SIMULATION, remedies, plain_s, shared_s)

    @classmethod
    def simulated(cls, remedies: Remedies, budget: Budget, fixed: PrecisionPlan | None) -> SearchMode:
        return cls(SIMULATED, remedies, budget.rebuild_s, round_budget=budget, fixed=fixed)

    def budget(self, run: PackagingContext) -> Budget:
        """The budget this search counts its builds in, bounded by what ``--time-limit`` leaves."""
        if self.round_budget is not None:
            found = self.round_budget
        else:
            found = Budget.for_search(run.options.search_budget_s, self.plain_s, run.search)
            if self.kind == AFTER_SIMULATION:
                found = found.capped(run.search.real_tries_after_simulation)
        return found.within_share(deadline.left(), self.plain_s)
