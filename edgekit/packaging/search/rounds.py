"""The search on the simulation, in rounds: its tries cost forward passes, not conversions, so a
plan that passes on the half the search chose by but fails on every sample starts another round."""

from __future__ import annotations

import time
from typing import Any

from ..context import PackagingContext
from ..gates import Remedies

# tries of the simulated search (each a graph and a forward pass over half the validation samples)
SIMULATED_TRIES = 60
# an outer bound in seconds, said when it binds: the outcome is counted in tries, not seconds
SIMULATED_OUTER_S = 300.0


def search_rounds(builder: Any, first: Any, judged: PackagingContext, remedies: Remedies, build_s: float,
                  tries: int = SIMULATED_TRIES, outer_s: float = SIMULATED_OUTER_S) -> tuple[Any, list[dict[str, Any]]]:
    """The packager's search on the simulation, in rounds while tries are left: a plan that passed
    on the half the search chose by but fails on every sample (a margin of a few tenths of a dB,
    or the held-out check) starts another round from it, which raises more layers, where a search
    per format would stop (its tries cost conversions; these cost forward passes)."""
    from . import search
    from .budget import Budget

    began, trials, found = time.monotonic(), [], first
    while builder.builds < tries:
        left_s = outer_s - (time.monotonic() - began)
        budget = Budget(left_s, rebuild_s=build_s, max_tries=tries - builder.builds,
                        why=f"{tries} simulated tries, at most {outer_s:.0f} s")
        if not budget.allows_try():
            break
        before = (builder.builds, found.context.plan)
        found, more = search(builder, found, judged, remedies, budget=budget, fixed=first.context.plan)
        trials += more
        if not found.failures or (builder.builds, found.context.plan) == before or found.context.plan == before[1]:
            break
        judged.progress.say(f"INT8 simulation: {found.context.plan.describe()} fails on every sample "
                            f"({found.failures[0].what}); another round from it, {tries - builder.builds} "
                            "tries left")
    return found, trials
