"""Task metrics: does the INT8 artifact still do the model's job, judged the way the task is judged.

SQNR says how far raw outputs moved; a task metric says whether that matters. Each output can be
given a kind (``--output-kind``): class scores are judged by top-1 (accuracy with labels),
segmentation maps by the IoU of their argmax masks, detector heads by matching the boxes both
models keep above a score threshold. Anything else takes a user function (``--metric``).

Every metric compares the INT8 artifact with the float model on the same samples (with labels,
classification also against the labels). Its rule is fixed here and printed with the result so
a failure can be read without this file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import EdgekitError

# Floors, chosen so that a pass means "behaves like the float model" in the task's own terms.
# MLPerf's INT8 bar is 99% of FP32 accuracy; without labels, top-1 agreement bounds the accuracy
# drop from above (every changed decision costs at most one correct answer), so agreement
# >= 1 - max drop keeps the drop within the same limit the labelled gate uses.
SEGMENTATION_MIN_IOU = 0.90  # mean IoU of the INT8 masks against the float masks
DETECTION_MIN_MATCH = 0.90  # recall, precision and class agreement against the float detections
DETECTION_IOU = 0.5  # a kept box matches a float box at IoU >= 0.5 (the PASCAL VOC / mAP@0.5 bar)
NMS_IOU = 0.45  # non-maximum suppression before matching, as YOLO's post-processing does
DEFAULT_SCORE_THRESHOLD = 0.25  # YOLO's default confidence threshold

EMBEDDING_MIN_MEAN_COSINE = 0.98  # about 14 dB SQNR on unit vectors; healthy INT8 encoders give 0.995+
EMBEDDING_MIN_COSINE = 0.90  # no single sample's vector may turn away from float's more than this
BINARY_THRESHOLD = 0.5  # a sigmoid probability (or a mask pixel) is "yes" at 0.5

# a multi-label head: each label's own agreement may fall this many times further than the overall
# agreement's floor (a label is a small sample: one flip in 80 is 1.25 pp)
MULTILABEL_PER_LABEL_FACTOR = 5.0

KINDS = ("classes", "bins", "multilabel", "segmentation", "detections:yolo", "detections:yolov5", "embedding",
         "values")
KIND_HELP = (
    "classes (class scores: top-1 agreement, accuracy with labels), bins (per-bin probabilities over ordered "
    "bins: the peak within one bin of float's, and its height within 0.1), multilabel[:THRESHOLD] (independent sigmoid yes/no "
    "labels: decisions at the threshold, 0.5 by default, agree with float's overall and per label), "
    "segmentation (per-pixel class scores or a sigmoid mask: IoU), "
    "detections:yolo[:THRESHOLD] (boxes cx,cy,w,h then class scores, either axis order), "
    "detections:yolov5[:THRESHOLD] (boxes, objectness, class scores), embedding (vectors: cosine), "
    "values (SQNR only)"
)


@dataclass(frozen=True)
class TaskResult:
    """One task metric on one output: named numbers, whether they pass, and the rule they met."""

    task: str
    values: dict[str, float]
    passed: bool | None  # None: the metric reports numbers only
    rule: str
    # how far the gated numbers are above their floors (the worst one; negative: failing). What
    # --auto-fix compares between attempts: a rebuild is kept only when this improves.
    margin: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_kind(spec: str) -> tuple[str, float | None]:
    """``detections:yolo:0.3`` -> ("detections:yolo", 0.3); refuses unknown kinds."""
    parts = spec.strip().split(":")
    threshold = None
    with_threshold = {"detections": 3, "multilabel": 2}.get(parts[0])
    if with_threshold is not None and len(parts) == with_threshold:
        try:
            threshold = float(parts[-1])
        except ValueError:
            raise EdgekitError(f"--output-kind {spec}: {parts[-1]!r} is not a score threshold",
                               hint="e.g. detections:yolo:0.25 or multilabel:0.5") from None
        if not 0 < threshold < 1:  # NaN fails this too
            raise EdgekitError(f"--output-kind {spec}: the score threshold must be between 0 and 1")
        parts = parts[:-1]
    kind = ":".join(parts)
    if kind not in KINDS:
        raise EdgekitError(f"unknown output kind {spec!r}", hint=f"use one of: {KIND_HELP}")
    return kind, threshold


def resolve_kinds(specs: Mapping[str, str], outputs: list[str],
                  shapes: Mapping[str, list[int]] | None = None) -> dict[str, str]:
    """``--output-kind`` values by output name; a bare KIND applies to a one-output model. Checked
    against the outputs' ranks before anything is built."""
    resolved = {}
    for name, spec in specs.items():
        kind, _ = parse_kind(spec)
        if name == "":
            if len(outputs) != 1:
                raise EdgekitError(f"--output-kind {spec}: the model has {len(outputs)} outputs ({', '.join(outputs)})",
                                   hint="name the output: --output-kind OUTPUT=KIND")
            name = outputs[0]
        if name not in outputs:
            raise EdgekitError(f"--output-kind {name}={spec}: the model has no output {name!r}",
                               hint=f"its outputs: {', '.join(outputs)}")
        rank = len((shapes or {}).get(name, []))
        if rank and kind == "segmentation" and rank < 3:
            raise EdgekitError(f"--output-kind {spec}: output {name!r} has rank {rank}, not (N, H, W, classes) or "
                               "(N, classes, H, W)", hint="use classes or values for this output")
        if rank and kind.startswith("detections") and rank not in (2, 3):
            raise EdgekitError(f"--output-kind {spec}: output {name!r} has rank {rank}, not (N, boxes, 4+classes) "
                               "or its transpose", hint="name the output that holds boxes and scores, or use --metric")
        resolved[name] = spec
    return resolved


