"""``values``: anything no other kind claims (a regression, features, joined quantities): judged
by SQNR alone, each group of a Concat apart. Asked last: it claims every output."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import register
from .base import Graph, Kind, OutputKind, shape_text
from .bins import single_peak_fraction, why_not_bins
from .multilabel import decisive_fraction


@register
class Values(Kind):
    name = "values"
    help = "SQNR only"
    order = 1000

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        if graph.op == "concat" and len(graph.groups) > 1 and graph.groups_axis is not None:
            listed = ", ".join(f"rows {g.start}..{g.stop - 1} ({g.what})" for g in graph.groups)
            return {"kind": self.name, "axis": None,
                    "evidence": f"Concat(axis={graph.groups_axis}) of {len(graph.groups)} quantities: {listed}; each "
                                "judged by SQNR"}
        rank, shape = graph.reference.ndim, graph.shape
        if graph.op == "sigmoid" and rank >= 2:  # the other kinds declined: a regression squashed into 0..1
            why = why_not_bins(shape[-1], single_peak_fraction(graph.reference))
            decisive = decisive_fraction(graph.reference)
            return {"kind": self.name, "axis": None,
                    "evidence": f"{shape_text(shape)}, Sigmoid over {shape[-1]} units at {graph.node} ({why}; only "
                                f"{100 * decisive:.0f}% of the float values are near 0 or 1: not yes/no labels): "
                                "judged by SQNR (--output-kind multilabel or bins names its task)"}
        return None

    def from_values(self, name: str, reference: np.ndarray, common: dict[str, Any]) -> OutputKind:
        if common.get("groups"):
            listed = ", ".join(f"rows {g.start}..{g.stop - 1} ({g.what})" for g in common["groups"])
            return OutputKind(name, self.name, None, f"Concat(axis={common['groups_axis']}) of {listed}; each judged "
                              "by SQNR", "graph", **common)
        return OutputKind(name, self.name, None, f"{shape_text(list(reference.shape))}, no softmax, sigmoid, "
                          "normalisation or labels: judged by SQNR (--output-kind or --labels name its task)", "none",
                          **common)
