"""What `edgekit compare` says when reports share a device, when there is one report, when a run
was pinned to fewer CPUs, with --margin beside --fail-on-regression, and on huge reports."""

from __future__ import annotations

import json
import time

import numpy as np

from edgekit.bench.stats import RESAMPLE_MATRIX_MAX, bootstrap_medians
from tests.bench.test_report_compare import make_report, write_report
from tests.conftest import run_cli


def test_two_reports_of_one_device_each_keep_their_matrix_column(tmp_path, capsys):
    write_report(make_report("pi5", seed=1), tmp_path / "monday.json")
    write_report(make_report("pi5", seed=2, scale=1.2), tmp_path / "tuesday.json")
    write_report(make_report("rpi4", seed=3, scale=2.0), tmp_path / "rpi4.json")
    code, out, err = run_cli(capsys, "compare", tmp_path, "--baseline", "monday")
    assert code == 0, err
    assert "pi5 (monday)" in out and "pi5 (tuesday)" in out and "rpi4" in out


def test_one_report_says_its_own_conditions_not_that_they_differ(tmp_path, capsys):
    write_report(make_report("pi5", conditions={"throttled": None}), tmp_path / "only.json")
    code, _, err = run_cli(capsys, "compare", tmp_path / "only.json")
    assert code == 0 and "conditions differ" not in err and "WARNING: run conditions:" in err


def test_a_run_pinned_to_fewer_cpus_than_its_baseline_is_flagged(tmp_path, capsys):
    write_report(make_report("box", conditions={"cpus_allowed": 4, "cpus_online": 4}), tmp_path / "free.json")
    write_report(make_report("box", seed=2, conditions={"cpus_allowed": 1, "cpus_online": 4}), tmp_path / "pinned.json")
    code, _, err = run_cli(capsys, "compare", tmp_path / "free.json", tmp_path / "pinned.json")
    assert code == 0
    assert "ran on 1 CPU(s) of 4 (pinned" in err and "ran pinned to" not in err  # said once
    assert len([line for line in err.splitlines() if "pinned" in line]) == 1


def test_margin_and_fail_on_regression_are_both_honoured(tmp_path, capsys):
    write_report(make_report("ci", seed=1), tmp_path / "before.json")
    write_report(make_report("ci", seed=3, scale=1.12), tmp_path / "slower.json")  # 12% slower
    args = ("compare", tmp_path / "before.json", tmp_path / "slower.json", "--baseline", "before", "--markdown")
    # the table calls it a regression at a 2% margin, the gate fails only above 20%
    code, out, err = run_cli(capsys, *args, "--margin", "2", "--fail-on-regression", "20")
    assert code == 0 and "regression" in out and "REGRESSION:" not in err
    # a 30% margin would hide it from the table; the 5% gate fails on it, and the table says so too
    code, out, err = run_cli(capsys, *args, "--margin", "30", "--fail-on-regression", "5")
    assert code == 1 and "REGRESSION:" in err and "no change" not in out
    assert "past --fail-on-regression 5, inside --margin 30" in out


def test_two_reports_of_one_device_say_their_own_conditions_not_that_they_differ(tmp_path, capsys):
    write_report(make_report("pi5", seed=1, conditions={"throttled": None}), tmp_path / "monday.json")
    write_report(make_report("pi5", seed=2, conditions={"throttled": None}), tmp_path / "tuesday.json")
    code, _, err = run_cli(capsys, "compare", tmp_path / "monday.json", tmp_path / "tuesday.json")
    assert code == 0 and "conditions differ" not in err and "WARNING: run conditions:" in err


def test_bootstrap_medians_of_a_huge_sample_are_exact_in_distribution_and_bounded():
    rng = np.random.default_rng(5)
    small = rng.lognormal(0, 0.5, RESAMPLE_MATRIX_MAX + 1001)
    resampled = np.median(small[rng.integers(0, small.size, size=(2000, small.size))], axis=1)
    drawn = bootstrap_medians(small, 2000, np.random.default_rng(6))
    assert abs(np.std(drawn) / np.std(resampled) - 1) < 0.15
    assert abs(np.median(drawn) - np.median(resampled)) < 0.2 * np.std(resampled)
    huge = rng.lognormal(0, 0.5, 250_000)
    began = time.perf_counter()
    medians = bootstrap_medians(huge, 2000, rng)
    assert time.perf_counter() - began < 5 and medians.shape == (2000,)
    assert np.quantile(medians, 0.025) < np.median(huge) < np.quantile(medians, 0.975)


def test_compare_two_250000_sample_reports(tmp_path, capsys):
    for device, scale, seed in (("box-a", 1.0, 1), ("box-b", 1.1, 2)):
        report = make_report(device, scale=scale, seed=seed, artifacts=("tflite",))
        samples = (scale * np.random.default_rng(seed).lognormal(0, 0.08, 250_000)).round(5)
        report["results"][0]["latency"] |= {"samples_ms": samples.tolist(), "count": samples.size,
                                            "p50": float(np.median(samples))}
        (tmp_path / f"{device}.json").write_text(json.dumps(report))
    code, out, err = run_cli(capsys, "compare", tmp_path, "--markdown")
    assert code == 0, err
    assert "regression (10.0% slower)" in out


def test_a_package_holding_no_cards_is_an_error_not_an_empty_success(digits_package, tmp_path, capsys):
    """It printed nothing and exited 0."""
    import shutil

    package = tmp_path / "digits.edgekit"
    shutil.copytree(digits_package, package)
    for stored in package.rglob("*.card.json"):
        stored.unlink()
    code, out, err = run_cli(capsys, "compare", package)
    assert code == 1 and "no latency cards and no benchmark reports to compare" in err and "edgekit card" in err
