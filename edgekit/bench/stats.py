"""Latency statistics that hold up on noisy machines.

* Percentiles with distribution-free confidence intervals from order statistics (the number
  of samples below the true q-quantile is Binomial(n, q)).
* The MLPerf-style early-stopping estimate: a one-sided upper confidence bound on the true
  p90 — the latency the device stays under with 99% confidence given only n samples.
* A noise warning only when the noise could change a conclusion: when the p50's own 95%
  confidence interval is wider than the equivalence margin (5%), so that two configurations
  that far apart could not be told apart. A wide spread with many samples pins the median down
  and is not warned about.
* Regression verdicts from the raw samples: a seeded bootstrap confidence interval of the ratio
  of medians (candidate / baseline), so two noisy runs of the same thing are not called a
  regression because their medians differ.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

CV_WARN = 0.05  # the widest p50 95% CI, as a fraction of the p50, not warned about (the compare margin)
Z95 = 1.959963984540054


def binomial_cdf(n: int, p: float) -> np.ndarray:
    """``cdf[k] = P(Binomial(n, p) <= k)`` for k = 0..n, exact (log-space pmf, vectorized)."""
    k = np.arange(n + 1)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    log_pmf = log_factorial[n] - log_factorial[k] - log_factorial[n - k] + k * math.log(p) + (n - k) * math.log1p(-p)
    return np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)


def quantile_ci(sorted_samples: np.ndarray, q: float, confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free confidence interval for the q-quantile (None if too few samples).

    With B ~ Binomial(n, q) samples below the true quantile, the order statistics
    x_(l) <= quantile <= x_(u) hold when l <= B <= u - 1: pick the largest l with
    P(B <= l - 1) <= alpha and the smallest u with P(B <= u - 1) >= 1 - alpha.
    """
    n = len(sorted_samples)
    if n < 2:
        return None
    alpha = (1 - confidence) / 2
    cdf = binomial_cdf(n, q)
    lower = int(np.searchsorted(cdf, alpha, side="right"))  # first k with cdf[k] > alpha: P(B <= k-1) <= alpha
    upper = int(np.searchsorted(cdf, 1 - alpha, side="left")) + 1  # smallest u with cdf[u-1] >= 1-alpha
    if lower < 1 or upper > n:
        return None
    return float(sorted_samples[lower - 1]), float(sorted_samples[upper - 1])


def early_stopping_upper_bound(sorted_samples: np.ndarray, q: float = 0.90, confidence: float = 0.99) -> dict[str, Any]:
    """One-sided upper confidence bound on the true q-quantile (MLPerf early stopping).

    The k-th smallest sample is at or above the true q-quantile unless k or more samples fell
    below it; choose the smallest k with P(Binomial(n, q) <= k - 1) >= confidence.
    """
    n = len(sorted_samples)
    cdf = binomial_cdf(n, q) if n else np.array([1.0])
    k = int(np.searchsorted(cdf, confidence, side="left")) + 1
    if n and k <= n:
        return {"value": float(sorted_samples[k - 1]), "order_statistic": k, "samples": n,
                "quantile": q, "confidence": confidence}
    needed = max(n, 1)
    while binomial_cdf(needed, q)[needed - 1] < confidence:
        needed += 1
    return {"value": None, "samples": n, "quantile": q, "confidence": confidence,
            "reason": f"needs at least {needed} samples"}


def summarize(samples_s: list[float] | np.ndarray, cv_warn: float = CV_WARN) -> dict[str, Any]:
    """Summary of latency samples (seconds in, milliseconds out)."""
    x = np.sort(np.asarray(samples_s, dtype=np.float64)) * 1e3
    if x.size == 0:
        raise ValueError("no samples")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    cv = std / mean if mean > 0 else 0.0
    percentiles = {f"p{p}": float(np.percentile(x, p)) for p in (50, 90, 95, 99)}
    # The noise warning reads a robust spread: a few 16 ms scheduler stalls on a 0.02 ms model
    # make std/mean meaningless ("562%"), while IQR/median still says whether typical runs agree.
    q25, q75 = float(np.percentile(x, 25)), float(np.percentile(x, 75))
    spread = (q75 - q25) / percentiles["p50"] if percentiles["p50"] > 0 else 0.0
    ci50, ci90 = quantile_ci(x, 0.50), quantile_ci(x, 0.90)
    p50 = percentiles["p50"]
    ci_width = (ci50[1] - ci50[0]) / p50 if ci50 and p50 > 0 else None
    return {
        "unit": "ms",
        "count": int(x.size),
        **percentiles,
        "mean": mean,
        "std": std,
        "min": float(x[0]),
        "max": float(x[-1]),
        "cv": cv,
        "iqr": q75 - q25,
        "spread": spread,
        "p50_ci95": list(ci50) if ci50 else None,
        "p90_ci95": list(ci90) if ci90 else None,
        "p90_early_stopping": early_stopping_upper_bound(x, 0.90, 0.99),
        "p50_ci_width": ci_width,  # (CI high - CI low) / p50
        # too few samples for a CI: the spread decides (twice the margin, as IQR / median)
        "noisy": bool(ci_width > cv_warn) if ci_width is not None else spread > 2 * cv_warn,
        "cv_warn_threshold": cv_warn,  # compared with "p50_ci_width"; "spread" and "cv" are kept as data
    }


