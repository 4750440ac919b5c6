"""The search's objective: the speed a plan keeps. Each layer weighs what leaving it out of int8
costs (its relative compute, ``simulation/costs.py``, read once per model from the float graph),
so the search raises cheap layers before heavy ones, ranks a layer by what it repairs per unit
of compute, and puts the heaviest raised layers back to int8 first. A float layer beside int8
ones also costs its boundaries: every tensor between them is quantized or dequantized on every
call (``SearchSettings.boundary_cost`` per element), so a float island between int8 layers weighs more than the same
layer at the edge of a float region. Without costs (no simulation of the model) every layer
weighs one, which is the layer count the search used before."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..search_settings import DEFAULT_SETTINGS



@dataclass(frozen=True)
class LayerCosts:
    """Plan layer -> relative compute; a layer the table does not name (another route's name for
    it) weighs the median, so it is neither free nor the heaviest."""

    costs: Mapping[str, float] = field(default_factory=dict)
    # (writer, reader, elements) for each pair of layers a tensor joins (``simulation/costs.layer_links``)
    links: tuple[tuple[str, str, float], ...] = ()
    boundary_cost: float = DEFAULT_SETTINGS.boundary_cost  # per element of a tensor a float island adds

    def __bool__(self) -> bool:
        return bool(self.costs)

    def of(self, layer: str) -> float:
        if not self.costs:
            return 1.0
        found = self.costs.get(layer, self.costs.get(_bare(layer)))
        return found if found is not None else self._median()

    def compute(self, layers: Iterable[str]) -> float:
        """The compute these layers hold."""
        return sum(self.of(layer) for layer in set(layers))

    def boundary(self, layers: Iterable[str]) -> float:
        """What the tensors between these layers (float) and the others (int8) cost to convert."""
        chosen = {_bare(layer) for layer in layers}
        return self.boundary_cost * sum(e for a, b, e in self.links if (a in chosen) != (b in chosen))

    def total(self, layers: Iterable[str]) -> float:
        """What leaving these layers out of int8 costs: their compute and their boundaries."""
        return self.compute(layers) + self.boundary(layers)

    def added(self, layer: str, base: Iterable[str]) -> float:
        """What raising ``layer`` costs on top of the plan ``base`` (at least its own compute's tenth:
        a layer that closes a float island still runs in float)."""
        base = set(base)
        return max(self.total(base | {layer}) - self.total(base), 0.1 * self.of(layer))

    def saved(self, layer: str, plan: Iterable[str]) -> float:
        """What putting ``layer`` of ``plan`` back to int8 saves."""
        plan = set(plan)
        return self.total(plan) - self.total(plan - {layer})

    def share(self, layers: Iterable[str]) -> float | None:
        """The share of the model's compute these layers hold (None without costs)."""
        whole = sum(self.costs.values())
        return None if not self.costs or whole <= 0 else min(1.0, self.compute(layers) / whole)

    def _median(self) -> float:
        return statistics.median(self.costs.values())

    def describe(self, layers: Iterable[str]) -> str:
        """``"12% of the compute"`` for a plan's raised layers, "" without costs."""
        share = self.share(layers)
        return "" if share is None else f"{share * 100:.2g}% of the model's compute"


def _bare(layer: str) -> str:
    """A route's name for a layer without the op it became: ``"conv1/Conv (Conv2d)"`` -> ``conv1/Conv``."""
    return layer.rsplit(" (", 1)[0]
