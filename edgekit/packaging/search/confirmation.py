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
whose unseen half fails its floor and is worse with a one-sided p below ``SearchSettings.alpha`` divided by the
number of gates (Bonferroni) marks the configuration as overfit (worse but passing is kept). For a rate gate this is Fisher's exact test
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

from ...kinds import evaluate
from ...kinds.base import Rate
from ...comparison.metrics import worst_slice
from ..search_settings import DEFAULT_SETTINGS, SearchSettings
from ..validate import Judging, Measured

MARGIN_CAP = 1e3  # an exact half (SQNR inf) counts as this far above its floor


@dataclass(frozen=True)
class Confirmation:
    """The test between the halves, per gate: margins on each half and the one-sided p-value."""

    search: dict[str, float]
    unseen: dict[str, float]
    p_values: dict[str, float]
    permutations: int
    threshold: float  # the settings' alpha / gates

    @property
    def overfit(self) -> dict[str, float]:
        """Gates whose unseen half fails its floor and is worse than chance allows: gate -> p. An
        unseen half that is worse but still passes shows the configuration holds on samples it
        was not chosen by, which is all the confirmation asks."""
        return {g: p for g, p in self.p_values.items()
                if p < self.threshold and self.unseen[g] < self.search[g] and self.unseen[g] < 0}

    def to_dict(self) -> dict[str, Any]:
        return {"search_half": {g: round(v, 6) for g, v in self.search.items()},
                "unseen_half": {g: round(v, 6) for g, v in self.unseen.items()},
                "p_values": {g: round(p, 4) for g, p in self.p_values.items()},
                "permutations": self.permutations, "threshold": round(self.threshold, 5),
                "overfit": sorted(self.overfit)}


def gate_margins(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray], rows: np.ndarray,
                 judging: Judging, min_sqnr_db: float, targets: np.ndarray | None,
                 labelled_output: str | None, counted: bool = True) -> tuple[dict[str, float], dict[str, Rate]]:
    """Every gate's margin above its floor on the samples ``rows`` (the gates ``gates.check``
    applies: the task where the kind gates one, else SQNR; a joined output's worst slice), and the
    counts behind each rate gate. A task that counts its units is a gate per rate
    (``OUTPUT task:RATE``); ``counted=False`` leaves those tasks out (they are not re-cut)."""
    margins: dict[str, float] = {}
    rates: dict[str, Rate] = {}
    for name, ref_all in reference.items():
        ref, out = ref_all[rows], candidate[name][rows]
        kind = judging.kinds.get(name)
        task = None
        if kind is not None and (counted or not _counts(kind.spec)):
            subset_targets = targets[rows] if targets is not None and name == labelled_output else None
            task = evaluate(kind.spec, ref, out, subset_targets, judging.max_accuracy_drop, kind.axis)
        gated = kind is not None and (task is not None and task.passed is not None or _counts(kind.spec))
        if task is not None and task.passed is not None and task.evidence:
            for rate in task.evidence:
                rates[f"{name} task:{rate.name}"] = rate
                margins[f"{name} task:{rate.name}"] = _capped(rate.value - rate.floor)
        elif task is not None and task.passed is not None and task.margin is not None:
            margins[f"{name} task"] = _capped(task.margin)
        elif judging.metric is None and not gated:
            margins[f"{name} sqnr"] = _capped(_sqnr(ref, out) - min_sqnr_db)
        worst = worst_slice(ref, out, kind)
        if worst is not None:
            margins[f"{name} slice"] = _capped(worst["sqnr_db"] - min_sqnr_db)
    return margins, rates


def _counts(spec: str) -> bool:
    """Whether a kind's gate counts units (``Kind.counts_units``: its TaskResult carries evidence):
    judged by Fisher's test on the two halves' counts, never re-cut (a detector's NMS per sample
    is slow)."""
    from ...kinds import KINDS, parse_kind

    return KINDS[parse_kind(spec)[0]].counts_units


def fisher_one_sided(search: Rate, unseen: Rate) -> float:
    """P(the unseen half holds at least its disagreements | the total of both halves), the
    hypergeometric tail of Fisher's exact test: small when the unseen half is worse than chance."""
    total, misses = search.n + unseen.n, (search.n - search.k) + (unseen.n - unseen.k)
    seen_misses = unseen.n - unseen.k
    if misses == 0 or unseen.n == 0:
        return 1.0

    def log_choose(n: int, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)

    denominator = log_choose(total, unseen.n)
    tail = 0.0
    for x in range(seen_misses, min(misses, unseen.n) + 1):
        if unseen.n - x > total - misses:
            continue
        tail += math.exp(log_choose(misses, x) + log_choose(total - misses, unseen.n - x) - denominator)
    return min(1.0, tail)


def confirm(whole: Measured, reference: dict[str, np.ndarray], search_rows: np.ndarray, unseen_rows: np.ndarray,
            judging: Judging, min_sqnr_db: float, targets: np.ndarray | None = None,
            labelled_output: str | None = None, settings: SearchSettings = DEFAULT_SETTINGS) -> Confirmation | None:
    """The test between the halves; None when the outputs were not kept. Rate gates: Fisher's
    exact test on each half's counts; the others (SQNR, slices, continuous task metrics): a
    permutation test re-cutting the samples (fewer permutations where re-evaluating a gate is
    costly, as detections' NMS per sample: within ``settings.permutation_budget_s``)."""
    if whole.candidate is None:
        return None
    candidate = whole.candidate

    def margins(rows: np.ndarray, counted: bool = True) -> tuple[dict[str, float], dict[str, Rate]]:
        return gate_margins(reference, candidate, rows, judging, min_sqnr_db, targets, labelled_output, counted)

    (search, search_rates), (unseen, unseen_rates) = margins(search_rows), margins(unseen_rows)
    gates = sorted(set(search) & set(unseen))
    p_values = {g: fisher_one_sided(search_rates[g], unseen_rates[g]) for g in gates
                if g in search_rates and g in unseen_rates}
    recut = [g for g in gates if g not in p_values]
    permutations = 0
    if recut:
        observed = {g: search[g] - unseen[g] for g in recut}
        began = time.monotonic()
        margins(search_rows, counted=False)
        once = max(time.monotonic() - began, 1e-6)
        permutations = max(settings.min_permutations,
                           min(settings.permutations, int(settings.permutation_budget_s / (2 * once))))
        rng = np.random.default_rng(settings.seed)
        every = np.concatenate([search_rows, unseen_rows])
        at_least = dict.fromkeys(recut, 0)
        for _ in range(permutations):
            shuffled = rng.permutation(every)
            a, _ = margins(np.sort(shuffled[: len(search_rows)]), counted=False)
            b, _ = margins(np.sort(shuffled[len(search_rows):]), counted=False)
            for g in recut:
                if g in a and g in b and a[g] - b[g] >= observed[g] - 1e-12:
                    at_least[g] += 1
        p_values.update({g: (1 + at_least[g]) / (1 + permutations) for g in recut})
    return Confirmation({g: search[g] for g in gates}, {g: unseen[g] for g in gates}, p_values, permutations,
                        settings.alpha / max(1, len(gates)))


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
