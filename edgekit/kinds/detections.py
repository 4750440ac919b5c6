"""``detections:yolo`` / ``detections:yolov5``: box rows joined to sigmoid score rows by a Concat
(YOLOv8's head; YOLOv5's with an objectness row): the boxes both models keep above a score
threshold, after NMS, matched at IoU >= 0.5: recall, precision and class agreement against float."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import numpy as np

from ..errors import EdgekitError
from . import register
from .base import Graph, Kind, Rate, TaskResult

DETECTION_MIN_MATCH = 0.90  # recall, precision and class agreement against the float detections
DETECTION_IOU = 0.5  # a kept box matches a float box at IoU >= 0.5 (the PASCAL VOC / mAP@0.5 bar)
NMS_IOU = 0.45  # non-maximum suppression before matching, as YOLO's post-processing does
DEFAULT_SCORE_THRESHOLD = 0.25  # YOLO's default confidence threshold
DECODED_KEPT = 4096  # images whose kept boxes are remembered (the float outputs are judged again per try)
DECODED_BOXES_KEPT = 1 << 20  # and at most this many boxes among them (~40 MiB): a collapsed model keeps thousands


def _layout(graph: Graph) -> str | None:
    """``yolo`` or ``yolov5`` when the output is box rows first (4 of them, not a sigmoid), then
    sigmoid/softmax score rows; an objectness row of its own before the class rows: YOLOv5's."""
    groups, structure = graph.groups, graph.structure
    if graph.op != "concat" or len(groups) < 2 or graph.groups_axis is None:
        return None
    if graph.reference.ndim not in (2, 3) or groups[0].op in ("sigmoid", "softmax"):
        return None
    if groups[0].stop != 4 or any(g.op not in ("sigmoid", "softmax") for g in groups[1:]):
        return None
    sizes = [int(p["size"]) for p in structure["parts"] if p.get("size")]
    boxes_end = i = 0
    while i < len(sizes) and boxes_end < 4:
        boxes_end += sizes[i]
        i += 1
    score_parts = sizes[i:]
    levels = structure.get("levels")
    # an objectness row of its own, or YOLOv5/v7's export: per-level [box | sigmoid(obj + classes)]
    # tensors joined on the anchor axis (YOLOv8 joins boxes and classes once, with no objectness)
    v5 = (len(score_parts) == 2 and score_parts[0] == 1 and score_parts[1] >= 1) or (
        levels is not None and len(score_parts) == 1 and score_parts[0] >= 2)
    return "yolov5" if v5 else "yolo"


