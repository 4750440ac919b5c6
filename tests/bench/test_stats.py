"""Statistics against known distributions, with seeded trials."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.bench.stats import (
    binomial_cdf,
    bootstrap_ratio,
    early_stopping_upper_bound,
    quantile_ci,
    regression_verdict,
    summarize,
)


def test_binomial_cdf_is_exact():
    cdf = binomial_cdf(10, 0.5)
    assert cdf[0] == pytest.approx(1 / 1024)
    assert cdf[5] == pytest.approx(638 / 1024)
    assert cdf[10] == pytest.approx(1.0)
    assert binomial_cdf(3, 0.9)[2] == pytest.approx(1 - 0.9**3)


def test_summary_percentiles_match_numpy_and_flag_noise():
    rng = np.random.default_rng(1)
    samples = rng.lognormal(0, 0.05, 1000) / 1e3  # seconds
    summary = summarize(samples)
    ms = samples * 1e3
    for p in (50, 90, 95, 99):
        assert summary[f"p{p}"] == pytest.approx(np.percentile(ms, p))
    assert summary["mean"] == pytest.approx(ms.mean()) and summary["count"] == 1000
    assert summary["noisy"] is False
    assert summarize(rng.lognormal(0, 0.5, 200) / 1e3)["noisy"] is True


@pytest.mark.parametrize("q, true_quantile", [(0.5, math.log(2)), (0.9, math.log(10))])
def test_quantile_ci_covers_the_true_quantile_at_least_95_percent(q, true_quantile):
    rng = np.random.default_rng(7)
    hits = 0
    trials = 400
    for _ in range(trials):
        x = np.sort(rng.exponential(1.0, 150))
        low, high = quantile_ci(x, q)
        hits += low <= true_quantile <= high
    assert hits / trials >= 0.94


def test_early_stopping_bound_holds_with_99_percent_confidence_and_needs_enough_samples():
    rng = np.random.default_rng(3)
    true_p90 = math.log(10)
    trials = 300
    held = sum(early_stopping_upper_bound(np.sort(rng.exponential(1.0, 500)))["value"] >= true_p90 for _ in range(trials))
    assert held / trials >= 0.97
    short = early_stopping_upper_bound(np.sort(rng.exponential(1.0, 20)))
    assert short["value"] is None and short["reason"] == "needs at least 44 samples"


def test_no_false_regression_between_samples_of_one_distribution_in_95_percent_of_trials():
    rng = np.random.default_rng(11)
    trials = 200
    false = sum(
        regression_verdict(rng.lognormal(0, 0.15, 200), rng.lognormal(0, 0.15, 200), seed=i)["verdict"] == "regression"
        for i in range(trials)
    )
    assert false / trials <= 0.05


def test_a_10_percent_slowdown_is_detected():
    rng = np.random.default_rng(12)
    trials = 100
    found = sum(
        regression_verdict(rng.lognormal(0, 0.15, 200), 1.10 * rng.lognormal(0, 0.15, 200), seed=i)["verdict"]
        == "regression"
        for i in range(trials)
    )
    assert found / trials >= 0.9
    faster = regression_verdict(rng.lognormal(0, 0.1, 300), 0.8 * rng.lognormal(0, 0.1, 300))
    assert faster["verdict"] == "improvement"


def test_threshold_tolerates_small_slowdowns():
    rng = np.random.default_rng(5)
    base, slower = rng.lognormal(0, 0.05, 400), 1.03 * rng.lognormal(0, 0.05, 400)
    assert regression_verdict(base, slower, threshold_pct=0)["verdict"] == "regression"
    within = regression_verdict(base, slower, threshold_pct=10)
    assert within["verdict"] == "no change" and within["reason"] == "within the 10% margin"
    ratio = bootstrap_ratio(base, slower)
    assert ratio["ci_low"] < ratio["ratio"] < ratio["ci_high"]


def test_a_few_scheduler_stalls_do_not_make_a_steady_run_noisy():
    """0.018 ms median with three 16 ms stalls: std/mean is huge, the IQR/median spread is not."""
    rng = np.random.default_rng(0)
    samples = rng.normal(0.018, 0.0004, 400)
    samples[[10, 200, 350]] = 16.0
    summary = summarize(samples / 1e3)
    assert summary["cv"] > 5 and summary["spread"] < 0.1 and summary["noisy"] is False


@pytest.mark.slow
def test_throughput_comes_from_the_median(digits_package):
    from edgekit.bench.harness import BenchOptions, bench

    report = bench(str(digits_package), BenchOptions(runs=30, warmup=2, min_seconds=0, batch=4))
    result = report["results"][0]
    assert result["throughput"]["from"] == "median latency"
    assert result["throughput"]["per_s"] == pytest.approx(4 * 1e3 / result["latency"]["p50"], rel=1e-3)


def test_a_ratio_interval_is_never_narrower_than_the_clock_step_nor_printed_as_a_point():
    """Samples of a fast model on a coarse clock (many equal values) gave a zero-width interval,
    and a narrow one was printed as "0.50-0.50" by ``tune``."""
    from edgekit.bench.stats import bootstrap_ratio
    from edgekit.bench.tune import interval

    base = np.array([2e-6] * 80 + [3e-6] * 20)
    cand = np.array([1e-6] * 90 + [2e-6] * 10)
    ratio = bootstrap_ratio(base, cand)
    assert ratio["ci_low"] < ratio["ratio"] < ratio["ci_high"]
    assert interval(0.4981, 0.5032) == "0.498-0.503"
    assert interval(0.41, 0.62) == "0.41-0.62"
