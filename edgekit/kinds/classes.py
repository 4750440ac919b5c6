"""``classes``: class scores (a softmax, labels, rows of probabilities, or one sigmoid yes/no):
top-1 agreement with float, accuracy with labels.

Without labels, top-1 agreement bounds the accuracy drop from above (every changed decision costs
at most one correct answer), so agreement >= 1 - max drop keeps the drop within the limit the
labelled gate uses (MLPerf's INT8 bar is 99% of FP32 accuracy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import register
from .base import (BINARY_THRESHOLD, Graph, Kind, OutputKind, Rate, TaskResult, agreement, rows, shape_text,
                   softmax_axis_or_last)


def decisions(array: np.ndarray, axis: int | None) -> np.ndarray:
    """Argmax over the class axis; a single column is a yes/no at 0.5 (probabilities) or 0 (logits)."""
    found = rows(array, axis)
    if found.shape[1] == 1:
        cut = BINARY_THRESHOLD if found.min() >= 0 and found.max() <= 1 else 0.0
        return (found[:, 0] >= cut).astype(np.int64)
    return found.argmax(axis=1)


def sums_to_one(reference: np.ndarray, axis: int) -> bool:
    values = reference.astype(np.float64)
    if values.min() < 0 or values.max() > 1 + 1e-6:
        return False
    return bool(np.allclose(values.sum(axis=axis), 1.0, atol=1e-2))


@register
class Classes(Kind):
    name = "classes"
    counts_units = True
    help = "class scores: top-1 agreement, accuracy with labels"
    order = 30
    takes_labels = True
    argmax_decides = True

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        op, axis, rank, shape = graph.op, graph.structure.get("axis"), graph.reference.ndim, graph.shape
        if op == "softmax" and axis is None and rank == 2:  # a softmax before a flatten: classes on axis 1
            axis = 1
        if op == "softmax" and axis is not None and rank >= 2:
            return {"kind": self.name, "axis": axis,
                    "evidence": f"{shape_text(shape)}, Softmax over axis {axis} ({shape[axis]} classes) at {graph.node}"}
        if op == "sigmoid" and rank >= 2 and shape[-1] == 1:  # rank 4: a mask (segmentation, asked first)
            return {"kind": self.name, "axis": rank - 1,
                    "evidence": f"{shape_text(shape)}, one Sigmoid probability (a yes/no decision at 0.5) at "
                                f"{graph.node}"}
        return None

    def from_values(self, name: str, reference: np.ndarray, common: dict[str, Any]) -> OutputKind | None:
        if not reference.size or reference.ndim < 2 or reference.ndim == 4:
            return None
        axis, shape = reference.ndim - 1, list(reference.shape)
        if shape[axis] >= 2 and sums_to_one(reference, axis):
            return OutputKind(name, self.name, axis, f"{shape_text(shape)}, rows of probabilities summing to 1 "
                              f"over axis {axis} ({shape[axis]} classes)", "values", **common)
        return None

    def given_axis(self, reference: np.ndarray, structure: dict[str, Any], groups_axis: int | None) -> int | None:
        return softmax_axis_or_last(reference, structure)

    def evaluate(self, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                 max_accuracy_drop_pp: float, axis: int | None, threshold: float | None) -> TaskResult:
        if reference.ndim < 2:
            reference, candidate = reference[:, None], candidate[:, None]
        ref = decisions(reference, axis)
        out = decisions(candidate, axis)
        values = {"top1_agreement": float(np.mean(ref == out))}
        unit = "samples" if len(ref) == len(reference) else "rows"
        if targets is not None and len(ref) == len(targets):
            values["float_accuracy"] = float(np.mean(ref == targets))
            values["accuracy"] = float(np.mean(out == targets))
            values["accuracy_drop_pp"] = round(100 * (values["float_accuracy"] - values["accuracy"]), 4)
            tolerance = max_accuracy_drop_pp / 100
            evidence = Rate("accuracy", int(np.sum(out == targets)), len(ref), values["float_accuracy"] - tolerance,
                            tolerance, unit)
            return TaskResult(self.name, values, values["accuracy_drop_pp"] <= max_accuracy_drop_pp,
                              f"accuracy drop <= {max_accuracy_drop_pp:g} pp (--max-accuracy-drop)",
                              (max_accuracy_drop_pp - values["accuracy_drop_pp"]) / 100, (evidence,))
        floor = 1 - max_accuracy_drop_pp / 100
        return TaskResult(self.name, values, values["top1_agreement"] >= floor - 1e-12,
                          f"top-1 agreement with float >= {100 * floor:g}% (bounds the accuracy drop by "
                          f"--max-accuracy-drop {max_accuracy_drop_pp:g} pp)", values["top1_agreement"] - floor,
                          (agreement("top1_agreement", ref == out, floor, unit),))