class _Detections(Kind):
    layout = ""
    counts_units = True
    order = 10
    default_threshold = DEFAULT_SCORE_THRESHOLD
    counts = ("float_detections", "int8_detections")
    plain = ("score_threshold",)

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        if _layout(graph) != self.layout:
            return None
        axis, shape, v5 = graph.groups_axis, graph.shape, self.layout == "yolov5"
        scores = shape[axis] - 4
        if graph.reference.ndim == 3:
            layout = f"[N, {shape[axis]}, A]" if axis == 1 else f"[N, A, {shape[axis]}]"
        else:
            layout = f"[N, {shape[axis]}] (one box per sample)"
        what = f"1 objectness row and {scores - 1} class rows" if v5 else f"{scores} {graph.groups[1].op} rows"
        evidence = f"YOLO{'v5' if v5 else ''} layout {layout}, from Concat(axis={axis}) of 4 box rows and {what}"
        levels = graph.structure.get("levels")
        if levels is not None:
            evidence += f", {levels['count']} levels joined on axis {levels['axis']} by {levels['node']}"
        return {"kind": self.name, "axis": axis, "evidence": evidence}

    def given_axis(self, reference: np.ndarray, structure: dict[str, Any], groups_axis: int | None) -> int | None:
        return groups_axis

    def rank_error(self, rank: int) -> tuple[str, str] | None:
        return None if rank in (2, 3) else ("not (N, boxes, 4+classes) or its transpose",
                                            "name the output that holds boxes and scores, or use --metric")

    def evaluate(self, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                 max_accuracy_drop_pp: float, axis: int | None, threshold: float | None) -> TaskResult:
        """Boxes both models keep (score >= threshold, after NMS), matched at IoU >= 0.5. ``axis``:
        the box-attribute axis (4 + classes), when the graph says; else it is found from the shape."""
        threshold = DEFAULT_SCORE_THRESHOLD if threshold is None else threshold
        if axis is not None and reference.ndim == 3 and axis % 3 == 1:
            reference, candidate = np.swapaxes(reference, 1, 2), np.swapaxes(candidate, 1, 2)
        found_ref = [self._kept(s, threshold) for s in self._boxes_rows(reference, axis is not None)]
        found_out = [self._kept(s, threshold) for s in self._boxes_rows(candidate, axis is not None)]
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
        tolerance = 1 - DETECTION_MIN_MATCH
        evidence = tuple(Rate(name, k, n, DETECTION_MIN_MATCH, tolerance, unit) for name, k, n, unit in (
            ("recall", matched, n_ref, "float boxes"), ("precision", matched, n_out, "INT8 boxes"),
            ("class_agreement", same_class, matched, "matched boxes")) if n)
        return TaskResult(self.name, values, margin >= 0,
                          f"recall, precision and class agreement of the INT8 detections (score >= {threshold:g}, "
                          f"matched at IoU >= {DETECTION_IOU:g}) vs float >= {100 * DETECTION_MIN_MATCH:g}%", margin,
                          evidence)

    def _boxes_rows(self, output: np.ndarray, attributes_last: bool = False) -> list[np.ndarray]:
        """Per sample, one row per candidate box: (N, 4+C) is one box per sample; (N, B, 4+C) as is;
        (N, 4+C, B), as YOLOv8 exports it (1x84x8400), transposed (unless the graph said the
        attributes are last)."""
        v5 = self.layout == "yolov5"
        minimum = 6 if v5 else 5
        if output.ndim == 2:
            found = [row[None, :] for row in output]
        elif output.ndim == 3 and attributes_last:
            found = list(output)
        elif output.ndim == 3:
            # the box attributes (4+C) lie along the axis long enough to hold them; when both are,
            # along the shorter one (YOLOv8: 84 x 8400)
            axis1, axis2 = output.shape[1], output.shape[2]
            transposed = axis2 < minimum if (axis1 < minimum) != (axis2 < minimum) else axis1 < axis2
            found = [sample.T if transposed else sample for sample in output]
        else:
            found = []
        if not found or found[0].shape[-1] < minimum:
            raise EdgekitError(f"--output-kind {self.name}: the output has shape {list(output.shape)}, not "
                               f"(N, boxes, 4+{'1+' if v5 else ''}classes) or its transpose",
                               hint="name the output that holds the boxes and scores, or use --metric")
        return [r.astype(np.float64) for r in found]

    def _kept(self, found: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """``_decode``, remembered by the rows' content: a search judges the same float outputs
        (and a kept try's outputs, on sample subsets) once per try and per check."""
        digest = hashlib.blake2b(np.ascontiguousarray(found).tobytes(), digest_size=16).digest()
        key = (self.layout, float(threshold), found.shape, found.dtype.str, digest)
        kept = _decoded.get(key)
        if kept is None:
            kept = self._decode(found, threshold)
            _decoded.put(key, kept)
        return kept

    def _decode(self, found: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """Corner boxes and classes kept after the score threshold and per-class NMS."""
        scores = found[:, 5:] * found[:, 4:5] if self.layout == "yolov5" else found[:, 4:]
        classes = scores.argmax(axis=1)
        best = scores[np.arange(len(found)), classes]
        keep = best >= threshold
        cx, cy, w, h = (found[keep, i] for i in range(4))
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        classes, best = classes[keep], best[keep]
        chosen = [_nms(boxes, best, np.flatnonzero(classes == c)) for c in np.unique(classes)]
        picked = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
        return boxes[picked], classes[picked]


@register
class Yolo(_Detections):
    name = "detections:yolo"
    layout = "yolo"
    help = "boxes cx,cy,w,h then class scores, either axis order"


@register
class YoloV5(_Detections):
    name = "detections:yolov5"
    layout = "yolov5"
    order = 11
    help = "boxes, objectness, class scores"


class _KeptBoxes:
    """The least recently used images' kept boxes, bounded in images and in boxes."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.boxes = 0

    def get(self, key: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        kept = self.entries.get(key)
        if kept is not None:
            self.entries.move_to_end(key)
        return kept

    def put(self, key: tuple[Any, ...], kept: tuple[np.ndarray, np.ndarray]) -> None:
        for array in kept:
            array.setflags(write=False)  # shared by every caller that asks again
        self.entries[key] = kept
        self.boxes += len(kept[0])
        while len(self.entries) > DECODED_KEPT or (len(self.entries) > 1 and self.boxes > DECODED_BOXES_KEPT):
            _, (boxes, _) = self.entries.popitem(last=False)
            self.boxes -= len(boxes)

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.entries.clear()
        self.boxes = 0


_decoded = _KeptBoxes()


IOU_TABLE_CELLS = 1 << 21  # IoU cells computed at once: ~16 MiB per temporary, whatever the box count


def _iou_table(boxes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of every corner box in ``boxes`` (n, 4) with every one in ``others`` (m, 4): (n, m)."""
    a, b = boxes[:, None, :], others[None, :, :]
    x1 = np.maximum(a[..., 0], b[..., 0])
    y1 = np.maximum(a[..., 1], b[..., 1])
    x2 = np.minimum(a[..., 2], b[..., 2])
    y2 = np.minimum(a[..., 3], b[..., 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    union = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1]) + (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _row_blocks(rows: int, columns: int) -> range:
    """Starts of the row blocks an IoU table is computed in, so its temporaries stay bounded
    (YOLOv8 exports 8400 boxes per image: a whole table of them is 70 M cells)."""
    return range(0, rows, max(1, IOU_TABLE_CELLS // max(columns, 1)))


def _nms(boxes: np.ndarray, scores: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Greedy NMS over the boxes ``index`` names (one class): the best box is kept and every box
    overlapping it by more than NMS_IOU dropped, then the next best left. The overlaps come from
    one IoU table (in blocks of rows for a class with thousands of boxes), not one pass over the
    remaining boxes per kept box: the search judges hundreds of boxes per image many times."""
    index = index[np.argsort(-scores[index], kind="stable")]
    corners = boxes[index]
    dropped = np.zeros(len(index), dtype=bool)
    kept = []
    blocks = _row_blocks(len(index), len(index))
    for start in blocks:
        rows = ~(_iou_table(corners[start:start + blocks.step], corners) <= NMS_IOU)  # a NaN overlap drops too
        for offset, row in enumerate(rows):
            i = start + offset
            if not dropped[i]:
                kept.append(i)
                dropped[i + 1:] |= row[i + 1:]
    return index[np.array(kept, dtype=np.int64)]


def _greedy_matches(reference: np.ndarray, candidate: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (float box, INT8 box) by descending IoU, each box used once, IoU >= DETECTION_IOU.
    The pairs above the threshold are sorted once (ties in row-major order, as an argmax scan
    takes them) and taken while both boxes are free: the same pairs as picking the largest IoU
    again and again, without a scan of the whole table per match (hundreds of boxes per image)."""
    if not len(reference) or not len(candidate):
        return []
    found = []  # (rows, columns, IoU) of the pairs above the bar, block by block in row-major order
    blocks = _row_blocks(len(reference), len(candidate))
    for start in blocks:
        table = _iou_table(reference[start:start + blocks.step], candidate)
        rows, cols = np.nonzero(table >= DETECTION_IOU)
        found.append((rows + start, cols, table[rows, cols]))
    rows, cols, ious = (np.concatenate(parts) for parts in zip(*found))
    order = np.argsort(-ious, kind="stable")
    pairs, used_rows, used_cols = [], set(), set()
    for i, j in zip(rows[order].tolist(), cols[order].tolist()):
        if i in used_rows or j in used_cols:
            continue
        pairs.append((i, j))
        used_rows.add(i)
        used_cols.add(j)
    return pairs
