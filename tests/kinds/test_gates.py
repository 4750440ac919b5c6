"""Task metrics on hand-made outputs: the rules do what they say."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import EdgekitError
from edgekit.kinds import KINDS, evaluate, parse_kind, resolve_kinds
from edgekit.comparison.user_metric import run_metric


def detections(reference, candidate, layout, threshold):
    return KINDS[f"detections:{layout}"].evaluate(reference, candidate, None, 1.0, None, threshold)


def segmentation(reference, candidate, axis=None):
    return KINDS["segmentation"].evaluate(reference, candidate, None, 1.0, axis, None)


def classification(reference, candidate, targets, max_accuracy_drop_pp):
    return KINDS["classes"].evaluate(reference, candidate, targets, max_accuracy_drop_pp, None, None)


def yolo_rows(boxes, classes, scores, n_classes=3):
    """(B, 4+C) rows: cx, cy, w, h, one-hot-ish class scores."""
    rows = np.zeros((len(boxes), 4 + n_classes), np.float32)
    rows[:, :4] = boxes
    rows[np.arange(len(boxes)), 4 + np.asarray(classes)] = scores
    return rows


def test_identical_detections_agree_fully_in_either_axis_order():
    rows = yolo_rows([[50, 50, 20, 20], [150, 80, 30, 40], [10, 10, 5, 5]], [0, 2, 1], [0.9, 0.8, 0.1])
    batch = np.stack([rows, rows])
    result = detections(batch, batch.copy(), "yolo", 0.25)
    assert result.passed and result.values["float_detections"] == 4  # the 0.1 box is below the threshold
    assert result.values["recall"] == result.values["precision"] == result.values["class_agreement"] == 1.0
    transposed = batch.transpose(0, 2, 1)  # YOLOv8 exports (N, 4+C, boxes)
    assert detections(transposed, transposed.copy(), "yolo", 0.25).values["float_detections"] == 4


def test_collapsed_scores_fail_on_class_agreement_and_count():
    """The issue's detector: INT8 scores collapsed to two values, classes flip and boxes appear."""
    ref = yolo_rows([[50, 50, 20, 20], [150, 80, 30, 40]], [0, 2], [0.9, 0.8])[None]
    out = ref.copy()
    out[0, :, 4:] = [[0.3, 0.31, 0.3], [0.31, 0.3, 0.3]]  # every class above threshold, argmax wrong
    result = detections(ref, out, "yolo", 0.25)
    assert not result.passed and result.values["class_agreement"] == 0.0


def test_nms_keeps_one_of_two_overlapping_boxes_of_a_class():
    rows = yolo_rows([[50, 50, 20, 20], [51, 50, 20, 20]], [0, 0], [0.9, 0.8])[None]
    assert detections(rows, rows.copy(), "yolo", 0.25).values["float_detections"] == 1


def test_yolov5_scores_are_objectness_times_class():
    rows = np.array([[[50, 50, 20, 20, 0.2, 0.9, 0.1]]], np.float32)  # 0.2 * 0.9 = 0.18 < 0.25
    assert detections(rows, rows.copy(), "yolov5", 0.25).values["float_detections"] == 0


def test_segmentation_iou_along_the_class_axis_in_either_layout():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 8, 8, 4)).astype(np.float32)
    assert segmentation(logits, logits.copy()).values["mean_iou"] == 1.0
    flipped = logits.copy()
    flipped[..., 0] += 10  # every pixel becomes class 0
    result = segmentation(logits, flipped)
    assert not result.passed and result.values["mean_iou"] < 0.5
    channels_first = logits.transpose(0, 3, 1, 2)
    assert segmentation(channels_first, channels_first.copy(), 1).values["classes"] == 4


def test_classification_without_labels_bounds_the_drop_by_agreement():
    ref = np.eye(4)[[0, 1, 2, 3] * 25]
    out = ref.copy()
    out[0] = np.eye(4)[1]  # one of 100 decisions changed: 99% agreement passes a 1 pp limit
    assert classification(ref, out, None, 1.0).passed
    out[1] = np.eye(4)[0]
    assert not classification(ref, out, None, 1.0).passed
    labelled = classification(ref, out, np.array([0, 1, 2, 3] * 25), 5.0)
    assert labelled.passed and labelled.values["accuracy_drop_pp"] == pytest.approx(2.0)


