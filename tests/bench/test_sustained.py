"""Sustained-run arithmetic: durations, windows, first vs last stretch, and the verdict's cause."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.bench.sustained import edge_seconds, parse_duration, summarize_sustained, timeline, window_seconds
from edgekit.errors import EdgekitError


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("10m", 600), ("1h", 3600), ("1m30s", 90),
                                           ("2.5m", 150)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10 minutes", "1s", "-5m"])
def test_bad_durations_are_refused_by_name(text):
    with pytest.raises(EdgekitError, match="--sustained"):
        parse_duration(text)


def test_windows_and_edges_scale_with_the_run():
    assert window_seconds(1800) == 30 and window_seconds(120) == 2 and window_seconds(10) == 0.5
    assert window_seconds(600, 5) == 5
    assert edge_seconds(1800) == 60 and edge_seconds(120) == 30


def _run(duration, slow_after, factor, seed=0):
    rng = np.random.default_rng(seed)
    times = np.linspace(0, duration, 4000, endpoint=False)
    samples = rng.normal(10.0, 0.3, times.size)
    samples[times >= slow_after] *= factor
    return times, samples


def _points(duration, window, **late):
    """A context timeline whose values change to ``late`` halfway through."""
    points = []
    for t in np.arange(0, duration + window, window):
        early = t < duration / 2
        points.append({"t_s": float(t), "max_c": 55.0 if early else late.get("max_c", 55.0),
                       "cpu_mhz": 2400.0 if early else late.get("cpu_mhz", 2400.0),
                       "other_cores": 0.02 if early else late.get("other_cores", 0.02),
                       "throttling_now": False if early else late.get("throttling_now", False), "load_1m": 0.1})
    return points


def test_a_clock_drop_is_called_throttling():
    times, samples = _run(600, 300, 1.6)
    result = summarize_sustained(times, samples, 600, 10, _points(600, 10, cpu_mhz=1500.0, max_c=84.0))
    assert result["first"]["span"] == "first minute" and result["last"]["span"] == "last minute"
    assert result["change_pct"] == pytest.approx(60, abs=3)
    verdict = result["verdict"]
    assert verdict["verdict"] == "slowed down" and verdict["throttled"]
    assert "CPU clock fell from 2400 to 1500 MHz" in verdict["reason"] and "rose from 55 to 84 °C" in verdict["reason"]
    assert len(result["windows"]) == 60 and result["windows"][-1]["p50"] > result["windows"][0]["p50"] * 1.5


def test_contention_is_not_called_throttling():
    times, samples = _run(120, 60, 1.4)
    verdict = summarize_sustained(times, samples, 120, 2, _points(120, 2, other_cores=1.0))["verdict"]
    assert verdict["verdict"] == "slowed down" and not verdict["throttled"]
    assert "contention" in verdict["reason"] and "throttled" not in verdict["reason"]


def test_a_steady_run_and_an_unexplained_slowdown():
    times, samples = _run(120, 60, 1.0)
    assert summarize_sustained(times, samples, 120, 2, _points(120, 2))["verdict"]["verdict"] == "steady"
    times, samples = _run(120, 60, 1.3)
    verdict = summarize_sustained(times, samples, 120, 2, [])["verdict"]
    assert verdict["verdict"] == "slowed down" and verdict["reason"] == "no cause visible in the signals read here"


def test_timeline_turns_counters_into_other_processes_cores():
    def snap(t, busy, mine):
        return {"t_s": t, "max_c": None, "cpu_mhz": {"0-3": 1800.0}, "load_average": [0.5, 0.4, 0.3],
                "counters": {"busy_s": busy, "total_s": 2 * t + 100, "steal_s": 0.0, "self_s": mine, "wall_s": t}}

    points = timeline([snap(0.0, 10.0, 0.0), snap(10.0, 20.0, 9.0), snap(20.0, 40.0, 18.0)])
    assert [p["other_cores"] for p in points] == [None, 0.1, 1.1]
    assert points[1]["cpu_mhz"] == 1800.0 and points[1]["load_1m"] == 0.5


def test_recorder_keeps_memory_bounded_and_counts_exactly():
    """A long run of a fast model: every sample counted, at most PER_WINDOW kept per window, and
    the kept ones a fair sample (their median is the window's)."""
    from edgekit.bench.sustained import Recorder

    recorder = Recorder(window_s=1.0, per_window=500)
    rng = np.random.default_rng(3)
    times = np.sort(rng.uniform(0, 4, 40_000))
    latencies = np.where(times < 2, 0.010, 0.020) * rng.lognormal(0, 0.1, times.size)
    for t, x in zip(times, latencies):
        recorder.add(float(t), float(x))
    kept_t, kept_x = recorder.samples()
    assert recorder.total == 40_000 and kept_x.size == 4 * 500 and np.all(np.diff(kept_t) >= 0)
    exact = recorder.exact()
    assert sum(count for count, _ in exact.values()) == 40_000
    assert exact[3.0][1] == pytest.approx(1e3 * latencies[times >= 3].max())
    result = summarize_sustained(kept_t, kept_x * 1e3, 4.0, 1.0, [], exact=exact)
    assert [w["count"] for w in result["windows"]] == [int(np.sum((times >= s) & (times < s + 1))) for s in range(4)]
    assert result["windows"][0]["p50"] == pytest.approx(10.0, rel=0.03)
    assert result["windows"][3]["p50"] == pytest.approx(20.0, rel=0.03)


@pytest.mark.parametrize("args, needle", [
    (["--bench", "--sustained", "soon"], "--sustained 'soon' is not a duration"),
    (["--bench", "--sustained", "1s"], "shorter than 2 s"),
    (["--bench", "--window", "2"], "pass --sustained DURATION too"),
    (["--bench", "--sustained", "10s", "--window", "0"], "--window '0' is not a positive duration"),
    (["-i", "x.npy", "--sustained", "10s"], "--sustained applies to --bench only"),
])
def test_sustained_options_are_checked_before_anything_runs(args, needle, tmp_path):
    from tests.conftest import device_cli

    result = device_cli(tmp_path / "missing.edgekit", *args)
    assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr, result.stderr