def bootstrap_ratio(
    baseline_s: np.ndarray, candidate_s: np.ndarray, resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, float]:
    """Ratio of medians candidate/baseline with a percentile-bootstrap confidence interval."""
    base = np.asarray(baseline_s, dtype=np.float64)
    cand = np.asarray(candidate_s, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ratios = bootstrap_medians(cand, resamples, rng) / bootstrap_medians(base, resamples, rng)
    alpha = (1 - confidence) / 2
    # a median is known only to within the timer's step: samples on a coarse clock (a fast model,
    # many equal values) gave a zero-width interval, claiming a certainty no measurement has
    (mc, rc), (mb, rb) = (float(np.median(cand)), _step(cand) / 2), (float(np.median(base)), _step(base) / 2)
    return {
        "ratio": mc / mb,
        "ci_low": min(float(np.quantile(ratios, alpha)), (mc - rc) / (mb + rb)),
        "ci_high": max(float(np.quantile(ratios, 1 - alpha)), (mc + rc) / max(mb - rb, 1e-12)),
        "confidence": confidence,
        "resamples": resamples,
    }


def _step(samples: np.ndarray) -> float:
    """The clock step the samples show: the smallest gap between two distinct values (0 if all equal
    and nothing shows it; then the median's own value stands)."""
    distinct = np.unique(samples)
    return float(np.min(np.diff(distinct))) if distinct.size > 1 else 0.0


# Above this many samples a resample matrix (resamples x n: 32 bytes a sample at 2000 resamples) is
# replaced by drawing each resample's median straight from its order-statistic distribution.
RESAMPLE_MATRIX_MAX = 2000


def bootstrap_medians(samples: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The medians of ``resamples`` bootstrap resamples of ``samples``.

    Small samples are resampled as they are. For large ones (an hour-long sustained run keeps
    hundreds of thousands) the medians are drawn exactly in distribution without building any
    resample: a resample is n draws ``x[ceil(n U_i) - 1]`` from the sorted samples with uniform
    ``U_i``, so its m-th smallest value is ``x[ceil(n V) - 1]`` with V the m-th order statistic
    of n uniforms, ``Beta(m, n - m + 1)``; the next one up is ``V + (1 - V) Beta(1, n - m)``.
    Memory and time are O(n log n + resamples) instead of O(n x resamples)."""
    n = samples.size
    if n <= RESAMPLE_MATRIX_MAX:
        return np.median(samples[rng.integers(0, n, size=(resamples, n))], axis=1)
    ordered = np.sort(samples)
    m = (n + 1) // 2  # the lower middle (the middle itself for odd n)
    lower = rng.beta(m, n - m + 1, size=resamples)

    def at(v: np.ndarray) -> np.ndarray:
        return ordered[np.clip(np.ceil(n * v).astype(np.int64) - 1, 0, n - 1)]

    if n % 2:
        return at(lower)
    upper = lower + (1 - lower) * rng.beta(1, n - m, size=resamples)
    return (at(lower) + at(upper)) / 2


# Two runs of one package on one machine differ by a few percent (medians of back-to-back runs
# measured 3% apart here): a difference smaller than this is not called one.
DEFAULT_MARGIN_PCT = 5.0


def regression_verdict(
    baseline_s: np.ndarray, candidate_s: np.ndarray, threshold_pct: float = DEFAULT_MARGIN_PCT, seed: int = 0
) -> dict[str, Any]:
    """A difference only when it is both significant and larger than the equivalence margin, as
    asv and pyperf decide: "regression" when the 95% CI of the ratio of medians lies above 1 and
    the ratio exceeds ``1 + threshold_pct``; "improvement" the other way round; otherwise
    "no change", with why (``reason``: within the margin, or not significant)."""
    result = bootstrap_ratio(baseline_s, candidate_s, seed=seed)
    limit = 1 + threshold_pct / 100
    significant = result["ci_low"] > 1 or result["ci_high"] < 1
    if result["ci_low"] > 1 and result["ratio"] > limit:
        verdict, reason = "regression", f"{100 * (result['ratio'] - 1):.1f}% slower"
    elif result["ci_high"] < 1 and result["ratio"] < 1 / limit:
        verdict, reason = "improvement", f"{100 * (1 / result['ratio'] - 1):.1f}% faster"
    elif significant:
        verdict, reason = "no change", f"within the {threshold_pct:g}% margin"
    else:
        verdict, reason = "no change", "not significant"
    return {**result, "threshold_pct": threshold_pct, "verdict": verdict, "reason": reason}
