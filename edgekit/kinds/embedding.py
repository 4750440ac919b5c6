"""``embedding``: L2-normalised vectors: the cosine of each INT8 vector with float's, and whether
each sample's nearest neighbour stays the same (what retrieval and verification read)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import register
from .base import Graph, Kind, OutputKind, TaskResult, rows, shape_text

EMBEDDING_MIN_MEAN_COSINE = 0.98  # about 14 dB SQNR on unit vectors; healthy INT8 encoders give 0.995+
EMBEDDING_MIN_COSINE = 0.90  # no single sample's vector may turn away from float's more than this
UNIT_NORM_TOLERANCE = 1e-3  # rows whose L2 norm is 1 within this: a normalised embedding
MIN_EMBEDDING_DIM = 8


def _nearest(vectors: np.ndarray) -> np.ndarray:
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(axis=1)


@register
class Embedding(Kind):
    name = "embedding"
    help = "vectors: cosine"
    order = 60

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        if graph.op == "l2norm" and graph.reference.ndim == 2 and graph.shape[1] >= 2:
            return {"kind": self.name, "axis": 1,
                    "evidence": f"{shape_text(graph.shape)}, L2-normalised vectors at {graph.node}"}
        return None

    def from_values(self, name: str, reference: np.ndarray, common: dict[str, Any]) -> OutputKind | None:
        if not reference.size or reference.ndim != 2 or reference.shape[1] < MIN_EMBEDDING_DIM:
            return None
        norms = np.linalg.norm(reference.astype(np.float64), axis=1)
        if len(norms) and np.all(np.abs(norms - 1) <= UNIT_NORM_TOLERANCE):
            return OutputKind(name, self.name, 1, f"{shape_text(list(reference.shape))}, every row has L2 norm 1 "
                              "(normalised vectors)", "values", **common)
        return None

    def evaluate(self, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                 max_accuracy_drop_pp: float, axis: int | None, threshold: float | None) -> TaskResult:
        ref = rows(reference, axis).astype(np.float64)
        out = rows(candidate, axis).astype(np.float64)
        norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1)
        cos = np.where(norms > 0, np.sum(ref * out, axis=1) / np.where(norms > 0, norms, 1), 0.0)
        values = {"mean_cosine": float(np.mean(cos)), "min_cosine": float(np.min(cos))}
        if len(ref) >= 3:
            values["nearest_neighbour_agreement"] = float(np.mean(_nearest(ref) == _nearest(out)))
        margin = min(values["mean_cosine"] - EMBEDDING_MIN_MEAN_COSINE, values["min_cosine"] - EMBEDDING_MIN_COSINE)
        return TaskResult(self.name, values, margin >= -1e-12,
                          f"mean cosine with float >= {EMBEDDING_MIN_MEAN_COSINE:g} and every sample's >= "
                          f"{EMBEDDING_MIN_COSINE:g}", margin)
