"""How close an INT8 artifact's outputs are to the float model's.

Top-1 agreement says whether the quantized model decides the same; cosine similarity and
SQNR (signal-to-quantization-noise ratio, dB) say how far its raw outputs moved. With class
targets, accuracy of both and the drop in percentage points.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass
class OutputComparison:
    samples: int
    top1_agreement: float
    cosine: float
    sqnr_db: float
    max_abs_error: float
    float_accuracy: float | None = None
    accuracy: float | None = None
    distinct_values: int = 0  # distinct values among the candidate's outputs
    degenerate: str | None = None  # why the outputs carry no signal (constant), else None
    # When the last axis mixes quantities of different magnitude (box coordinates 0..300 next to
    # class scores 0..1), the worst group of channels: a collapsed score block shows here even when
    # the whole output's SQNR looks fine.
    worst_slice: dict[str, Any] | None = None

    @property
    def accuracy_drop_pp(self) -> float | None:
        if self.float_accuracy is None or self.accuracy is None:
            return None
        return round(100.0 * (self.float_accuracy - self.accuracy), 4)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["accuracy_drop_pp"] = self.accuracy_drop_pp
        return data


def compare_outputs(reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None = None) -> OutputComparison:
    """Compare a candidate's outputs with the float reference, sample by sample (axis 0)."""
    if reference.shape != candidate.shape:
        raise ValueError(f"output shapes differ: {reference.shape} vs {candidate.shape}")
    ref = reference.reshape(reference.shape[0], -1).astype(np.float64)
    out = candidate.reshape(candidate.shape[0], -1).astype(np.float64)
    # top-1 agreement means something for class scores only: (N, classes), one kind of quantity;
    # argmax over box coordinates or a segmentation map's flattened pixels is noise
    scores = reference.ndim == 2 and reference.shape[1] > 1 and len(channel_groups(reference)) == 1
    agreement = float(np.mean(ref.argmax(axis=1) == out.argmax(axis=1))) if scores else float("nan")
    noise = out - ref
    signal_power = float(np.sum(ref**2))
    noise_power = float(np.sum(noise**2))
    if noise_power == 0:
        sqnr = float("inf")
    elif signal_power == 0:
        sqnr = float("-inf")
    else:
        sqnr = 10.0 * np.log10(signal_power / noise_power)
    float_accuracy = accuracy = None
    if targets is not None:
        float_accuracy = float(np.mean(ref.argmax(axis=1) == targets))
        accuracy = float(np.mean(out.argmax(axis=1) == targets))
    return OutputComparison(
        worst_slice=worst_slice(reference, candidate),
        distinct_values=int(np.unique(out).size),
        degenerate=degenerate_reason(ref, out),
        samples=int(ref.shape[0]),
        top1_agreement=agreement,
        cosine=_mean_cosine(ref, out),
        sqnr_db=float(sqnr),
        max_abs_error=float(np.max(np.abs(noise))) if noise.size else 0.0,
        float_accuracy=float_accuracy,
        accuracy=accuracy,
    )


MAGNITUDE_RATIO = 10.0  # channels whose value ranges differ more than this are different quantities


def channel_groups(reference: np.ndarray) -> list[tuple[int, int]]:
    """Runs of adjacent channels (last axis) whose value ranges agree within ``MAGNITUDE_RATIO``;
    one run when the output holds one kind of quantity."""
    if reference.ndim < 2 or reference.shape[-1] < 2 or _probabilities(reference):
        return [(0, reference.shape[-1] if reference.ndim else 1)]  # one quantity: class probabilities
    ranges = np.abs(reference.reshape(-1, reference.shape[-1])).max(axis=0).astype(np.float64)
    ranges = np.maximum(ranges, 1e-12)
    groups, start = [], 0
    for c in range(1, len(ranges)):
        low, high = sorted((ranges[c], ranges[start]))
        if high / low > MAGNITUDE_RATIO:
            groups.append((start, c))
            start = c
    groups.append((start, len(ranges)))
    return groups


def _probabilities(reference: np.ndarray) -> bool:
    """Rows of class probabilities (0..1, summing to 1): rare classes have small maxima, yet all
    channels hold the same quantity."""
    flat = reference.reshape(-1, reference.shape[-1])
    return bool(flat.min() >= 0 and flat.max() <= 1 and np.allclose(flat.sum(axis=1), 1.0, atol=1e-2))


def worst_slice(reference: np.ndarray, candidate: np.ndarray) -> dict[str, Any] | None:
    """The group of channels with the lowest SQNR, when the output has several groups."""
    groups = channel_groups(reference)
    if len(groups) < 2:
        return None
    found = []
    for start, end in groups:
        ref = reference[..., start:end].astype(np.float64)
        out = candidate[..., start:end].astype(np.float64)
        noise = float(np.sum((out - ref) ** 2))
        signal = float(np.sum(ref**2))
        sqnr = float("inf") if noise == 0 else (float("-inf") if signal == 0 else 10 * np.log10(signal / noise))
        found.append({"channels": [start, end], "sqnr_db": float(sqnr), "distinct_values": int(np.unique(out).size),
                      "range": [float(ref.min()), float(ref.max())], "groups": len(groups)})
    return min(found, key=lambda g: g["sqnr_db"])


def degenerate_reason(reference: np.ndarray, candidate: np.ndarray) -> str | None:
    """Why a candidate's outputs carry no signal although the reference's do, else None.

    Constant outputs (every sample the same, or one value everywhere) happen when INT8
    activations collapse to zero; such an artifact must never pass validation, whatever its
    top-1 agreement on an unlabeled set happens to be.
    """
    ref = reference.reshape(reference.shape[0], -1)
    out = candidate.reshape(candidate.shape[0], -1)
    if ref.size == 0:
        return None
    ref_varies = ref.shape[0] > 1 and bool(np.any(np.ptp(ref, axis=0) > 0))
    if ref_varies and not np.any(np.ptp(out, axis=0) > 0):
        return f"the outputs are the same for all {out.shape[0]} samples while the float model's differ"
    if np.ptp(ref) > 0 and np.ptp(out) == 0:
        return f"every output value is {float(out.flat[0]):g}"
    return None


def _mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean per-sample cosine; two zero vectors agree (1), one zero vector does not (0)."""
    norm_a = np.linalg.norm(a, axis=1)
    norm_b = np.linalg.norm(b, axis=1)
    norms = norm_a * norm_b
    dots = np.sum(a * b, axis=1)
    cos = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
    cos = np.where((norm_a == 0) & (norm_b == 0), 1.0, cos)
    return float(np.mean(cos))
