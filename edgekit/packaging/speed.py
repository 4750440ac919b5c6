"""Speed stays part of the verdict: a mixed artifact (layers the search raised to 16-bit or
float) is worth shipping only if it still beats its format's float fallback. Both are timed
here, interleaved, batch 1, one thread; the figure is recorded with the CPU it was measured on
(``details.speed_vs_float``) and the runtime on a CPU of that kind prefers the float fallback
when the mixed artifact is slower (``runtime.candidates``). Other CPU kinds were not measured,
and the record says which one was."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..conversion.messages import Message
from ..formats import Backend, Builder, BuildResult, get_backend

ROUNDS, RUNS = 7, 10  # interleaved rounds of RUNS calls each; the median of the per-round medians


def is_mixed(precision: str) -> bool:
    """``int8+float (2 layers)``, ``int8+int16 (1 layer)``: not plain int8, not a float tail."""
    return precision.startswith("int8+") and "tail" not in precision


def compare(builder: Builder, staged: Path, mixed: BuildResult, fallback: BuildResult,
            evaluation: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """The mixed artifact's and the float fallback's median latency here; None without a runtime
    (or when the runtime cannot time them: a crash there ends a child process, never the packager)."""
    from ..machine.facts import DeviceFacts

    medians = median_ms(builder, {"mixed": staged / mixed.artifact.path, "float": staged / fallback.artifact.path},
                        evaluation, f"timing {mixed.artifact.key} against {fallback.artifact.key}")
    if medians is None:
        return None
    mixed_ms, float_ms = medians["mixed"], medians["float"]
    return {"mixed_ms": round(mixed_ms, 4), "float_ms": round(float_ms, 4),
            "speedup": round(float_ms / mixed_ms, 3) if mixed_ms > 0 else None,
            "float_artifact": fallback.artifact.key, "threads": 1, "batch": 1,
            "arch": DeviceFacts.read().arch, "cpu": builder.fused_kernels() or DeviceFacts.read().cpu_model,
            "how": f"interleaved, {ROUNDS} rounds of {RUNS} calls, median of the round medians"}


def median_ms(builder: Builder, artifacts: dict[str, Path], evaluation: dict[str, np.ndarray], what: str,
              rounds: int = ROUNDS, runs: int = RUNS) -> dict[str, float] | None:
    """Each artifact's median latency here in ms (batch 1, one thread, interleaved in one child);
    None without a runtime of the format or when that runtime cannot time them."""
    backend_cls = get_backend(builder.backend)
    if backend_cls.available() is None:
        return None
    return median_ms_each({name: (backend_cls, path) for name, path in artifacts.items()}, evaluation, what,
                          rounds, runs)


def median_ms_each(pairs: dict[str, tuple[type[Backend], Path]], evaluation: dict[str, np.ndarray], what: str,
                   rounds: int = ROUNDS, runs: int = RUNS) -> dict[str, float] | None:
    """Each (backend, artifact) pair's median latency here in ms, batch 1, one thread, interleaved
    in one child (artifacts of several formats side by side); None when a runtime cannot time them
    (a crash there ends a child process, never the packager)."""
    from ..conversion import worker
    from ..errors import EdgekitError
    from ..fsutil import temp_dir

    with temp_dir("edgekit-speed-") as folder:
        sample = Path(folder) / "sample.npz"
        np.savez(sample, **{name: values[:1] for name, values in evaluation.items()})
        try:
            medians = worker.convert(time_artifacts, Timing(
                sample_npz=str(sample), artifacts={k: (worker.reference(b), str(v)) for k, (b, v) in pairs.items()},
                rounds=rounds, runs=runs), what=what).round_medians_s
        except EdgekitError:
            return None
    return {name: statistics.median(values) * 1000 for name, values in medians.items()}


# a round of one artifact's calls lasts about this long at least (RUNS calls where they are slower)
ROUND_S = 0.02


@dataclass(frozen=True)
class Timing(Message):
    """Time artifacts side by side on one sample: name -> (backend reference, artifact path)."""

    sample_npz: str
    artifacts: dict[str, tuple[str, str]]
    rounds: int = ROUNDS
    runs: int = RUNS


@dataclass(frozen=True)
class Timed(Message):
    """Each artifact's per-round median seconds, by name."""

    round_medians_s: dict[str, list[float]]


def time_artifacts(request: Timing) -> Timed:
    """Child side of ``median_ms_each``: each artifact's per-round median seconds, interleaved,
    batch 1, one thread. A fast artifact makes more calls per round (about ``ROUND_S``), so its
    median is not one timer tick's noise."""
    from ..conversion import worker

    sample_npz, artifacts, rounds, runs = request.sample_npz, request.artifacts, request.rounds, request.runs

    with np.load(sample_npz) as stored:
        sample = {name: stored[name] for name in stored.files}
    feed: Any = sample if len(sample) > 1 else list(sample.values())
    opened = {}
    calls: dict[str, int] = {}
    try:
        for name, (backend, path) in artifacts.items():
            opened[name] = worker.resolve(backend)(path, threads=1)
            opened[name].run(feed)  # warm-up
            started = time.perf_counter()
            opened[name].run(feed)
            once = time.perf_counter() - started
            calls[name] = max(runs, min(20 * runs, int(ROUND_S / once) if once > 0 else runs))
        medians: dict[str, list[float]] = {name: [] for name in opened}
        for _ in range(rounds):
            for name, runner in opened.items():
                times = []
                for _ in range(calls[name]):
                    started = time.perf_counter()
                    runner.run(feed)
                    times.append(time.perf_counter() - started)
                medians[name].append(statistics.median(times))
    finally:
        for runner in opened.values():
            runner.close()
    return Timed(round_medians_s=medians)
