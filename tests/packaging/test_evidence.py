"""Gates that carry their evidence: counts and intervals, a pass the sample cannot support is not
decidable, and the search's confirmation tells overfitting from sampling noise."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.kinds import evaluate, infer
from edgekit.kinds.base import Rate, wilson
from edgekit.packaging.search.confirmation import confirm
from edgekit.packaging.validate import Judging, Measured
from edgekit.packaging.verdict import MIN_SAMPLES_FOR_A_PASS, samples_to_decide, undecided
from edgekit.validation_record import Undecided
from edgekit.comparison.metrics import compare_outputs
from edgekit.validation_record import ArtifactRecord, MeasuredRecord, ValidationRecord, Verdict


def scores(n: int, classes: int = 7, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * 3
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)


def flipped(reference: np.ndarray, rows: list[int]) -> np.ndarray:
    """The reference with the top class of ``rows`` moved to another class (a changed decision)."""
    out = reference.copy()
    for row in rows:
        top = int(out[row].argmax())
        out[row, top], out[row, (top + 1) % out.shape[1]] = out[row, (top + 1) % out.shape[1]], out[row, top] + 0.01
    return out


def measured(reference: np.ndarray, candidate: np.ndarray) -> tuple[Measured, Judging]:
    kind = infer("probs", reference, {"op": "softmax", "axis": 1})
    judging = Judging(kinds={"probs": kind}, max_accuracy_drop=1.0)
    task = evaluate(kind.spec, reference, candidate, None, 1.0, kind.axis)
    comparison = compare_outputs(reference, candidate, kind=kind)
    return Measured({"probs": comparison}, comparison, {"probs": task}, candidate={"probs": candidate}), judging


def test_wilson_interval_and_the_samples_a_gate_needs():
    low, high = wilson(119, 120)
    assert 0.953 < low < 0.956 and 0.998 < high < 0.999
    assert wilson(0, 0) == (0.0, 1.0)
    assert Rate("top1_agreement", 18, 18, 0.99, 0.01).needed == 100
    assert not Rate("top1_agreement", 18, 18, 0.99, 0.01).decidable
    assert Rate("top1_agreement", 119, 120, 0.99, 0.01).decidable
    assert Rate("recall", 9, 9, 0.9, 0.1).decidable is False and Rate("recall", 10, 10, 0.9, 0.1).decidable
    # exact agreement asked for (--max-accuracy-drop 0): any sample can refute it, none can be too small
    assert Rate("top1_agreement", 5, 5, 1.0, 0.0).needed is None


@pytest.mark.parametrize("n, flips, verdict", [(18, 0, "not decidable"), (60, 0, "not decidable"),
                                               (120, 1, "pass"), (500, 5, "pass"), (60, 1, "refuse"),
                                               (500, 6, "refuse")])
def test_the_documented_rule_on_18_60_120_and_500_samples(n, flips, verdict):
    reference = scores(n)
    found, _ = measured(reference, flipped(reference, list(range(flips))))
    task = found.tasks["probs"]
    assert task.evidence[0].k == n - flips and task.evidence[0].n == n
    open_gates = undecided(found, n)
    outcome = "refuse" if not task.passed else ("not decidable" if open_gates else "pass")
    assert outcome == verdict
    if verdict == "not decidable":
        assert samples_to_decide(open_gates) == 100


def test_any_pass_needs_a_floor_of_samples_whatever_its_gate():
    reference = np.random.default_rng(1).normal(size=(MIN_SAMPLES_FOR_A_PASS - 2, 16)).astype(np.float32)
    comparison = compare_outputs(reference, reference * 1.001)
    found = Measured({"y": comparison}, comparison)
    assert [u.gate for u in undecided(found, len(reference))] == ["samples"]


def test_an_undecided_artifact_is_recorded_as_neither_passed_nor_failed():
    record = ArtifactRecord(verdict=Verdict.NOT_DECIDABLE, metrics=MeasuredRecord(summary={"sqnr_db": 40.0}),
                            undecided=(Undecided("probs", "top1_agreement", 18, 100, "samples", 100),))
    validation = ValidationRecord(verdict=Verdict.NOT_DECIDABLE, artifacts={"tflite": record})
    written = validation.to_dict()
    assert written["passed"] is None and written["state"] == "not decidable"
    assert written["artifacts"]["tflite"]["verdict"] == "not decidable"
    again = ValidationRecord.from_dict(written)
    assert again.state == "not decidable" and not again.artifact("tflite").decided
    assert again.artifact("tflite").failed_gates() is None


def test_one_flip_in_the_confirmation_half_of_120_is_sampling_noise_and_ships():
    reference = scores(120)
    candidate = flipped(reference, [1])  # row 1: the odd rows are the half no try was judged by
    found, judging = measured(reference, candidate)
    assert found.tasks["probs"].passed and not undecided(found, 120)
    test = confirm(found, {"probs": reference}, np.arange(0, 120, 2), np.arange(1, 120, 2), judging, 20.0)
    assert test is not None and not test.overfit
    assert test.p_values["probs task:top1_agreement"] == pytest.approx(0.5)  # one flip: either half, equally


def test_a_configuration_that_fails_the_half_it_never_saw_is_refused():
    reference = scores(120)
    candidate = flipped(reference, [1, 3, 5, 7, 9, 11])  # every flip in the unseen (odd) half
    found, judging = measured(reference, candidate)
    assert not found.tasks["probs"].passed  # 114/120 fails the 99% gate on all samples
    test = confirm(found, {"probs": reference}, np.arange(0, 120, 2), np.arange(1, 120, 2), judging, 20.0)
    assert "probs task:top1_agreement" in test.overfit


def test_overfitting_is_refused_even_where_all_samples_pass():
    reference = scores(500)
    candidate = flipped(reference, [1, 3, 5, 7, 9])  # 495/500 = 99% passes; all five in the unseen half
    found, judging = measured(reference, candidate)
    assert found.tasks["probs"].passed and not undecided(found, 500)
    test = confirm(found, {"probs": reference}, np.arange(0, 500, 2), np.arange(1, 500, 2), judging, 20.0)
    assert "probs task:top1_agreement" in test.overfit and test.p_values["probs task:top1_agreement"] < 0.05


def test_the_confirmation_judges_sqnr_gates_too():
    rng = np.random.default_rng(3)
    reference = rng.normal(size=(120, 32)).astype(np.float32)
    noisy = reference.copy()
    noisy[1::2] += rng.normal(scale=0.5, size=(60, 32)).astype(np.float32)  # the unseen half is far worse
    comparison = compare_outputs(reference, noisy)
    found = Measured({"y": comparison}, comparison, candidate={"y": noisy})
    test = confirm(found, {"y": reference}, np.arange(0, 120, 2), np.arange(1, 120, 2), Judging(), 20.0)
    assert "y sqnr" in test.overfit
    even = reference + rng.normal(scale=0.01, size=reference.shape).astype(np.float32)
    comparison = compare_outputs(reference, even)
    found = Measured({"y": comparison}, comparison, candidate={"y": even})
    assert not confirm(found, {"y": reference}, np.arange(0, 120, 2), np.arange(1, 120, 2), Judging(), 20.0).overfit


def test_an_unseen_half_worse_than_chance_but_still_passing_is_not_overfit():
    rng = np.random.default_rng(4)
    reference = rng.normal(size=(200, 32)).astype(np.float32)
    candidate = reference.copy()
    candidate[0::2] += rng.normal(scale=0.01, size=(100, 32)).astype(np.float32)  # ~40 dB where chosen
    candidate[1::2] += rng.normal(scale=0.04, size=(100, 32)).astype(np.float32)  # ~28 dB unseen: passes 20 dB
    comparison = compare_outputs(reference, candidate)
    found = Measured({"y": comparison}, comparison, candidate={"y": candidate})
    test = confirm(found, {"y": reference}, np.arange(0, 200, 2), np.arange(1, 200, 2), Judging(), 20.0)
    assert test.p_values["y sqnr"] < test.threshold  # worse than sampling noise allows ...
    assert not test.overfit  # ... yet it passes its floor on samples the search never judged by
