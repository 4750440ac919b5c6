"""``sequence``: ``[N, T, C]`` distributions over C classes at each of T steps (a CTC recognizer's
columns, a tagger's tokens), judged by what their users read: the decoded sequences.

A CTC output is decoded greedily (best path: argmax per step, repeats collapsed, the blank
dropped); the blank is the class that wins most steps of float's output when it is the first
or the last class (where CTC exports put it) and wins at least ``BLANK_MIN_SHARE`` of them.
Without such a class each step's argmax is the sequence (per-token decoding). Per-step top-1
agreement says little here: blanks dominate it, and one flipped step can merge or split two
characters. The gate is the share of samples whose decoded sequence equals float's: each
changed line costs at most one correct line, so agreement >= 1 - max drop bounds the line
accuracy drop as top-1 agreement bounds a classifier's. The edit distance to float's decoding
(character error rate against float) is reported beside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import register
from .base import Graph, Kind, OutputKind, Rate, TaskResult, agreement, shape_text

BLANK_MIN_SHARE = 0.25  # a CTC blank wins at least this share of steps (real lines: most of them)
# raw scores need stronger evidence, and fewer steps than a detector's anchors (thousands)
LOGITS_BLANK_SHARE, MAX_LOGIT_STEPS = 0.4, 1024
MIN_STEPS = 4  # fewer steps than this is a small classifier head, not a sequence


def blank_class(reference: np.ndarray, min_share: float = BLANK_MIN_SHARE) -> int | None:
    """The CTC blank of ``[N, T, C]`` float outputs: the first or last class when it is the
    argmax of the most steps and of at least ``min_share`` of them; None: no blank."""
    best = reference.argmax(axis=-1).reshape(-1)
    if not best.size:
        return None
    counts = np.bincount(best, minlength=reference.shape[-1])
    top = int(counts.argmax())
    if top not in (0, reference.shape[-1] - 1) or counts[top] < min_share * best.size:
        return None
    return top


def decode(output: np.ndarray, blank: int | None) -> list[tuple[int, ...]]:
    """Each sample's sequence: greedy CTC with ``blank``, or the argmax at every step."""
    best = output.argmax(axis=-1)
    if blank is None:
        return [tuple(int(v) for v in row) for row in best]
    decoded = []
    for row in best:
        keep = np.ones(len(row), bool)
        keep[1:] = row[1:] != row[:-1]
        decoded.append(tuple(int(v) for v in row[keep & (row != blank)]))
    return decoded


