"""The search's objective: the speed a plan keeps. Each layer weighs what leaving it out of int8
costs (its relative compute, ``simulation/costs.py``, read once per model from the float graph),
so the search raises cheap layers before heavy ones, ranks a layer by what it repairs per unit
of compute, and puts the heaviest raised layers back to int8 first. Without costs (no simulation
of the model) every layer weighs one, which is the layer count the search used before."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LayerCosts:
    """Plan layer -> relative compute; a layer the table does not name (another route's name for
    it) weighs the median, so it is neither free nor the heaviest."""

    costs: Mapping[str, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.costs)

    def of(self, layer: str) -> float:
        if not self.costs:
            return 1.0
        found = self.costs.get(layer, self.costs.get(layer.rsplit(" (", 1)[0]))  # "conv1/Conv (Conv2d)"
        return found if found is not None else self._median()

    def total(self, layers: Iterable[str]) -> float:
        return sum(self.of(layer) for layer in set(layers))

    def share(self, layers: Iterable[str]) -> float | None:
        """The share of the model's compute these layers hold (None without costs)."""
        whole = sum(self.costs.values())
        return None if not self.costs or whole <= 0 else min(1.0, self.total(layers) / whole)

    def _median(self) -> float:
        return statistics.median(self.costs.values())

    def describe(self, layers: Iterable[str]) -> str:
        """``"12% of the compute"`` for a plan's raised layers, "" without costs."""
        share = self.share(layers)
        return "" if share is None else f"{share * 100:.2g}% of the model's compute"
