"""How close an INT8 artifact's outputs are to the float model's.

Top-1 agreement says whether the quantized model decides the same; cosine similarity and
SQNR (signal-to-quantization-noise ratio, dB) say how far its raw outputs moved. With class
targets, accuracy of both and the drop in percentage points.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..kinds import OutputKind, argmax_decides


@dataclass
class OutputComparison:
    samples: int
    top1_agreement: float  # NaN unless the output holds class scores or bins
    cosine: float
    sqnr_db: float
    max_abs_error: float
    float_accuracy: float | None = None
    accuracy: float | None = None
    distinct_values: int = 0  # distinct values among the candidate's outputs
    degenerate: str | None = None  # why the outputs carry no signal (constant), else None
    # When the graph joins different quantities into this output (a Concat of 4 box rows and the
    # sigmoid score rows), the worst group: a collapsed score block shows here even when the
    # whole output's SQNR looks fine. Groups come from the graph, never from value ranges.
    worst_slice: dict[str, Any] | None = None
    # units (positions of a sample) that are the same for every sample in float: dead ReLUs,
    # border pixels. They take part in the whole output's SQNR but are never a group of their own.
    dead_units: int = 0

    @property
    def accuracy_drop_pp(self) -> float | None:
        if self.float_accuracy is None or self.accuracy is None:
            return None
        return round(100.0 * (self.float_accuracy - self.accuracy), 4)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["accuracy_drop_pp"] = self.accuracy_drop_pp
        return data


def compare_outputs(reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None = None,
                    kind: OutputKind | None = None) -> OutputComparison:
    """Compare a candidate's outputs with the float reference, sample by sample (axis 0). ``kind``
    (``kinds.infer``) says which axis holds classes and which slices are separate quantities."""
    if reference.shape != candidate.shape:
        raise ValueError(f"output shapes differ: {reference.shape} vs {candidate.shape}")
    if kind is None:  # no graph at hand: what the values (and targets) say
        from ..kinds import infer

        kind = infer("", reference, None, labelled=targets is not None)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # NaN/inf outputs: named by degenerate
        return _compare(reference, candidate, targets, kind)


def _compare(reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
             kind: OutputKind) -> OutputComparison:
    ref = reference.reshape(reference.shape[0], -1).astype(np.float64)
    out = candidate.reshape(candidate.shape[0], -1).astype(np.float64)
    # top-1 agreement means something for class scores and bins only; argmax over box coordinates,
    # landmarks or a segmentation map's flattened pixels is noise
    agreement = float("nan")
    float_accuracy = accuracy = None
    if argmax_decides(kind) and reference.ndim >= 2:
        from ..kinds.classes import decisions

        ref_top, out_top = decisions(reference, kind.axis), decisions(candidate, kind.axis)
        agreement = float(np.mean(ref_top == out_top))
        if targets is not None and len(ref_top) == len(targets):
            float_accuracy = float(np.mean(ref_top == targets))
            accuracy = float(np.mean(out_top == targets))
    noise = out - ref
    sqnr = _sqnr(float(np.sum(ref**2)), float(np.sum(noise**2)))
    dead = int(np.sum(np.ptp(ref, axis=0) == 0)) if ref.shape[0] > 1 else 0
    return OutputComparison(
        worst_slice=worst_slice(reference, candidate, kind),
        distinct_values=int(np.unique(out).size),
        degenerate=degenerate_reason(ref, out),
        samples=int(ref.shape[0]),
        top1_agreement=agreement,
        cosine=_mean_cosine(ref, out),
        sqnr_db=float(sqnr),
        max_abs_error=float(np.max(np.abs(noise))) if noise.size else 0.0,
        float_accuracy=float_accuracy,
        accuracy=accuracy,
        dead_units=dead,
    )


def _sqnr(signal_power: float, noise_power: float) -> float:
    if noise_power == 0:
        return float("inf")
    if signal_power == 0:
        return float("-inf")
    return float(10.0 * np.log10(signal_power / noise_power))


def worst_slice(reference: np.ndarray, candidate: np.ndarray, kind: OutputKind | None) -> dict[str, Any] | None:
    """The group (``kind.groups``, from the graph) with the lowest SQNR, when there are several.
    A group that is constant in float (a constant part, dead units) has no SQNR of its own."""
    if kind is None or len(kind.groups) < 2 or kind.groups_axis is None:
        return None
    axis = kind.groups_axis
    found = []
    for group in kind.groups:
        ref = np.take(reference, range(group.start, group.stop), axis=axis).astype(np.float64)
        out = np.take(candidate, range(group.start, group.stop), axis=axis).astype(np.float64)
        if group.op == "constant" or not np.any(np.ptp(ref.reshape(len(ref), -1), axis=0) > 0):
            continue
        sqnr = _sqnr(float(np.sum(ref**2)), float(np.sum((out - ref) ** 2)))
        found.append({"channels": [group.start, group.stop], "axis": axis, "what": group.what,
                      "sqnr_db": sqnr, "distinct_values": int(np.unique(out).size),
                      "range": [float(ref.min()), float(ref.max())], "groups": len(kind.groups)})
    return min(found, key=lambda g: g["sqnr_db"]) if found else None


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
    broken = ~np.isfinite(out)
    if broken.any():  # NaN compares false with everything: it would read as "the same for all samples"
        nan = int(np.isnan(out).sum())
        held = " and ".join(f"{word} ({count} values)" for word, count in (("NaN", nan), ("inf", int(broken.sum()) - nan))
                            if count)
        return (f"the artifact's outputs hold {held} in {int(np.any(broken, axis=1).sum())} of {out.shape[0]} "
                "samples")
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