def edit_distance(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Levenshtein distance (insertions, deletions and substitutions cost 1)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def _is_distribution(reference: np.ndarray) -> str | None:
    """How the last axis holds a distribution per step (probabilities or log-probabilities)."""
    values = reference.astype(np.float64)
    if values.min() >= 0 and values.max() <= 1 + 1e-6 and np.allclose(values.sum(-1), 1.0, atol=1e-2):
        return "probabilities summing to 1"
    if values.max() <= 1e-6:
        total = np.exp(values).sum(-1)
        if np.allclose(total, 1.0, atol=1e-2):
            return "log-probabilities"
    return None


def _steps_shape(reference: np.ndarray) -> bool:
    return reference.ndim == 3 and reference.shape[1] >= MIN_STEPS and reference.shape[2] >= 2


@register
class Sequence(Kind):
    name = "sequence"
    counts_units = True
    help = ("[N, T, C] per-step class scores (CTC or per-token): decoded-sequence agreement with float "
            "and edit distance")
    order = 25  # before classes: a CTC softmax over the last axis is a sequence, not T decisions
    fine = ("char_error_rate", "float_char_error_rate", "char_error_rate_vs_labels")

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        reference = graph.reference
        if graph.op != "softmax" or not _steps_shape(reference) or graph.structure.get("axis") not in (2, -1):
            return None
        blank = blank_class(reference)
        if blank is None:  # per-step classes with no blank: classes judges them step by step
            return None
        shape = list(reference.shape)
        return {"kind": self.name, "axis": 2,
                "evidence": f"{shape_text(shape)}, Softmax over axis 2 at {graph.node}: {shape[1]} steps of "
                            f"{shape[2]} classes, class {blank} wins {_share(reference, blank)} of float's steps "
                            "(a CTC blank: decoded greedily)"}

    def from_values(self, name: str, reference: np.ndarray, common: dict[str, Any]) -> OutputKind | None:
        if not reference.size or not _steps_shape(reference):
            return None
        how = _is_distribution(reference)
        if how is None and reference.shape[1] <= MAX_LOGIT_STEPS and reference.shape[2] >= 3:
            how = "scores (logits)"  # a recognizer exported without its final softmax
        blank = blank_class(reference, LOGITS_BLANK_SHARE if how == "scores (logits)" else BLANK_MIN_SHARE) \
            if how else None
        if blank is None:
            return None
        shape = list(reference.shape)
        return OutputKind(name, self.name, 2, f"{shape_text(shape)}, {how} over axis 2 at each of {shape[1]} steps, "
                          f"class {blank} wins {_share(reference, blank)} of float's steps (a CTC blank: decoded "
                          "greedily)", "values", **common)

    def given_axis(self, reference: np.ndarray, structure: dict[str, Any], groups_axis: int | None) -> int | None:
        return 2

    def rank_error(self, rank: int) -> tuple[str, str] | None:
        return None if rank == 3 else ("not [N, T, classes]", "use classes or values for this output")

    def evaluate(self, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                 max_accuracy_drop_pp: float, axis: int | None, threshold: float | None) -> TaskResult:
        if reference.ndim != 3:
            from ..errors import EdgekitError

            raise EdgekitError(f"--output-kind sequence: the output has shape {list(reference.shape)}, not "
                               "[N, T, classes]", hint="use classes or values for this output")
        blank = blank_class(reference)
        expected, produced = decode(reference, blank), decode(candidate, blank)
        same = float(np.mean([e == p for e, p in zip(expected, produced)]))
        edits = sum(edit_distance(e, p) for e, p in zip(expected, produced))
        length = max(1, sum(len(e) for e in expected))
        values = {"sequence_agreement": same, "char_error_rate": edits / length}
        rule_tail = f"decoded {'greedy CTC, blank ' + str(blank) if blank is not None else 'per step'}"
        if targets is not None and targets.ndim == 2 and len(targets) == len(expected):
            truth = [tuple(int(v) for v in row if v != (blank if blank is not None else -1)) for row in targets]
            values["float_line_accuracy"] = float(np.mean([t == e for t, e in zip(truth, expected)]))
            values["line_accuracy"] = float(np.mean([t == p for t, p in zip(truth, produced)]))
            values["accuracy_drop_pp"] = round(100 * (values["float_line_accuracy"] - values["line_accuracy"]), 4)
            tolerance = max_accuracy_drop_pp / 100
            correct = sum(t == p for t, p in zip(truth, produced))
            return TaskResult(self.name, values, values["accuracy_drop_pp"] <= max_accuracy_drop_pp,
                              f"line accuracy drop <= {max_accuracy_drop_pp:g} pp (--max-accuracy-drop; "
                              f"{rule_tail})", (max_accuracy_drop_pp - values["accuracy_drop_pp"]) / 100,
                              (Rate("line_accuracy", int(correct), len(truth), values["float_line_accuracy"] - tolerance,
                                    tolerance, "lines"),))
        floor = 1 - max_accuracy_drop_pp / 100
        return TaskResult(self.name, values, same >= floor - 1e-12,
                          f"decoded sequences equal to float's >= {100 * floor:g}% ({rule_tail}; bounds the line "
                          f"accuracy drop by --max-accuracy-drop {max_accuracy_drop_pp:g} pp)", same - floor,
                          (agreement("sequence_agreement", [e == p for e, p in zip(expected, produced)], floor,
                                     "lines"),))


def _share(reference: np.ndarray, blank: int) -> str:
    return f"{100 * float(np.mean(reference.argmax(-1) == blank)):.0f}%"