def evaluate(spec: str, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
             max_accuracy_drop_pp: float, axis: int | None = None) -> TaskResult | None:
    """The task metric of one output kind; None for ``values`` (judged by SQNR alone). ``axis``:
    the class / bin / mask-channel / box-attribute / embedding axis (default: the last)."""
    kind, threshold = parse_kind(spec)
    if kind == "classes":
        return classification(reference, candidate, targets, max_accuracy_drop_pp, axis)
    if kind == "bins":
        return bins(reference, candidate, max_accuracy_drop_pp, axis)
    if kind == "multilabel":
        return multilabel(reference, candidate, max_accuracy_drop_pp, threshold or BINARY_THRESHOLD, axis)
    if kind == "segmentation":
        return segmentation(reference, candidate, axis)
    if kind == "embedding":
        return embedding(reference, candidate, axis)
    if kind.startswith("detections:"):
        return detections(reference, candidate, kind.split(":")[1], threshold or DEFAULT_SCORE_THRESHOLD, axis)
    return None


def _last(array: np.ndarray, axis: int | None) -> np.ndarray:
    """The array with ``axis`` (default: the last) moved last and every other position as a row."""
    axis = array.ndim - 1 if axis is None else axis % array.ndim
    moved = np.moveaxis(array, axis, -1)
    return moved.reshape(-1, moved.shape[-1])


def _decisions(array: np.ndarray, axis: int | None) -> np.ndarray:
    """Argmax over the class axis; a single column is a yes/no at 0.5 (probabilities) or 0 (logits)."""
    rows = _last(array, axis)
    if rows.shape[1] == 1:
        cut = BINARY_THRESHOLD if rows.min() >= 0 and rows.max() <= 1 else 0.0
        return (rows[:, 0] >= cut).astype(np.int64)
    return rows.argmax(axis=1)


def classification(reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                   max_accuracy_drop_pp: float, axis: int | None = None) -> TaskResult:
    if reference.ndim < 2:
        reference, candidate = reference[:, None], candidate[:, None]
    ref = _decisions(reference, axis)
    out = _decisions(candidate, axis)
    values = {"top1_agreement": float(np.mean(ref == out))}
    if targets is not None and len(ref) == len(targets):
        values["float_accuracy"] = float(np.mean(ref == targets))
        values["accuracy"] = float(np.mean(out == targets))
        values["accuracy_drop_pp"] = round(100 * (values["float_accuracy"] - values["accuracy"]), 4)
        return TaskResult("classes", values, values["accuracy_drop_pp"] <= max_accuracy_drop_pp,
                          f"accuracy drop <= {max_accuracy_drop_pp:g} pp (--max-accuracy-drop)",
                          (max_accuracy_drop_pp - values["accuracy_drop_pp"]) / 100)
    floor = 1 - max_accuracy_drop_pp / 100
    return TaskResult("classes", values, values["top1_agreement"] >= floor - 1e-12,
                      f"top-1 agreement with float >= {100 * floor:g}% (bounds the accuracy drop by "
                      f"--max-accuracy-drop {max_accuracy_drop_pp:g} pp)", values["top1_agreement"] - floor)


