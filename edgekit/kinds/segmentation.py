"""``segmentation``: per-pixel class scores (a softmax over a class axis) or a sigmoid mask: the
mean IoU of the INT8 masks against float's."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import EdgekitError
from . import register
from .base import BINARY_THRESHOLD, Graph, Kind, OutputKind, TaskResult, shape_text
from .classes import sums_to_one

SEGMENTATION_MIN_IOU = 0.90  # mean IoU of the INT8 masks against the float masks


@register
class Segmentation(Kind):
    name = "segmentation"
    help = "per-pixel class scores or a sigmoid mask: IoU"
    order = 20
    counts = ("classes",)

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        op, axis, shape = graph.op, graph.structure.get("axis"), graph.shape
        if graph.reference.ndim != 4:
            return None
        if op == "softmax" and axis in (1, 3):
            return {"kind": self.name, "axis": axis,
                    "evidence": f"{shape_text(shape)}, Softmax over axis {axis} ({shape[axis]} classes per pixel) at "
                                f"{graph.node}"}
        if op == "sigmoid":
            channel = 1 if shape[1] <= shape[3] else 3
            return {"kind": self.name, "axis": channel,
                    "evidence": f"{shape_text(shape)}, Sigmoid map ({shape[channel]} mask channel(s) on axis {channel}, "
                                f"each pixel foreground at >= 0.5) at {graph.node}"}
        return None

    def from_values(self, name: str, reference: np.ndarray, common: dict[str, Any]) -> OutputKind | None:
        if not reference.size or reference.ndim != 4:
            return None
        for axis in (3, 1):
            if reference.shape[axis] >= 2 and sums_to_one(reference, axis):
                return OutputKind(name, self.name, axis, f"{shape_text(list(reference.shape))}, values 0..1 summing "
                                  f"to 1 over axis {axis} (per-pixel class probabilities)", "values", **common)
        return None

    def given_axis(self, reference: np.ndarray, structure: dict[str, Any], groups_axis: int | None) -> int | None:
        if structure.get("op") == "softmax":
            return structure.get("axis")
        if reference.ndim == 4:
            return 1 if reference.shape[1] < reference.shape[3] else 3
        return reference.ndim - 1 if reference.ndim >= 2 else None

    def rank_error(self, rank: int) -> tuple[str, str] | None:
        return None if rank >= 3 else ("not (N, H, W, classes) or (N, classes, H, W)", "use classes or values for "
                                                                                        "this output")

    def evaluate(self, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                 max_accuracy_drop_pp: float, axis: int | None, threshold: float | None) -> TaskResult:
        """Masks compared pixel by pixel: the argmax over the class axis, or for a one-channel (or
        sigmoid) map each channel's pixels at >= 0.5."""
        if reference.ndim < 3:
            raise EdgekitError(f"--output-kind segmentation: the output has shape {list(reference.shape)}, not "
                               "(N, H, W, classes) or (N, classes, H, W)", hint="use classes or values for this output")
        axis = reference.ndim - 1 if axis is None else axis % reference.ndim
        channels = reference.shape[axis]
        sigmoid = reference.min() >= 0 and reference.max() <= 1 and not np.allclose(reference.sum(axis=axis), 1,
                                                                                       atol=1e-2)
        ious = []
        if channels == 1 or sigmoid:
            agree = []
            for c in range(channels):
                ref = np.take(reference, c, axis=axis) >= BINARY_THRESHOLD
                out = np.take(candidate, c, axis=axis) >= BINARY_THRESHOLD
                union = np.sum(ref | out)
                ious.append(np.sum(ref & out) / union if union else 1.0)
                agree.append(np.mean(ref == out))
            pixel_agreement = float(np.mean(agree))
        else:
            ref = reference.argmax(axis=axis)
            out = candidate.argmax(axis=axis)
            for c in np.union1d(np.unique(ref), np.unique(out)):
                union = np.sum((ref == c) | (out == c))
                ious.append(np.sum((ref == c) & (out == c)) / union)
            pixel_agreement = float(np.mean(ref == out))
        values = {"mean_iou": float(np.mean(ious)), "pixel_agreement": pixel_agreement, "classes": float(channels)}
        return TaskResult(self.name, values, values["mean_iou"] >= SEGMENTATION_MIN_IOU,
                          f"mean IoU of the INT8 masks vs float >= {100 * SEGMENTATION_MIN_IOU:g}%",
                          values["mean_iou"] - SEGMENTATION_MIN_IOU)
