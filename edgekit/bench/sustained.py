"""Sustained runs: latency over time in windows, first vs last stretch, and a throttling verdict.

A two-second run ranks a phone or a Pi by its cold, boosted clock; minutes later the same
device may run at half speed. ``--sustained 10m`` measures for that long, keeps every sample's
time, and reports per window (p50, p90, count) plus the first minute against the last (the
first and last quarter of runs shorter than four minutes) with the bootstrap verdict compare
uses. The verdict names its likely cause from the context read between windows: the CPU
clock falling or a throttling flag (thermal or power throttling), or other processes taking
the cores (contention), or nothing visible.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import EdgekitError
from .context import load
from .stats import DEFAULT_MARGIN_PCT, regression_verdict

EDGE_S = 60.0  # "first minute" and "last minute"
MAX_EDGE_SAMPLES = 5000  # bootstrap cost grows with samples x resamples: a stride keeps it bounded
MIN_DURATION_S = 2.0
CLOCK_DROP = 0.05  # a 5% lower mean CPU clock in the last stretch is throttling, not noise
CONTENTION_CORES = 0.25  # other processes taking a quarter core more in the last stretch
PER_WINDOW = 2000  # samples kept per window: an hour of a 20 µs model is 180 M samples, a Pi has 1-8 GB


@dataclass
class _Window:
    count: int = 0
    max_s: float = 0.0
    kept: list[tuple[float, float]] = field(default_factory=list)  # (time, latency), a uniform sample


class Recorder:
    """Samples of a sustained run in bounded memory: per window the exact count and maximum and a
    uniform random sample of at most ``per_window`` latencies (reservoir sampling, seeded), so
    window percentiles stay exact in expectation however long the run and however fast the model."""

    def __init__(self, window_s: float, per_window: int = PER_WINDOW, seed: int = 0) -> None:
        self.window_s = window_s
        self.per_window = per_window
        self.windows: dict[int, _Window] = {}
        self.total = 0
        self._rng = random.Random(seed)

    def add(self, t_s: float, latency_s: float) -> None:
        window = self.windows.get(int(t_s // self.window_s))
        if window is None:
            window = self.windows[int(t_s // self.window_s)] = _Window()
        window.count += 1
        self.total += 1
        if latency_s > window.max_s:
            window.max_s = latency_s
        if len(window.kept) < self.per_window:
            window.kept.append((t_s, latency_s))
        else:
            slot = self._rng.randrange(window.count)
            if slot < self.per_window:
                window.kept[slot] = (t_s, latency_s)

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """(times in s, latencies in s) of every kept sample, in time order."""
        kept = sorted(pair for window in self.windows.values() for pair in window.kept)
        if not kept:
            return np.zeros(0), np.zeros(0)
        times, latencies = zip(*kept)
        return np.asarray(times), np.asarray(latencies)

    def exact(self) -> dict[float, tuple[int, float]]:
        """Window start (s) -> (samples measured, maximum latency in ms), counted exactly."""
        return {round(index * self.window_s, 3): (w.count, w.max_s * 1e3) for index, w in sorted(self.windows.items())}


def seconds_in(text: str, flag: str = "--sustained") -> float:
    """"90", "90s", "2.5s", "10m", "1h", "1m30s" -> seconds (any positive length)."""
    value = str(text).strip().lower()
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", value)
    if not value or parts is None or not any(parts.groups()):
        raise EdgekitError(f"{flag} {text!r} is not a duration", hint="give e.g. 90s, 10m or 1h")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in parts.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not total > 0:
        raise EdgekitError(f"{flag} {text!r} is not a positive duration", hint="give e.g. 2s or 30s")
    return total


def parse_duration(text: str) -> float:
    """"90", "90s", "10m", "1h", "1m30s" -> seconds, at least ``MIN_DURATION_S``."""
    total = seconds_in(text)
    if total < MIN_DURATION_S:
        raise EdgekitError(f"--sustained {text!r} is shorter than {MIN_DURATION_S:g} s",
                           hint="a sustained run needs time to show a trend: give 2m or more")
    return total


def window_seconds(duration_s: float, given: float | None = None) -> float:
    """About 60 windows per run, from 0.5 s to 30 s each, unless given."""
    return float(given) if given else max(0.5, min(30.0, duration_s / 60))


def edge_seconds(duration_s: float) -> float:
    return EDGE_S if duration_s >= 4 * EDGE_S else duration_s / 4


def windows(times_s: np.ndarray, samples_ms: np.ndarray, window_s: float,
            exact: dict[float, tuple[int, float]] | None = None) -> list[dict[str, Any]]:
    """p50/p90 per window from the samples; count and max from ``exact`` (a ``Recorder``'s) when the
    samples are a subsample."""
    out = []
    index = np.floor(times_s / window_s).astype(np.int64)
    for bucket in np.unique(index):
        chosen = samples_ms[index == bucket]
        start = round(float(bucket * window_s), 3)
        count, largest = (exact or {}).get(start, (int(chosen.size), float(chosen.max())))
        out.append({"t_s": start, "count": count, "p50": float(np.median(chosen)),
                    "p90": float(np.percentile(chosen, 90)), "max": largest})
    return out


def _thin(values: np.ndarray, limit: int = MAX_EDGE_SAMPLES) -> np.ndarray:
    return values if values.size <= limit else values[:: int(np.ceil(values.size / limit))]


def timeline(snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Context over time: one point per snapshot, other processes' CPU since the previous one."""
    points = []
    for previous, current in zip([None, *snapshots], snapshots):
        usage = load.usage_between((previous or {}).get("counters"), current.get("counters")) if previous else None
        mhz = current.get("cpu_mhz") or {}
        pi = current.get("raspberry_pi") or {}
        points.append({
            "t_s": current.get("t_s", 0.0),
            "max_c": current.get("max_c"),
            "cpu_mhz": round(float(np.mean(list(mhz.values()))), 1) if mhz else None,
            "other_cores": usage["other_cores"] if usage else None,
            "throttling_now": pi.get("throttling_now") if pi else None,
            "load_1m": (current.get("load_average") or [None])[0],
        })
    return points


def _mean(points: list[dict[str, Any]], key: str) -> float | None:
    values = [p[key] for p in points if p.get(key) is not None]
    return float(np.mean(values)) if values else None


def causes(points: list[dict[str, Any]], start_s: float, end_s: float, edge_s: float,
           slower: bool = True) -> tuple[list[str], bool]:
    """Why the last stretch is slower (``slower``) or faster than the first, from the context
    timeline; and whether a slowdown was throttling (clock, flags) rather than contention."""
    first = [p for p in points if start_s < p["t_s"] <= start_s + edge_s + 1e-9]
    last = [p for p in points if p["t_s"] > end_s - edge_s]
    sign = 1 if slower else -1
    found, throttled = [], False
    early, late = _mean(first, "cpu_mhz"), _mean(last, "cpu_mhz")
    if early and late and sign * (early - late) > early * CLOCK_DROP:
        found.append(f"CPU clock {'fell' if slower else 'rose'} from {early:.0f} to {late:.0f} MHz")
        throttled = slower
    flagged_late = any(p.get("throttling_now") for p in last)
    flagged_early = any(p.get("throttling_now") for p in first)
    if (flagged_late and not flagged_early) if slower else (flagged_early and not flagged_late):
        found.append(f"the Raspberry Pi firmware {'reported' if slower else 'stopped reporting'} throttling")
        throttled = slower
    hot_early, hot_late = _mean(first, "max_c"), _mean(last, "max_c")
    if slower and hot_early is not None and hot_late is not None and hot_late - hot_early >= 5:
        found.append(f"the hottest zone rose from {hot_early:.0f} to {hot_late:.0f} °C")
    busy_early, busy_late = _mean(first, "other_cores"), _mean(last, "other_cores")
    if busy_early is not None and busy_late is not None and sign * (busy_late - busy_early) >= CONTENTION_CORES:
        found.append(f"other processes used {busy_late:.2f} cores in the last stretch against {busy_early:.2f} in "
                     f"the first ({'contention' if slower else 'contention ended'})")
    return found, throttled


def summarize_sustained(times_s: np.ndarray, samples_ms: np.ndarray, duration_s: float, window_s: float,
                        points: list[dict[str, Any]], margin_pct: float = DEFAULT_MARGIN_PCT,
                        exact: dict[float, tuple[int, float]] | None = None) -> dict[str, Any]:
    """Windows, first vs last stretch and the verdict for one configuration."""
    edge = edge_seconds(duration_s)
    start, end = float(times_s.min()), float(times_s.max())
    first, last = samples_ms[times_s < start + edge], samples_ms[times_s >= end - edge]
    result: dict[str, Any] = {"duration_s": round(duration_s, 3), "window_s": window_s, "edge_s": round(edge, 3),
                              "windows": windows(times_s, samples_ms, window_s, exact)}
    if first.size < 5 or last.size < 5:
        return result | {"verdict": {"verdict": "unknown", "reason": "too few samples in the first or last stretch"}}
    compared = regression_verdict(_thin(first), _thin(last), margin_pct)
    verdict = {"regression": "slowed down", "improvement": "sped up"}.get(compared["verdict"], "steady")
    found, throttled = causes(points, start, end, edge, slower=verdict != "sped up")
    if verdict == "slowed down":
        reason = ("throttled: " if throttled else "") + ("; ".join(found) if found else
                                                         "no cause visible in the signals read here")
    elif verdict == "sped up":
        reason = "; ".join(found) or "no cause visible in the signals read here"
    else:
        reason = compared["reason"] + (f" (though {'; '.join(found)})" if found else "")
    edge_name = "minute" if edge == EDGE_S else f"{edge:.0f} s"
    return result | {
        "first": {"p50": float(np.median(first)), "count": int(first.size), "span": f"first {edge_name}"},
        "last": {"p50": float(np.median(last)), "count": int(last.size), "span": f"last {edge_name}"},
        "change_pct": round(100 * (compared["ratio"] - 1), 2),
        "verdict": {"verdict": verdict, "reason": reason, "throttled": throttled and verdict == "slowed down",
                    "ratio_ci95": [compared["ci_low"], compared["ci_high"]], "causes": found},
    }


def first_to_last(sustained: dict[str, Any]) -> str:
    """"first 15 s p50 0.212 ms, last 15 s 0.224 ms (+5.7%)": how the run summary and its warning say it."""
    first, last = sustained["first"], sustained["last"]
    return (f"{first['span']} p50 {first['p50']:.3f} ms, {last['span']} {last['p50']:.3f} ms "
            f"({sustained['change_pct']:+.1f}%)")