def multilabel(reference: np.ndarray, candidate: np.ndarray, max_accuracy_drop_pp: float,
               threshold: float = BINARY_THRESHOLD, axis: int | None = None) -> TaskResult:
    """Independent yes/no labels (a multi-label sigmoid head): what a user reads is each label's
    decision at the threshold, never an argmax across labels. Every decision counts; the overall
    agreement bounds the decision changes as the accuracy gate does, and no single label may flip
    far more often than the rest (a collapsed label hides among healthy ones)."""
    ref = _last(reference, axis) >= threshold
    out = _last(candidate, axis) >= threshold
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
    return TaskResult("multilabel", values, margin >= -1e-12,
                      f"label decisions at >= {threshold:g} agree with float's for >= {100 * floor:g}% of all "
                      f"(sample, label) pairs and >= {100 * label_floor:g}% for every label (--max-accuracy-drop "
                      f"{max_accuracy_drop_pp:g} pp)", margin)


# mean |peak height - float's| on 0..1 bins: the good 360-bin pitch head of scripts/bench_quality.py
# measured 0.051-0.054 on ONNX (its flat-topped peaks take 10 distinct INT8 values) with raw pitch
# accuracy unchanged; a flattened head (every peak in place, confidence 0.9 -> 0.54) measures 0.36
BINS_MAX_PEAK_HEIGHT_ERROR = 0.1
PEAK_HALF_WIDTH = 4  # bins each side of the argmax that locate a peak (CREPE's local weighted average)


def bins(reference: np.ndarray, candidate: np.ndarray, max_accuracy_drop_pp: float,
         axis: int | None = None) -> TaskResult:
    """Ordered bins (pitch, angle, age): the answer is where the peak is. A flat-topped peak's
    argmax jumps between neighbouring bins on noise (measured: 3 bins on a pitch head whose raw
    pitch accuracy INT8 kept exactly), so the peak is located as pitch trackers decode it, the
    probability-weighted mean of the bins within ``PEAK_HALF_WIDTH`` of the argmax, and must stay
    within one bin of float's."""
    ref_rows, out_rows = _last(reference, axis).astype(np.float64), _last(candidate, axis).astype(np.float64)
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
    margin = min(values["peak_within_one_bin"] - floor, BINS_MAX_PEAK_HEIGHT_ERROR - values["mean_peak_height_error"])
    return TaskResult("bins", values, margin >= -1e-12,
                      f"peak (weighted mean of the bins within {PEAK_HALF_WIDTH} of the argmax) within one bin of "
                      f"float's for >= {100 * floor:g}% of the samples (--max-accuracy-drop {max_accuracy_drop_pp:g} pp) "
                      f"and its height within {BINS_MAX_PEAK_HEIGHT_ERROR:g} of float's on average", margin)


def _peak(rows: np.ndarray) -> np.ndarray:
    """Each row's peak position in bins: the weighted mean around its argmax."""
    top = rows.argmax(axis=1)
    index = np.arange(rows.shape[1])
    window = np.abs(index[None, :] - top[:, None]) <= PEAK_HALF_WIDTH
    weights = np.where(window, np.clip(rows, 0, None), 0.0)
    total = weights.sum(axis=1)
    return np.where(total > 0, (weights * index).sum(axis=1) / np.where(total > 0, total, 1), top)


def embedding(reference: np.ndarray, candidate: np.ndarray, axis: int | None = None) -> TaskResult:
    """Cosine of each INT8 vector with float's, and whether each sample's nearest neighbour among
    the others stays the same (what retrieval and verification read)."""
    ref = _last(reference, axis).astype(np.float64)
    out = _last(candidate, axis).astype(np.float64)
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1)
    cos = np.where(norms > 0, np.sum(ref * out, axis=1) / np.where(norms > 0, norms, 1), 0.0)
    values = {"mean_cosine": float(np.mean(cos)), "min_cosine": float(np.min(cos))}
    if len(ref) >= 3:
        values["nearest_neighbour_agreement"] = float(np.mean(_nearest(ref) == _nearest(out)))
    margin = min(values["mean_cosine"] - EMBEDDING_MIN_MEAN_COSINE, values["min_cosine"] - EMBEDDING_MIN_COSINE)
    return TaskResult("embedding", values, margin >= -1e-12,
                      f"mean cosine with float >= {EMBEDDING_MIN_MEAN_COSINE:g} and every sample's >= "
                      f"{EMBEDDING_MIN_COSINE:g}", margin)


