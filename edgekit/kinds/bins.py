"""``bins``: per-bin probabilities over ordered bins (a sigmoid over pitch, angle or age bins; at
least 16 bins, most rows with one peak): the peak (CREPE-style weighted mean around the argmax)
within one bin of float's, and the peak's height within 0.1 of float's."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import register
from .base import Graph, Kind, TaskResult, agreement, rows, shape_text, softmax_axis_or_last

# sigmoid units are ordered bins only with this many units, most rows peaked: a few sigmoid
# units make the peak rule vacuous (3 "bins" are always within one bin)
MIN_BINS = 16
MIN_PEAKED_ROWS = 0.5
# mean |peak height - float's| on 0..1 bins: the good 360-bin pitch head of scripts/bench_quality.py
# measured 0.051-0.054 on ONNX (its flat-topped peaks take 10 distinct INT8 values) with raw pitch
# accuracy unchanged; a flattened head (every peak in place, confidence 0.9 -> 0.54) measures 0.36
BINS_MAX_PEAK_HEIGHT_ERROR = 0.1
PEAK_HALF_WIDTH = 4  # bins each side of the argmax that locate a peak (CREPE's local weighted average)


def single_peak_fraction(reference: np.ndarray) -> float:
    """The share of rows whose mass lies mostly around their argmax (one peak, as ordered bins give)."""
    if reference.ndim < 2 or not reference.size:
        return 0.0
    found = np.clip(reference.reshape(-1, reference.shape[-1]).astype(np.float64), 0, None)
    width = max(2 * PEAK_HALF_WIDTH, found.shape[1] // 20)
    index = np.arange(found.shape[1])
    near = np.abs(index[None, :] - found.argmax(axis=1)[:, None]) <= width
    total = found.sum(axis=1)
    inside = np.where(near, found, 0).sum(axis=1)
    return float(np.mean(inside >= 0.5 * np.where(total > 0, total, np.inf)))


def why_not_bins(units: int, peaked: float) -> str:
    """Why several sigmoid units are not ordered bins (for the kinds asked after this one)."""
    return (f"{units} units (bins need >= {MIN_BINS})" if units < MIN_BINS
            else f"{100 * peaked:.0f}% of samples have one peak (bins need {100 * MIN_PEAKED_ROWS:.0f}%)")


def _peak(found: np.ndarray) -> np.ndarray:
    """Each row's peak position in bins: the weighted mean around its argmax."""
    top = found.argmax(axis=1)
    index = np.arange(found.shape[1])
    window = np.abs(index[None, :] - top[:, None]) <= PEAK_HALF_WIDTH
    weights = np.where(window, np.clip(found, 0, None), 0.0)
    total = weights.sum(axis=1)
    return np.where(total > 0, (weights * index).sum(axis=1) / np.where(total > 0, total, 1), top)


@register
class Bins(Kind):
    name = "bins"
    counts_units = True
    help = "per-bin probabilities over ordered bins: the peak within one bin of float's, and its height within 0.1"
    order = 40
    argmax_decides = True
    counts = ("bins", "worst_peak_shift_bins")
    fine = ("mean_peak_height_error",)

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        rank, shape = graph.reference.ndim, graph.shape
        if graph.op != "sigmoid" or rank < 2 or rank == 4 or shape[-1] < MIN_BINS:
            return None
        peaked = single_peak_fraction(graph.reference)
        if peaked < MIN_PEAKED_ROWS:
            return None
        return {"kind": self.name, "axis": rank - 1,
                "evidence": f"{shape_text(shape)}, Sigmoid over {shape[-1]} ordered bins on axis {rank - 1} at "
                            f"{graph.node} ({100 * peaked:.0f}% of samples have one peak)"}

    def given_axis(self, reference: np.ndarray, structure: dict[str, Any], groups_axis: int | None) -> int | None:
        return softmax_axis_or_last(reference, structure)

    def evaluate(self, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                 max_accuracy_drop_pp: float, axis: int | None, threshold: float | None) -> TaskResult:
        """Ordered bins (pitch, angle, age): the answer is where the peak is. A flat-topped peak's
        argmax jumps between neighbouring bins on noise (measured: 3 bins on a pitch head whose raw
        pitch accuracy INT8 kept exactly), so the peak is located as pitch trackers decode it, the
        probability-weighted mean of the bins within ``PEAK_HALF_WIDTH`` of the argmax, and must stay
        within one bin of float's."""
        ref_rows, out_rows = rows(reference, axis).astype(np.float64), rows(candidate, axis).astype(np.float64)
        ref, out = ref_rows.argmax(axis=1), out_rows.argmax(axis=1)
        moved = np.abs(_peak(ref_rows) - _peak(out_rows))
        # the peak's height is what a pitch tracker's voicing decision (or an age head's confidence)
        # reads: the peak rule alone passed a head whose values moved everywhere but at the argmax
        height = np.abs(ref_rows.max(axis=1) - out_rows.max(axis=1))
        values = {"peak_within_one_bin": float(np.mean(moved <= 1.0)), "argmax_agreement": float(np.mean(ref == out)),
                  "worst_peak_shift_bins": float(moved.max()) if moved.size else 0.0,
                  "mean_peak_height_error": float(height.mean()) if height.size else 0.0,
                  "bins": float(ref_rows.shape[1])}
        floor = 1 - max_accuracy_drop_pp / 100
        margin = min(values["peak_within_one_bin"] - floor,
                     BINS_MAX_PEAK_HEIGHT_ERROR - values["mean_peak_height_error"])
        return TaskResult(self.name, values, margin >= -1e-12,
                          f"peak (weighted mean of the bins within {PEAK_HALF_WIDTH} of the argmax) within one bin of "
                          f"float's for >= {100 * floor:g}% of the samples (--max-accuracy-drop "
                          f"{max_accuracy_drop_pp:g} pp) and its height within {BINS_MAX_PEAK_HEIGHT_ERROR:g} of "
                          "float's on average", margin,
                          (agreement("peak_within_one_bin", moved <= 1.0, floor,
                                     "samples" if len(moved) == len(reference) else "rows"),))
