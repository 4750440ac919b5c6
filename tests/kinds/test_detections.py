"""Detection matching: NMS and the float/INT8 box pairing computed from IoU tables in blocks keep
exactly what the one-box-at-a-time definitions keep, on crowded images of hundreds of boxes."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.kinds import KINDS, detections


def one_at_a_time_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1, y1 = np.maximum(box[0], boxes[:, 0]), np.maximum(box[1], boxes[:, 1])
    x2, y2 = np.minimum(box[2], boxes[:, 2]), np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    union = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def one_at_a_time_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Per class: keep the best box, drop the rest overlapping it by more than NMS_IOU, repeat."""
    chosen = []
    for c in np.unique(classes):
        index = np.flatnonzero(classes == c)
        index = index[np.argsort(-scores[index], kind="stable")]
        while index.size:
            chosen.append(index[0])
            index = index[1:][one_at_a_time_iou(boxes[index[0]], boxes[index[1:]]) <= detections.NMS_IOU]
    return np.array(sorted(chosen), dtype=np.int64)


def argmax_matches(reference: np.ndarray, candidate: np.ndarray) -> list[tuple[int, int]]:
    """Take the largest IoU left (first in row-major order on ties) while it reaches the bar."""
    if not len(reference) or not len(candidate):
        return []
    table = np.stack([one_at_a_time_iou(box, candidate) for box in reference])
    pairs = []
    while True:
        i, j = np.unravel_index(np.argmax(table), table.shape)
        if table[i, j] < detections.DETECTION_IOU:
            return pairs
        pairs.append((int(i), int(j)))
        table[i, :] = -1
        table[:, j] = -1


def crowded_boxes(rng: np.random.Generator, count: int) -> np.ndarray:
    """Corner boxes clustered on a few objects (as a detector's raw anchors are), some repeated
    exactly (ties), some empty."""
    centres = rng.uniform(0, 64, (6, 2))[rng.integers(0, 6, count)] + rng.normal(0, 2, (count, 2))
    sizes = rng.uniform(0, 16, (count, 2))
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=1)
    boxes[rng.integers(0, count, count // 10)] = boxes[0]
    return boxes


@pytest.mark.parametrize("cells", [detections.IOU_TABLE_CELLS, 997])  # whole tables, and many small blocks
def test_nms_and_matching_in_blocks_keep_what_one_box_at_a_time_keeps(monkeypatch, cells):
    monkeypatch.setattr(detections, "IOU_TABLE_CELLS", cells)
    rng = np.random.default_rng(0)
    for count in (1, 7, 300):
        boxes = crowded_boxes(rng, count)
        scores = np.round(rng.uniform(0, 1, count), 2)  # rounded: equal scores, ordered stably
        classes = rng.integers(0, 3, count)
        chosen = np.sort(np.concatenate([detections._nms(boxes, scores, np.flatnonzero(classes == c))
                                         for c in np.unique(classes)]))
        assert chosen.tolist() == one_at_a_time_nms(boxes, scores, classes).tolist()
        others = boxes + rng.normal(0, 0.5, boxes.shape) * (rng.uniform(0, 1, (count, 1)) < 0.7)
        assert detections._greedy_matches(boxes, others) == argmax_matches(boxes, others)
        assert detections._greedy_matches(boxes, others[:0]) == []


def test_a_crowded_batch_scores_as_the_one_box_at_a_time_rules_score_it():
    """The kind's whole evaluation on YOLOv8-style rows (N, 4+C, B): detections counted from the
    one-box-at-a-time rules give the same recall and precision."""
    rng = np.random.default_rng(1)
    reference = np.zeros((3, 7, 400), np.float32)
    for sample in reference:
        corners = crowded_boxes(rng, 400)
        sample[:2] = ((corners[:, :2] + corners[:, 2:]) / 2).T
        sample[2:4] = (corners[:, 2:] - corners[:, :2]).T
        sample[4:] = rng.uniform(0, 1, (3, 400))
    candidate = reference + rng.normal(0, 0.05, reference.shape).astype(np.float32)
    result = KINDS["detections:yolo"].evaluate(reference, candidate, None, 1.0, None, 0.25)

    def kept(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = rows.T.astype(np.float64)
        classes = rows[:, 4:].argmax(axis=1)
        best = rows[np.arange(len(rows)), 4 + classes]
        rows, classes, best = rows[best >= 0.25], classes[best >= 0.25], best[best >= 0.25]
        cx, cy, w, h = rows[:, :4].T
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        picked = one_at_a_time_nms(boxes, best, classes)
        return boxes[picked], classes[picked]

    matched = n_ref = n_out = 0
    for ref, out in zip(reference, candidate):
        (rb, _), (ob, _) = kept(ref), kept(out)
        matched += len(argmax_matches(rb, ob))
        n_ref, n_out = n_ref + len(rb), n_out + len(ob)
    assert n_ref > 300 and result.values["float_detections"] == n_ref and result.values["int8_detections"] == n_out
    assert result.values["recall"] == matched / n_ref and result.values["precision"] == matched / n_out


def test_remembered_detections_follow_the_threshold_and_content_and_stay_bounded(monkeypatch):
    """The kept boxes of an image are remembered by content, layout and threshold (a search judges
    the same float outputs once per try); another threshold or changed rows decode afresh."""
    monkeypatch.setattr(detections, "DECODED_KEPT", 5)
    monkeypatch.setattr(detections, "_decoded", detections._KeptBoxes())
    rng = np.random.default_rng(2)
    rows = np.zeros((4, 200, 7), np.float32)
    for sample in rows:
        corners = crowded_boxes(rng, 200)
        sample[:, :2], sample[:, 2:4] = (corners[:, :2] + corners[:, 2:]) / 2, corners[:, 2:] - corners[:, :2]
        sample[:, 4:] = rng.uniform(0, 1, (200, 3))
    yolo = KINDS["detections:yolo"]

    def counted(threshold: float, remembered: bool) -> float:
        if not remembered:
            detections._decoded.clear()
        return yolo.evaluate(rows, rows, None, 1.0, 2, threshold).values["float_detections"]

    low = counted(0.25, remembered=False)
    high = counted(0.6, remembered=True)
    assert high == counted(0.6, remembered=False) and low == counted(0.25, remembered=True) and high < low
    rows[0, :, 4:] = 0  # changed rows: no box of image 0 left
    assert counted(0.25, remembered=True) == counted(0.25, remembered=False) < low
    assert len(detections._decoded) <= 5
    kept_boxes, _ = next(iter(detections._decoded.entries.values()))
    assert not kept_boxes.flags.writeable
    monkeypatch.setattr(detections, "DECODED_BOXES_KEPT", 40)  # fewer boxes than two images keep
    fresh = counted(0.25, remembered=False)
    assert counted(0.25, remembered=True) == fresh
    assert len(detections._decoded) == 1
    assert detections._decoded.boxes == sum(len(b) for b, _ in detections._decoded.entries.values())