def _nearest(vectors: np.ndarray) -> np.ndarray:
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(axis=1)


def segmentation(reference: np.ndarray, candidate: np.ndarray, axis: int | None = None) -> TaskResult:
    """Masks compared pixel by pixel: the argmax over the class axis, or for a one-channel (or
    sigmoid) map each channel's pixels at >= 0.5."""
    if reference.ndim < 3:
        raise EdgekitError(f"--output-kind segmentation: the output has shape {list(reference.shape)}, not "
                           "(N, H, W, classes) or (N, classes, H, W)", hint="use classes or values for this output")
    axis = reference.ndim - 1 if axis is None else axis % reference.ndim
    channels = reference.shape[axis]
    sigmoid = reference.min() >= 0 and reference.max() <= 1 and not np.allclose(reference.sum(axis=axis), 1, atol=1e-2)
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
    return TaskResult("segmentation", values, values["mean_iou"] >= SEGMENTATION_MIN_IOU,
                      f"mean IoU of the INT8 masks vs float >= {100 * SEGMENTATION_MIN_IOU:g}%",
                      values["mean_iou"] - SEGMENTATION_MIN_IOU)


def detections(reference: np.ndarray, candidate: np.ndarray, layout: str, threshold: float,
               axis: int | None = None) -> TaskResult:
    """Boxes both models keep (score >= threshold, after NMS), matched at IoU >= 0.5. ``axis``: the
    box-attribute axis (4 + classes), when the graph says; else it is found from the shape."""
    if axis is not None and reference.ndim == 3 and axis % 3 == 1:
        reference, candidate = np.swapaxes(reference, 1, 2), np.swapaxes(candidate, 1, 2)
    found_ref = [_decode(sample, layout, threshold) for sample in _boxes_rows(reference, layout, axis is not None)]
    found_out = [_decode(sample, layout, threshold) for sample in _boxes_rows(candidate, layout, axis is not None)]
    matched = same_class = 0
    for (rb, rc), (ob, oc) in zip(found_ref, found_out):
        for i, j in _greedy_matches(rb, ob):
            matched += 1
            same_class += int(rc[i] == oc[j])
    n_ref = sum(len(b) for b, _ in found_ref)
    n_out = sum(len(b) for b, _ in found_out)
    values = {
        "float_detections": float(n_ref),
        "int8_detections": float(n_out),
        "recall": matched / n_ref if n_ref else (1.0 if not n_out else 0.0),
        "precision": matched / n_out if n_out else (1.0 if not n_ref else 0.0),
        "class_agreement": same_class / matched if matched else (1.0 if not n_ref and not n_out else 0.0),
        "score_threshold": threshold,
    }
    margin = min(values[k] for k in ("recall", "precision", "class_agreement")) - DETECTION_MIN_MATCH
    return TaskResult(f"detections:{layout}", values, margin >= 0,
                      f"recall, precision and class agreement of the INT8 detections (score >= {threshold:g}, "
                      f"matched at IoU >= {DETECTION_IOU:g}) vs float >= {100 * DETECTION_MIN_MATCH:g}%", margin)


def _boxes_rows(output: np.ndarray, layout: str, attributes_last: bool = False) -> list[np.ndarray]:
    """Per sample, one row per candidate box: (N, 4+C) is one box per sample; (N, B, 4+C) as is;
    (N, 4+C, B), as YOLOv8 exports it (1x84x8400), transposed (unless the graph said the
    attributes are last)."""
    minimum = 6 if layout == "yolov5" else 5
    if output.ndim == 2:
        rows = [row[None, :] for row in output]
    elif output.ndim == 3 and attributes_last:
        rows = list(output)
    elif output.ndim == 3:
        # the box attributes (4+C) lie along the axis long enough to hold them; when both are,
        # along the shorter one (YOLOv8: 84 x 8400)
        axis1, axis2 = output.shape[1], output.shape[2]
        if (axis1 < minimum) != (axis2 < minimum):
            transposed = axis2 < minimum
        else:
            transposed = axis1 < axis2
        rows = [sample.T if transposed else sample for sample in output]
    else:
        rows = []
    if not rows or rows[0].shape[-1] < minimum:
        raise EdgekitError(f"--output-kind detections:{layout}: the output has shape {list(output.shape)}, not "
                           f"(N, boxes, 4+{'1+' if layout == 'yolov5' else ''}classes) or its transpose",
                           hint="name the output that holds the boxes and scores, or use --metric")
    return [r.astype(np.float64) for r in rows]


