"""The search on the simulation, in rounds: its tries cost forward passes, not conversions, so a
plan that passes on the half the search chose by but fails on every sample starts another round."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from ..context import PackagingContext
from ..gates import Remedies
from .trial import Trial



class Rounds(NamedTuple):
    """What the rounds found, every try's record, and the builds made on the simulation in all
    (the ``spent`` ones before the rounds included): the count each round's budget kept."""

    found: Any
    trials: tuple[Trial, ...]
    builds: int


def search_rounds(builder: Any, first: Any, judged: PackagingContext, remedies: Remedies, build_s: float,
                  tries: int | None = None, outer_s: float | None = None, spent: int = 1) -> Rounds:
    """The packager's search on the simulation, in rounds while tries are left: a plan that passed
    on the half the search chose by but fails on every sample (a margin of a few tenths of a dB,
    or the held-out check) starts another round from it, which raises more layers, where a search
    per format would stop (its tries cost conversions; these cost forward passes). ``tries`` and
    ``outer_s``: the settings' simulated ones unless given (a format grid's); ``spent``: the
    builds the caller made on this graph first (its plain INT8), counted against ``tries``."""
    from . import search
    from .budget import Budget
    from .mode import SearchMode

    tries = judged.search.simulated_tries if tries is None else tries
    outer_s = judged.search.simulated_outer_s if outer_s is None else outer_s
    began, found, builds = time.monotonic(), first, spent
    trials: tuple[Trial, ...] = ()
    while builds < tries:
        left_s = outer_s - (time.monotonic() - began)
        budget = Budget(left_s, rebuild_s=build_s, max_tries=tries - builds,
                        why=f"{tries} simulated tries, at most {outer_s:.0f} s")
        if not budget.allows_try():
            break
        before = (builds, found.context.plan)
        found, more = search(builder, found, judged, SearchMode.simulated(remedies, budget, fixed=first.context.plan))
        builds += budget.builds()
        trials += more
        if not found.failures or (builds, found.context.plan) == before or found.context.plan == before[1]:
            break
        judged.progress.say(f"INT8 simulation: {found.context.plan.describe()} fails on every sample "
                            f"({found.failures[0].what}); another round from it, {tries - builds} "
                            "tries left")
    return Rounds(found, trials, builds)
