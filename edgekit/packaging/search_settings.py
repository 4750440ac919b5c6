"""Every knob of the search, once: how many tries and blocks, when a sample set is too small to
search or to split, how the held-out check tests the halves. One frozen value rides on the
packaging context (``PackagingContext.search``); ``packaging/search/``, the shared plan, the
format grids and the held-out check read it there. The defaults are what every measured figure
in docs/ was taken with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchSettings:
    # samples: a layer search chooses among many tries by their numbers, so it needs enough samples
    # to keep half unseen (the verdict's own "enough evidence" rule); below ``min_holdout_samples``
    # the halves are too small to judge and the search uses every sample, and says so
    min_layer_search_samples: int = 50
    min_holdout_samples: int = 20
    # tries: builds per format search without --search-budget, real tries after the shared plan,
    # simulated tries a format's grid may add (and its outer bound in seconds)
    tries: int = 16
    real_tries_after_simulation: int = 6
    grid_tries: int = 20
    grid_outer_s: float = 120.0
    simulated_tries: int = 60  # the shared search on the simulation: each a graph and a forward pass
    simulated_outer_s: float = 300.0  # an outer bound, said when it binds: the outcome is counted in tries
    rebuild_tries: float = 4.0  # the rebuild of the kept plan, in typical tries (4.5 measured on the bytes classifier)
    max_fix_attempts: int = 3  # rebuilds with the fixes the failures name
    # plans: the worst layers measured one by one and raised together; blocks tried per precision
    # before single layers (more where a try is a forward pass); plans rebuilt in place of a kept one
    # that fails on all samples
    candidates: int = 12
    max_blocks: int = 8
    max_cheap_blocks: int = 16
    max_fallbacks: int = 2
    faster: float = 1.05  # a passing plan replaces the one found when this much faster (within it: timing noise)
    improvement: float = 1e-6  # margins are dB or fractions: anything above rounding noise counts
    boundary_cost: float = 2.0  # a quantize and a dequantize, per element between a float and an int8 layer
    # the held-out check between the halves: one-sided level (divided by the gates), permutations
    # (fewer where re-evaluating a gate is costly, within the seconds given), the permutations' seed
    alpha: float = 0.05
    permutations: int = 200
    min_permutations: int = 40
    permutation_budget_s: float = 20.0
    seed: int = 20261126


DEFAULT_SETTINGS = SearchSettings()