def test_kinds_are_parsed_and_checked_against_the_outputs():
    assert parse_kind("detections:yolo:0.4") == ("detections:yolo", 0.4)
    with pytest.raises(EdgekitError, match="unknown output kind"):
        parse_kind("boxes")
    with pytest.raises(EdgekitError, match="between 0 and 1"):
        parse_kind("detections:yolo:7")
    assert resolve_kinds({"": "classes"}, ["scores"]) == {"scores": "classes"}
    with pytest.raises(EdgekitError, match="has 2 outputs"):
        resolve_kinds({"": "classes"}, ["a", "b"])
    with pytest.raises(EdgekitError, match="no output 'c'"):
        resolve_kinds({"c": "classes"}, ["a", "b"])
    with pytest.raises(EdgekitError, match="rank 2"):
        resolve_kinds({"a": "segmentation"}, ["a"], {"a": [-1, 10]})


def test_a_metric_function_must_return_named_numbers():
    ref = {"y": np.ones((3, 2))}
    result = run_metric("m:f", lambda f, q, labels: {"recall": np.float32(0.5), "passed": np.bool_(True)}, ref, ref, None)
    assert result.values == {"recall": 0.5} and result.passed is True
    with pytest.raises(EdgekitError, match="returned list"):
        run_metric("m:f", lambda f, q, labels: [1], ref, ref, None)
    with pytest.raises(EdgekitError, match="'recall' is NaN"):
        run_metric("m:f", lambda f, q, labels: {"recall": float("nan")}, ref, ref, None)
    with pytest.raises(EdgekitError, match="raised ZeroDivisionError"):
        run_metric("m:f", lambda f, q, labels: 1 / 0, ref, ref, None)
    with pytest.raises(EdgekitError, match="'passed' is 'yes'"):
        run_metric("m:f", lambda f, q, labels: {"passed": "yes"}, ref, ref, None)


def test_multilabel_heads_are_judged_by_each_labels_decision_not_argmax():

    rng = np.random.default_rng(5)
    reference = 1 / (1 + np.exp(-rng.normal(0, 6, (1000, 6))))
    healthy = np.clip(reference + rng.normal(0, 0.002, reference.shape), 0, 1)
    result = evaluate("multilabel", reference, healthy, None, 1.0)
    assert result.passed and result.values["label_agreement"] > 0.99
    # argmax across independent labels means nothing: a healthy head can disagree on it often
    broken = reference.copy()
    flip = rng.uniform(size=reference.shape) < 0.045
    broken[flip] = 1 - broken[flip]
    result = evaluate("multilabel", reference, broken, None, 1.0)
    assert result.passed is False and 0.94 < result.values["label_agreement"] < 0.97
    wide = 1 / (1 + np.exp(-rng.normal(0, 6, (1000, 12))))
    one_label = wide.copy()
    one_label[:150, 2] = 1 - one_label[:150, 2]  # one label of twelve flips on 15% of the samples
    result = evaluate("multilabel", wide, one_label, None, 2.0)
    assert result.values["label_agreement"] > 0.98 and result.values["worst_label"] == 2  # overall passes ...
    assert result.passed is False  # ... but that label fails its own floor (90%)
    assert parse_kind("multilabel:0.3") == ("multilabel", 0.3)
    assert evaluate("multilabel:0.3", reference, healthy, None, 1.0).values["threshold"] == 0.3


def test_bins_are_judged_by_the_peak_and_its_height():

    rng = np.random.default_rng(6)
    centre = rng.uniform(20, 340, (200, 1))
    reference = 0.9 * np.exp(-0.5 * ((np.arange(360)[None, :] - centre) / 2.0) ** 2)
    good = np.clip(reference + rng.normal(0, 0.01, reference.shape), 0, 1)  # ~15 dB, the peak kept
    result = evaluate("bins", reference, good, None, 1.0)
    assert result.passed and result.values["mean_peak_height_error"] < 0.05
    flattened = reference * 0.6  # every peak where float's is, but voicing confidence 0.9 -> 0.54
    result = evaluate("bins", reference, flattened, None, 1.0)
    assert result.values["peak_within_one_bin"] == 1.0 and result.passed is False
