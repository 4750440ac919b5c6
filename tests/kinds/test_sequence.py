"""The sequence kind: CTC outputs are inferred as sequences and judged by their decoded text."""

from __future__ import annotations

import numpy as np

from edgekit.kinds import evaluate, infer
from edgekit.kinds.sequence import blank_class, decode, edit_distance


def _ctc(texts: list[list[int]], steps: int = 20, classes: int = 6, seed: int = 0) -> np.ndarray:
    """Log-probabilities [N, T, C]: each symbol held for two steps, blanks (class 0) between."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 0.3, (len(texts), steps, classes))
    logits[:, :, 0] += 4
    for i, text in enumerate(texts):
        for k, symbol in enumerate(text):
            logits[i, 3 * k + 1: 3 * k + 3, symbol] += 8
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)


def test_greedy_ctc_collapses_repeats_and_drops_blanks():
    out = _ctc([[1, 1, 2], [3]])
    assert blank_class(out) == 0
    assert decode(out, 0) == [(1, 1, 2), (3,)]  # a repeated symbol survives a blank between
    assert decode(out, None)[1][:4] == (0, 3, 3, 0)  # per step
    assert edit_distance((1, 2, 3), (1, 3)) == 1 and edit_distance((), (4, 4)) == 2


def test_ctc_log_probabilities_are_a_sequence_from_their_values():
    kind = infer("logprobs", _ctc([[1, 2], [3, 4, 5]] * 5), None)
    assert kind.kind == "sequence" and kind.axis == 2 and "CTC blank" in kind.evidence


def test_a_ctc_softmax_is_a_sequence_from_the_graph_and_per_step_classes_without_a_blank_are_not():
    probabilities = np.exp(_ctc([[1, 2]] * 8))
    assert infer("p", probabilities, {"op": "softmax", "axis": 2, "node": "/Softmax"}).kind == "sequence"
    tags = np.eye(6, dtype=np.float32)[np.random.default_rng(1).integers(0, 6, (8, 10))]  # no class dominates
    assert infer("tags", tags, {"op": "softmax", "axis": 2, "node": "/Softmax"}).kind == "classes"


def test_one_changed_character_in_one_line_of_fifty_fails_the_default_gate():
    texts = [[1, 2, 3]] * 50
    reference = _ctc(texts)
    candidate = reference.copy()
    candidate[0, 4, 2] += 20  # the second symbol of line 0 read as 2 -> still 2: unchanged
    candidate[1, 4:6, 2] -= 20
    candidate[1, 4:6, 5] += 20  # line 1: 1 2 3 -> 1 5 3
    result = evaluate("sequence", reference, candidate, None, 1.0)
    assert result.values["sequence_agreement"] == 49 / 50
    assert result.values["char_error_rate"] == 1 / 150
    assert not result.passed and "decoded sequences equal to float's >= 99%" in result.rule
    assert evaluate("sequence", reference, reference, None, 1.0).passed


def test_raw_ctc_logits_are_a_sequence_but_a_detectors_thousands_of_anchors_are_not():
    logits = _ctc([[1, 2], [3, 4, 5]] * 5) * 3 + 7  # no longer log-probabilities
    assert infer("logits", logits, None).kind == "sequence"
    anchors = np.random.default_rng(0).normal(0, 1, (4, 2000, 5)).astype(np.float32)
    anchors[:, :, 0] += 5  # background wins everywhere
    assert infer("scores", anchors, None).kind != "sequence"
