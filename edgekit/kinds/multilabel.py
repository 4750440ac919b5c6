"""``multilabel``: independent sigmoid yes/no labels (the float values mostly near 0 or 1):
per-label decisions at the threshold (0.5 by default) agree with float's, overall and label by
label. Never judged by an argmax across labels."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import register
from .base import BINARY_THRESHOLD, Graph, Kind, TaskResult, agreement, rows, shape_text, softmax_axis_or_last
from .bins import single_peak_fraction, why_not_bins

# sigmoid units are yes/no labels when the float model decides: most values below 0.2 or above 0.8
DECISIVE = 0.8
MIN_DECISIVE = 0.75
# each label's own agreement may fall this many times further than the overall agreement's floor
# (a label is a small sample: one flip in 80 is 1.25 pp)
MULTILABEL_PER_LABEL_FACTOR = 5.0


def decisive_fraction(reference: np.ndarray) -> float:
    """The share of the float values that are decisions: near 0 or near 1."""
    return float(np.mean((reference <= 1 - DECISIVE) | (reference >= DECISIVE))) if reference.size else 0.0


@register
class MultiLabel(Kind):
    name = "multilabel"
    counts_units = True
    help = ("independent sigmoid yes/no labels: decisions at the threshold, 0.5 by default, agree with float's "
            "overall and per label")
    order = 50
    default_threshold = BINARY_THRESHOLD
    counts = ("labels", "worst_label")
    plain = ("threshold",)

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        rank, shape = graph.reference.ndim, graph.shape
        if graph.op != "sigmoid" or rank < 2 or rank == 4 or shape[-1] < 2:
            return None
        decisive = decisive_fraction(graph.reference)
        if decisive < MIN_DECISIVE:
            return None
        why = why_not_bins(shape[-1], single_peak_fraction(graph.reference))
        return {"kind": self.name, "axis": rank - 1,
                "evidence": f"{shape_text(shape)}, Sigmoid over {shape[-1]} independent labels at {graph.node} ({why}; "
                            f"{100 * decisive:.0f}% of the float values are decisions near 0 or 1): each label yes at "
                            ">= 0.5"}

    def given_axis(self, reference: np.ndarray, structure: dict[str, Any], groups_axis: int | None) -> int | None:
        return softmax_axis_or_last(reference, structure)

    def evaluate(self, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                 max_accuracy_drop_pp: float, axis: int | None, threshold: float | None) -> TaskResult:
        """Every decision counts; the overall agreement bounds the decision changes as the accuracy
        gate does, and no single label may flip far more often than the rest (a collapsed label
        hides among healthy ones)."""
        threshold = BINARY_THRESHOLD if threshold is None else threshold
        ref = rows(reference, axis) >= threshold
        out = rows(candidate, axis) >= threshold
        agree = ref == out
        per_label = agree.mean(axis=0) if agree.size else np.ones(ref.shape[1])
        worst = int(np.argmin(per_label)) if per_label.size else 0
        values = {"label_agreement": float(agree.mean()) if agree.size else 1.0,
                  "worst_label_agreement": float(per_label.min()) if per_label.size else 1.0,
                  "worst_label": float(worst), "labels": float(ref.shape[1]),
                  "samples_all_labels_agree": float(agree.all(axis=1).mean()) if agree.size else 1.0,
                  "threshold": threshold}
        floor = 1 - max_accuracy_drop_pp / 100
        label_floor = 1 - MULTILABEL_PER_LABEL_FACTOR * max_accuracy_drop_pp / 100
        margin = min(values["label_agreement"] - floor, values["worst_label_agreement"] - label_floor)
        return TaskResult(self.name, values, margin >= -1e-12,
                          f"label decisions at >= {threshold:g} agree with float's for >= {100 * floor:g}% of all "
                          f"(sample, label) pairs and >= {100 * label_floor:g}% for every label (--max-accuracy-drop "
                          f"{max_accuracy_drop_pp:g} pp)", margin,
                          (agreement("label_agreement", agree, floor, "label decisions"),
                           agreement("worst_label_agreement", agree[:, worst] if agree.size else [], label_floor,
                                     "samples")))
