import numpy as np
import pytest

from edgekit.comparison.metrics import compare_outputs


def test_identical_outputs_are_perfect():
    ref = np.random.default_rng(0).dirichlet(np.ones(5), 20).astype(np.float32)  # class probabilities
    result = compare_outputs(ref, ref.copy())
    assert result.top1_agreement == 1.0
    assert result.cosine == pytest.approx(1.0)
    assert result.sqnr_db == float("inf")
    assert result.max_abs_error == 0.0


def test_sqnr_matches_its_definition():
    ref = np.ones((4, 2))
    noisy = ref + 0.1  # noise power 0.01 per element vs signal power 1 -> 20 dB
    assert compare_outputs(ref, noisy).sqnr_db == pytest.approx(20.0)


def test_accuracy_and_drop_in_percentage_points():
    ref = np.eye(4)
    cand = np.eye(4)[[0, 1, 2, 0]]  # last sample now predicts class 0
    result = compare_outputs(ref, cand, targets=np.array([0, 1, 2, 3]))
    assert result.float_accuracy == 1.0
    assert result.accuracy == 0.75
    assert result.accuracy_drop_pp == pytest.approx(25.0)
    assert result.top1_agreement == 0.75


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError):
        compare_outputs(np.zeros((2, 3)), np.zeros((2, 4)))


def test_an_all_zero_output_against_a_nonzero_reference_has_cosine_zero():
    # a collapsed INT8 output (every value quantized to zero) must not look perfect
    ref = np.full((3, 4), 0.001)
    result = compare_outputs(ref, np.zeros((3, 4)))
    assert result.cosine == 0.0
    assert result.sqnr_db == pytest.approx(0.0)
    assert compare_outputs(np.zeros((2, 3)), np.zeros((2, 3))).cosine == 1.0


def test_constant_outputs_are_degenerate_whatever_else_agrees():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(20, 10)).astype(np.float32)
    constant = np.zeros_like(reference)
    comparison = compare_outputs(reference, constant)
    assert comparison.degenerate == "the outputs are the same for all 20 samples while the float model's differ"
    assert comparison.distinct_values == 1
    same_row = np.tile(reference[:1], (20, 1))
    assert "the same for all 20 samples" in compare_outputs(reference, same_row).degenerate
    assert compare_outputs(reference, reference + 0.01).degenerate is None
    flat_reference = np.ones((5, 3), np.float32)
    assert compare_outputs(flat_reference, flat_reference).degenerate is None  # nothing to lose


def test_a_collapsed_score_block_joined_to_box_coordinates_shows_in_the_worst_slice():
    """Boxes 0..300 and scores 0..1 joined by a Concat: the whole output's SQNR hides collapsed scores."""
    from edgekit.kinds import infer

    rng = np.random.default_rng(0)
    reference = np.concatenate([rng.uniform(0, 300, (50, 4)), rng.dirichlet(np.ones(3), 50)], axis=1)
    candidate = reference.copy()
    candidate[:, 4:] = np.round(candidate[:, 4:] * 2) / 2  # three distinct score values left
    structure = {"op": "concat", "axis": 1, "node": "head", "parts": [{"size": 4, "op": "values"},
                                                                      {"size": 3, "op": "softmax"}]}
    kind = infer("out", reference, structure)
    assert [(g.start, g.stop, g.op) for g in kind.groups] == [(0, 4, "values"), (4, 7, "softmax")]
    comparison = compare_outputs(reference.astype(np.float32), candidate.astype(np.float32), kind=kind)
    assert comparison.sqnr_db > 50  # the whole output looks fine
    worst = comparison.worst_slice
    assert worst["channels"] == [4, 7] and worst["axis"] == 1 and worst["sqnr_db"] < 10
    assert worst["distinct_values"] == 3
    # value ranges alone never split an output: without the graph there is one quantity
    assert compare_outputs(reference, candidate).worst_slice is None


def test_dead_units_are_counted_not_failed():
    """Two units always zero in float (dead ReLUs): counted, never a group with SQNR -inf."""
    rng = np.random.default_rng(2)
    reference = rng.normal(size=(30, 16))
    reference[:, 5:7] = 0
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    candidate = reference + rng.normal(scale=1e-3, size=reference.shape)
    comparison = compare_outputs(reference, candidate)
    assert comparison.dead_units == 2 and comparison.worst_slice is None and comparison.sqnr_db > 40


def test_top1_agreement_only_for_class_scores():
    rng = np.random.default_rng(1)
    scores = rng.dirichlet(np.ones(5), 20).astype(np.float32)
    assert compare_outputs(scores, scores).top1_agreement == 1.0
    detections = np.concatenate([rng.uniform(0, 300, (20, 4)), scores], axis=1).astype(np.float32)
    masks = rng.uniform(0, 1, (20, 8, 8, 3)).astype(np.float32)
    for output in (detections, masks):
        assert np.isnan(compare_outputs(output, output).top1_agreement)


def test_outputs_holding_nan_are_named_as_not_finite_not_as_constant():
    """An INT8 artifact whose outputs hold NaN read as "the same for all 80 samples ... 171
    distinct values" (NaN compares false, so every spread looked like zero)."""
    from edgekit.packaging.gates import check
    from edgekit.packaging.validate import Measured

    rng = np.random.default_rng(0)
    reference = rng.normal(size=(80, 12)).astype(np.float32)
    candidate = reference + rng.normal(0, 0.01, reference.shape).astype(np.float32)
    candidate[5:17, 3] = np.nan
    candidate[20, 0] = np.inf
    comparison = compare_outputs(reference, candidate)
    assert comparison.degenerate == "the artifact's outputs hold NaN (12 values) and inf (1 values) in 13 of 80 samples"
    failures = check("onnx", Measured(outputs={"y": comparison}, summary=comparison), 20.0, {})
    assert [f.cause for f in failures] == ["degenerate"]
    assert "carries no signal: the artifact's outputs hold NaN" in failures[0].what
    assert "distinct values" not in failures[0].what
