"""--auto-fix keeps a rebuild only when the gates that failed improve on their own metrics."""

from __future__ import annotations

import numpy as np

from edgekit.packaging.autofix import Candidate, improves
from edgekit.packaging.gates import check
from edgekit.packaging.validate import Measured
from edgekit.quantize.kinds import infer
from edgekit.quantize.metrics import compare_outputs
from edgekit.quantize.tasks import evaluate

STRUCTURE = {"op": "concat", "axis": 1, "node": "head", "parts": [{"size": 4, "op": "values"},
                                                                  {"size": 3, "op": "sigmoid"}]}


def _detections(rng: np.random.Generator) -> np.ndarray:
    """[N, 7, A]: boxes in pixels, sigmoid scores, a few confident anchors per image."""
    n, anchors = 30, 40
    boxes = np.stack([rng.uniform(20, 300, (n, anchors)), rng.uniform(20, 300, (n, anchors)),
                      rng.uniform(10, 40, (n, anchors)), rng.uniform(10, 40, (n, anchors))], axis=1)
    scores = rng.uniform(0, 0.1, (n, 3, anchors))
    confident = rng.random((n, anchors)) < 0.15
    scores[:, 0][confident] = rng.uniform(0.5, 0.9, confident.sum())
    return np.concatenate([boxes, scores], axis=1)


def _candidate(reference: np.ndarray, candidate: np.ndarray) -> Candidate:
    kind = infer("out", reference, STRUCTURE)
    task = evaluate(kind.spec, reference, candidate, None, 1.0, kind.axis)
    measured = Measured({"out": compare_outputs(reference, candidate, kind=kind)},
                        compare_outputs(reference, candidate, kind=kind), {"out": task})
    return Candidate(None, None, measured, check("onnx", measured, 20.0, {}, {"out": kind}))  # type: ignore[arg-type]


def test_d_a_rebuild_with_higher_sqnr_but_lower_recall_is_not_kept():
    rng = np.random.default_rng(0)
    reference = _detections(rng)
    first = reference.copy()
    confident = np.argwhere(reference[:, 4] >= 0.25)
    dropped = confident[::2]  # half the detections lost: their scores collapsed to zero
    first[dropped[:, 0], 4, dropped[:, 1]] = 0.0
    # a "fix" that moves every score closer to float on average (higher SQNR), but more of them
    # below the score threshold: fewer detections
    second = reference.copy()
    second[:, 4:] = reference[:, 4:] * 0.35
    before, after = _candidate(reference, first), _candidate(reference, second)
    assert before.failures and after.failures
    task_before = next(f for f in before.failures if f.cause == "task")
    task_after = next(f for f in after.failures if f.cause == "task")
    slice_before = next(f for f in before.failures if f.cause == "slice")
    slice_after = next(f for f in after.failures if f.cause == "slice")
    assert slice_after.margin > slice_before.margin  # the SQNR went up...
    assert task_after.margin < task_before.margin  # ...while the detections got worse
    assert not improves(after, before)
    # the rebuild that makes the scores match float is kept
    good = reference.copy()
    good[:, 4:] += rng.normal(0, 1e-3, good[:, 4:].shape)
    assert improves(_candidate(reference, good), before)


def test_a_gate_that_passed_must_not_start_failing():
    rng = np.random.default_rng(1)
    reference = _detections(rng)
    only_scores = reference.copy()
    only_scores[:, 4:] = np.round(only_scores[:, 4:] * 4) / 4
    worse_boxes = reference.copy()
    worse_boxes[:, :4] = np.round(worse_boxes[:, :4] / 100) * 100  # scores fixed, boxes collapsed
    before = _candidate(reference, only_scores)
    after = _candidate(reference, worse_boxes)
    assert any(f.key not in {g.key for g in before.failures} for f in after.failures)
    assert not improves(after, before)