def _decode(rows: np.ndarray, layout: str, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Corner boxes and classes kept after the score threshold and per-class NMS."""
    scores = rows[:, 5:] * rows[:, 4:5] if layout == "yolov5" else rows[:, 4:]
    classes = scores.argmax(axis=1)
    best = scores[np.arange(len(rows)), classes]
    keep = best >= threshold
    cx, cy, w, h = (rows[keep, i] for i in range(4))
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    classes, best = classes[keep], best[keep]
    chosen = []
    for c in np.unique(classes):
        index = np.flatnonzero(classes == c)
        index = index[np.argsort(-best[index], kind="stable")]
        while index.size:
            chosen.append(index[0])
            index = index[1:][_iou(boxes[index[0]], boxes[index[1:]]) <= NMS_IOU]
    chosen = np.array(sorted(chosen), dtype=np.int64)
    return boxes[chosen], classes[chosen]


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _greedy_matches(reference: np.ndarray, candidate: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (float box, INT8 box) by descending IoU, each box used once, IoU >= DETECTION_IOU."""
    if not len(reference) or not len(candidate):
        return []
    table = np.stack([_iou(box, candidate) for box in reference])
    pairs = []
    while True:
        i, j = np.unravel_index(np.argmax(table), table.shape)
        if table[i, j] < DETECTION_IOU:
            return pairs
        pairs.append((int(i), int(j)))
        table[i, :] = -1
        table[:, j] = -1


def show_value(key: str, value: float | None) -> str:
    """A task metric's number as the table and the error line print it (fractions as percent)."""
    if value is None:
        return "n/a"
    if key.endswith("_pp"):
        return f"{value:.2f} pp"
    if "cosine" in key or key == "mean_peak_height_error":
        return f"{value:.4f}"
    if key in ("float_detections", "int8_detections", "classes", "bins", "worst_peak_shift_bins", "labels",
               "worst_label"):
        return f"{value:.0f}"
    if key not in ("score_threshold", "threshold") and 0 <= value <= 1:
        return f"{100 * value:.1f}%"
    return f"{value:.4g}"


# --- --metric module:function ---------------------------------------------------------------


def load_metric(spec: str) -> Callable[..., Any]:
    """The user's metric function (``module:function`` or ``path/to/file.py:function``)."""
    from ..data.sources import _resolve_callable

    module, sep, function = spec.rpartition(":")
    if not sep or not module or not function:
        raise EdgekitError(f"--metric {spec}: expected module:function or path/to/file.py:function")
    return _resolve_callable(module, function, spec, "metric", label=f"--metric {spec}")


def run_metric(spec: str, function: Callable[..., Any], reference: dict[str, np.ndarray],
               candidate: dict[str, np.ndarray], labels: np.ndarray | None) -> TaskResult:
    """Call ``function(float_outputs, int8_outputs, labels)``; it returns named numbers and may add
    ``passed`` (a bool) to gate the package."""
    try:
        returned = function({k: v.copy() for k, v in reference.items()}, {k: v.copy() for k, v in candidate.items()},
                            None if labels is None else labels.copy())
    except Exception as exc:  # the user's code: say what it raised
        raise EdgekitError(f"--metric {spec} raised {type(exc).__name__}: {exc}",
                           hint="it is called as function(float_outputs, int8_outputs, labels) with dicts of "
                                "arrays by output name, and labels or None") from exc
    if not isinstance(returned, Mapping):
        raise EdgekitError(f"--metric {spec} returned {type(returned).__name__}, not a dict of named numbers",
                           hint='return e.g. {"recall": 0.97, "passed": True}')
    passed = returned.get("passed")
    if passed is not None and not isinstance(passed, (bool, np.bool_)):
        raise EdgekitError(f"--metric {spec}: 'passed' is {passed!r}, not True or False")
    values = {}
    for key, value in returned.items():
        if key == "passed":
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise EdgekitError(f"--metric {spec}: {key!r} is {type(value).__name__}, not a number") from None
        if math.isnan(number):
            raise EdgekitError(f"--metric {spec}: {key!r} is NaN", hint="return a number for every name")
        values[str(key)] = number
    return TaskResult(f"metric {spec}", values, None if passed is None else bool(passed),
                      f"{spec} decides (its 'passed')" if passed is not None else "reported, not gated")
