"""The search's confirmation: a configuration that only fits the samples it was chosen on is
refused, one whose halves differ by sampling noise is kept.

The search judges its tries on one half of the validation samples (``holdout``); the
configuration it keeps is measured on all of them, and its verdict is the gates on all samples
(a pass must also be decidable there, ``verdict.py``). What the confirmation adds is the question
the verdict cannot answer: is the half no try was judged by worse than the half the search chose
by, by more than chance? For every gate (task metric, SQNR, joined-quantity slice) the statistic
is the gate's margin on the search half minus its margin on the unseen half; its null
distribution comes from re-cutting all samples into two random halves of the same sizes
(a permutation test: if the search did not overfit, its half is just one random half). A gate
whose unseen half is worse with a one-sided p below ``ALPHA`` divided by the number of gates
(Bonferroni) marks the configuration as overfit. For a rate gate this is Fisher's exact test
between the halves: one flip in 120 falls in either half with probability 1/2 (p = 0.5, kept);
six flips all in the unseen 60 have p = 0.014 (refused).

The outputs are re-cut, never re-run: ``Measured.candidate`` holds what the artifact gave on
every sample.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kinds import evaluate
from ..quantize.metrics import worst_slice
from .validate import Judging, Measured

ALPHA = 0.05
PERMUTATIONS = 200
BUDGET_S = 20.0  # re-evaluating a costly gate (detections: NMS per sample) takes fewer permutations
MIN_PERMUTATIONS = 40
MARGIN_CAP = 1e3  # an exact half (SQNR inf) counts as this far above its floor
SEED = 20261126


@dataclass(frozen=True)
class Confirmation:
    """The test between the halves, per gate: margins on each half and the one-sided p-value."""

    search: dict[str, float]
    unseen: dict[str, float]
    p_values: dict[str, float]
    permutations: int
    threshold: float  # ALPHA / gates

    @property
    def overfit(self) -> dict[str, float]:
        """Gates whose unseen half is worse than chance allows: gate -> p."""
        return {g: p for g, p in self.p_values.items() if p < self.threshold and self.unseen[g] < self.search[g]}

    def to_dict(self) -> dict[str, Any]:
        return {"search_half": {g: round(v, 6) for g, v in self.search.items()},
                "unseen_half": {g: round(v, 6) for g, v in self.unseen.items()},
                "p_values": {g: round(p, 4) for g, p in self.p_values.items()},
                "permutations": self.permutations, "threshold": round(self.threshold, 5),
                "overfit": sorted(self.overfit)}


def gate_margins(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray], rows: np.ndarray,
                 judging: Judging, min_sqnr_db: float, targets: np.ndarray | None,
                 labelled_output: str | None) -> dict[str, float]:
    """Every gate's margin above its floor on the samples ``rows`` (the gates ``gates.check``
    applies: the task where the kind gates one, else SQNR; a joined output's worst slice)."""
    found = {}
    for name, ref_all in reference.items():
        ref, out = ref_all[rows], candidate[name][rows]
        kind = judging.kinds.get(name)
        task = None
        if kind is not None:
            subset_targets = targets[rows] if targets is not None and name == labelled_output else None
            task = evaluate(kind.spec, ref, out, subset_targets, judging.max_accuracy_drop, kind.axis)
        if task is not None and task.passed is not None and task.margin is not None:
            found[f"{name} task"] = _capped(task.margin)
        elif judging.metric is None:
            found[f"{name} sqnr"] = _capped(_sqnr(ref, out) - min_sqnr_db)
        worst = worst_slice(ref, out, kind)
        if worst is not None:
            found[f"{name} slice"] = _capped(worst["sqnr_db"] - min_sqnr_db)
    return found


def confirm(whole: Measured, reference: dict[str, np.ndarray], search_rows: np.ndarray, unseen_rows: np.ndarray,
            judging: Judging, min_sqnr_db: float, targets: np.ndarray | None = None,
            labelled_output: str | None = None) -> Confirmation | None:
    """The permutation test between the halves; None when the outputs were not kept."""
    if whole.candidate is None:
        return None
    candidate = whole.candidate

    def margins(rows: np.ndarray) -> dict[str, float]:
        return gate_margins(reference, candidate, rows, judging, min_sqnr_db, targets, labelled_output)

    began = time.monotonic()
    search, unseen = margins(search_rows), margins(unseen_rows)
    once = max(time.monotonic() - began, 1e-6)
    gates = sorted(set(search) & set(unseen))
    observed = {g: search[g] - unseen[g] for g in gates}
    permutations = max(MIN_PERMUTATIONS, min(PERMUTATIONS, int(BUDGET_S / once)))
    rng = np.random.default_rng(SEED)
    every = np.concatenate([search_rows, unseen_rows])
    at_least = dict.fromkeys(gates, 0)
    for _ in range(permutations):
        shuffled = rng.permutation(every)
        a = margins(np.sort(shuffled[: len(search_rows)]))
        b = margins(np.sort(shuffled[len(search_rows):]))
        for g in gates:
            if g in a and g in b and a[g] - b[g] >= observed[g] - 1e-12:
                at_least[g] += 1
    p_values = {g: (1 + at_least[g]) / (1 + permutations) for g in gates}
    return Confirmation({g: search[g] for g in gates}, {g: unseen[g] for g in gates}, p_values, permutations,
                        ALPHA / max(1, len(gates)))


def _sqnr(reference: np.ndarray, candidate: np.ndarray) -> float:
    ref = reference.astype(np.float64)
    noise = float(np.sum((candidate.astype(np.float64) - ref) ** 2))
    signal = float(np.sum(ref**2))
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


def _capped(value: float) -> float:
    if value != value:
        return -MARGIN_CAP
    return max(-MARGIN_CAP, min(MARGIN_CAP, float(value)))
