"""The benchmark harness: measure one loaded model the way a careful engineer would.

Load time (split into profile/package/verify/runtime phases, cache hit or miss), first
inference, warm-up, then steady state until both ``runs`` and ``min_seconds`` are met, every
sample kept. Model-only latency (the runtime call with native-dtype IO) is reported next to
the end-to-end path an application pays: decode/resize/normalize, quantize + invoke +
dequantize, and top-k postprocessing. Throughput at batch 1 and at ``batch``; peak RSS;
accuracy when evaluation data is given. Around it, the run context (``context``): clocks,
temperatures, throttling, load and power before, after and (``--sustained``) between windows;
launch times of a new process (``launch``); and where each configuration's ops ran
(``placement``).
"""

from __future__ import annotations

import random
import resource
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..version import __version__
from ..device.runtime import Model, load
from .report import SCHEMA_VERSION
from . import context as run_context
from .fingerprint import fingerprint
from .stats import CV_WARN, summarize
from .sustained import Recorder, first_to_last, summarize_sustained, timeline, window_seconds


@dataclass
class BenchOptions:
    runs: int = 100
    warmup: int = 10
    min_seconds: float = 2.0
    threads: int | None = None
    batch: int = 1
    artifact: str | None = None
    backend: str | None = None
    profile: str = "auto"
    input: str | None = None  # an input file for the end-to-end measurement (else synthetic)
    eval: str | None = None  # evaluation data for on-device accuracy
    cv_warn: float = CV_WARN
    sweep_threads: list[int] = field(default_factory=list)
    sweep_batches: list[int] = field(default_factory=list)
    device_name: str | None = None
    seed: int = 0
    require_signature: bool | None = None
    trusted_keys: str | None = None
    sustained_s: float | None = None  # measure for this long, in windows (--sustained)
    window_s: float | None = None  # window length of a sustained run (default: about 60 windows)
    launch: bool = True  # time a new process's load and first inference (empty, then warm caches)
    placement: bool = True  # which ops ran on the requested delegate / provider
    single_stream: bool = False  # MLPerf's single-stream rule (runs and min_seconds raised to it by the CLI)


def peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def rss_mib() -> float | None:
    """Resident memory now (Linux: /proc/self/statm), None where it cannot be read."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * resource.getpagesize() / (1024 * 1024), 1)


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _sample_input(model: Model, options: BenchOptions, batch: int) -> list[np.ndarray]:
    """One batch for every input, in the backend's order: from --input, else synthetic values in
    each input's calibrated range (integer inputs such as token ids get ids 0 and 1)."""
    if options.input:
        given = model.preprocess(options.input if len(model.input_names) > 1 else [options.input])
    else:
        rng = np.random.default_rng(options.seed)
        given = {}
        for spec in model.manifest.inputs:
            shape = (1, *[d if d and d > 0 else 1 for d in spec.shape[1:]])
            if spec.dtype not in ("float32", "float16", "float64"):
                given[spec.name] = rng.integers(0, 2, shape).astype(spec.dtype)
            else:
                low, high = spec.range or (0.0, 1.0)
                given[spec.name] = rng.uniform(low, high, shape).astype(np.float32)
        if len(given) == 1:
            given = next(iter(given.values()))
    feeds = model.check_input(given)
    return [np.repeat(x, batch, axis=0) if batch > 1 else x for x in feeds]


def _native(model: Model, feeds: list[np.ndarray]) -> list[np.ndarray]:
    from ..formats.backend import quantize

    return [quantize(x, info) if info.quantized else x.astype(info.dtype, copy=False)
            for x, info in zip(feeds, model.backend.inputs)]


def load_model(source: str, options: BenchOptions, artifact: str | None, threads: int | None,
               backend: str | None = None) -> tuple[Model, dict]:
    timings: dict[str, Any] = {}
    start = time.perf_counter()
    model = load(source, artifact=artifact, backend=backend or options.backend, threads=threads, profile=options.profile,
                 warmup=False, timings=timings, require_signature=options.require_signature,
                 trusted_keys=options.trusted_keys)
    timings["total_s"] = time.perf_counter() - start
    return model, {k: (round(v * 1e3, 3) if k.endswith("_s") else v) for k, v in timings.items()}


def _ms(seconds: Sequence[float]) -> list[float]:
    return [round(s * 1e3, 6) for s in seconds]


def end_to_end(model: Model, options: BenchOptions, runs: int) -> dict[str, Any] | None:
    """Preprocess + predict + top-k, phase by phase, from an input file (None without one)."""
    if not options.input:
        return None
    phases: dict[str, list[float]] = {"preprocess": [], "invoke": [], "postprocess": [], "total": []}
    labels = model.labels
    given = options.input if len(model.input_names) > 1 else [options.input]
    for _ in range(runs):
        t0 = time.perf_counter()
        x = model.preprocess(given)
        t1 = time.perf_counter()
        y = next(iter(model.predict_all(x) if isinstance(x, dict) else {"y": model.predict_tensor(x)}.values()))
        if isinstance(y, dict):
            y = next(iter(y.values()))
        t2 = time.perf_counter()
        order = np.argsort(y[0].reshape(-1))[::-1][:5]
        _ = [(labels[i] if labels else int(i), float(y[0].reshape(-1)[i])) for i in order]
        t3 = time.perf_counter()
        for name, value in (("preprocess", t1 - t0), ("invoke", t2 - t1), ("postprocess", t3 - t2), ("total", t3 - t0)):
            phases[name].append(value)
    return {name: {"p50_ms": float(np.median(v) * 1e3), "mean_ms": float(np.mean(v) * 1e3)} for name, v in phases.items()} | {
        "runs": runs, "input": str(options.input)}


def accuracy(model: Model, data: str) -> dict[str, Any] | None:
    """Top-1 accuracy on labelled evaluation data, for a model with one classifier output."""
    from .agreement import eval_feeds, outputs_of

    if len(model.output_names) != 1:
        return {"samples": 0, "accuracy": None, "reason": "accuracy is measured for one-output classifiers; "
                "the card's agreement with float covers every output"}
    feeds, y, digest, count = eval_feeds(model, data)
    if y is None:
        return {"samples": count, "accuracy": None, "reason": "evaluation data has no class targets"}
    predictions = outputs_of(model, feeds, count)[model.output_names[0]]
    from ..data.targets import check_class_targets

    check_class_targets(np.asarray(y), predictions.reshape(count, -1).shape[1])  # as packaging refuses it
    return {"samples": count, "accuracy": float(np.mean(predictions.reshape(count, -1).argmax(axis=1) == y)),
            "data": data, "data_sha256": digest}


@dataclass
class _Config:
    artifact: str | None
    threads: int | None
    batch: int
    backend: str | None = None
    model: Model | None = None
    load: dict = field(default_factory=dict)
    x: np.ndarray | None = None
    call: Callable[[], Any] | None = None
    # seconds per timed call: 8 bytes each (a single-stream minute of a 0.02 ms model is 3 M of them)
    samples: Sequence[float] = field(default_factory=lambda: array("d"))
    times: list[float] = field(default_factory=list)  # when each kept sample started (sustained runs), s
    recorder: Recorder | None = None  # a sustained run's samples, bounded per window
    query_s: float = 0.0  # a single-stream run's query time so far (the sum of its samples)
    first_ms: float = 0.0
    warmup_ms: float = 0.0
    rss_after_load_mib: float | None = None


def _prepare(source: str, options: BenchOptions, config: _Config) -> None:
    config.model, config.load = load_model(source, options, config.artifact, config.threads, config.backend)
    config.rss_after_load_mib = rss_mib()
    x = _native(config.model, _sample_input(config.model, options, config.batch))
    backend = config.model.backend
    config.x = x
    config.call = lambda: backend.run(x, raw=True)  # model only: native IO, no host-side conversion
    config.first_ms = _timed(config.call) * 1e3
    config.warmup_ms = sum(_timed(config.call) for _ in range(options.warmup)) * 1e3


# Interleaving is fair only if a configuration's turn does not pay for the previous one: ONNX
# Runtime's intra-op threads spin for a while after each run and took the next runtime's cores
# (MobileNetV2 INT8 TFLite measured 9.2 ms after ONNX Runtime turns, 5.2 ms with this pause),
# and the first call of a turn finds the caches full of the other model's weights (one untimed
# call re-warms them).
SETTLE_S = 0.02


def _measure(configs: list[_Config], options: BenchOptions) -> None:
    """Round-robin in shuffled order until every config has ``runs`` samples and ``min_seconds``.
    Under ``single_stream`` (MLPerf's rule) the seconds are each config's own query time, the sum
    of its latencies, not the wall clock its turns share, and a turn runs queries back to back
    for up to ``SINGLE_STREAM_TURN_S``."""
    rng = random.Random(options.seed)
    chunks = {id(c): 5 if len(configs) > 1 else max(options.runs, 1) for c in configs}
    started = time.perf_counter()
    while True:
        if options.single_stream:
            if all(len(c.samples) >= options.runs and c.query_s >= options.min_seconds for c in configs):
                return
        elif all(len(c.samples) >= options.runs for c in configs) and time.perf_counter() - started >= options.min_seconds:
            return
        order = list(configs)
        rng.shuffle(order)
        for config in order:
            if len(configs) > 1:
                time.sleep(SETTLE_S)  # the previous runtime's worker threads stop spinning first
                config.call()  # untimed: its weights back in the caches the previous config used
            if options.single_stream:
                turn_end = time.perf_counter() + SINGLE_STREAM_TURN_S
                while time.perf_counter() < turn_end:
                    took = _timed(config.call)
                    config.samples.append(took)
                    config.query_s += took  # kept as it grows: the samples are millions by the end
                continue
            for _ in range(chunks[id(config)]):
                config.samples.append(_timed(config.call))
            if len(configs) > 1:  # a turn long enough that the settle before it stays a small share of the run
                chunks[id(config)] = settled_chunk(config.samples)


def settled_chunk(samples: Any) -> int:
    """Calls per turn for a model taking ``samples`` seconds a call: at least 5, and enough that a
    turn lasts about four settles (a fast model's run is then not mostly sleep), at most 1000."""
    recent = sorted(samples[-5:])
    latency = recent[len(recent) // 2] if recent else SETTLE_S
    return int(min(1000, max(5, 4 * SETTLE_S / max(latency, 1e-7))))


SINGLE_STREAM_TURN_S = 0.5  # back-to-back queries per turn of a --single-stream run


def _measure_sustained(configs: list[_Config], options: BenchOptions, started: float) -> list[dict[str, Any]]:
    """Round-robin like ``_measure`` for ``options.sustained_s``, every sample time-stamped and the
    context read at each window boundary (between turns: never inside a timed call)."""
    assert options.sustained_s is not None
    rng = random.Random(options.seed)
    window = window_seconds(options.sustained_s, options.window_s)
    for config in configs:
        config.recorder = Recorder(window, seed=options.seed)
    snapshots = [run_context.snapshot(started=started)]
    clock_start = time.perf_counter()
    next_snapshot = window
    chunk = 5
    while (elapsed := time.perf_counter() - clock_start) < options.sustained_s:
        order = list(configs)
        rng.shuffle(order)
        for config in order:
            if len(configs) > 1:
                time.sleep(SETTLE_S)
                config.call()
            record = config.recorder.add  # type: ignore[union-attr]
            for _ in range(chunk):
                begin = time.perf_counter()
                config.call()
                end = time.perf_counter()
                record(begin - clock_start, end - begin)
        if elapsed >= next_snapshot:
            snapshots.append(run_context.snapshot(started=started))
            next_snapshot += window
    snapshots.append(run_context.snapshot(started=started))
    for config in configs:
        assert config.recorder is not None
        times, latencies = config.recorder.samples()
        config.times, config.samples = times.tolist(), latencies.tolist()
    return snapshots


def _result(config: _Config, options: BenchOptions, launches: dict[tuple[Any, Any], dict[str, Any]],
            points: list[dict[str, Any]], peak_mib: float) -> dict[str, Any]:
    """One configuration's entry of the report, from its samples and the run's context
    (``peak_mib``: the process's peak RSS when measuring ended, before placement's extra sessions)."""
    from ..device.devices import runtime_threads

    model = config.model
    assert model is not None
    summary = summarize(config.samples, options.cv_warn)
    warnings = []
    if summary["noisy"]:
        width = summary["p50_ci_width"]
        warnings.append(
            (f"the p50 is known only to {width:.1%} (95% CI width; spread IQR / median {summary['spread']:.0%})"
             if width is not None else f"latency spread (IQR / median) {summary['spread']:.0%} with few samples")
            + f": differences under {options.cv_warn:.0%} cannot be told apart; measure longer "
            "(--runs, --min-seconds) or on a quieter machine"
        )
    # from the median: a mean moves 3x between identical runs when a few samples stall
    throughput = {"batch": config.batch, "per_s": round(config.batch * 1e3 / summary["p50"], 2),
                  "from": "median latency"}
    result = {
        "config": {
            "artifact": model.artifact.key,
            "precision": model.artifact.precision,
            "threads": runtime_threads(model.profile, _facts(), config.threads),
            "batch": config.batch,
            **model.backend.describe(),
        },
        "size_bytes": model.artifact.bytes,
        "load_ms": config.load,
        "first_inference_ms": round(config.first_ms, 3),
        "warmup": {"runs": options.warmup, "total_ms": round(config.warmup_ms, 3)},
        "latency": summary | {"samples_ms": _ms(_thinned(config.samples)), "query_s": round(sum(config.samples), 3)},
        "throughput": throughput,
        "end_to_end": end_to_end(model, options, max(20, options.runs // 5)) if config.batch == 1 else None,
        "accuracy": accuracy(model, options.eval) if options.eval else None,
        "peak_rss_mib": peak_mib,
        "rss_after_load_mib": config.rss_after_load_mib,
        "launch": launches.get((config.artifact, config.backend)),
        "placement": model.backend.placement() if options.placement else None,
        "warnings": warnings,
    }
    if config.recorder is not None:
        window = window_seconds(options.sustained_s or 0.0, options.window_s)
        result["sustained"] = summarize_sustained(np.asarray(config.times), np.asarray(config.samples) * 1e3,
                                                  options.sustained_s or 0.0, window, points,
                                                  exact=config.recorder.exact())
        # the summary is over the kept samples (a uniform sample of each window); count is every one measured
        result["latency"] |= {"count": config.recorder.total, "summarized": len(config.samples),
                              "samples_ms": _thinned(result["latency"]["samples_ms"])}
        warnings.extend(_sustained_warning(result))
    return result


def bench(source: str, options: BenchOptions, artifacts: list[str] | None = None,
          choices: list[tuple[str, str, int]] | None = None) -> dict[str, Any]:
    """Benchmark one artifact (or, with ``artifacts``/sweep options, several configurations;
    ``choices``: exactly these (artifact, backend, threads) at ``options.batch``)."""
    from ..formats import exact_name

    started = time.monotonic()
    static = run_context.static_context()
    before = run_context.snapshot(started=started)
    # ``artifacts`` and ``choices`` are a manifest's keys: each loads that build exactly (the user's
    # --artifact onnx means this CPU's best ONNX build, a sweep of keys means each one)
    if choices:
        configs = [_Config(artifact=exact_name(a), threads=t, batch=options.batch, backend=b) for a, b, t in choices]
    else:
        targets = [exact_name(a) for a in artifacts] if artifacts else [options.artifact]
        threads_list = options.sweep_threads or [options.threads]
        batches = options.sweep_batches or [options.batch]
        configs = [_Config(artifact=a, threads=t, batch=b) for a in targets for t in threads_list for b in batches]
    for config in configs:
        _prepare(source, options, config)
    snapshots = _measure_sustained(configs, options, started) if options.sustained_s else []
    if not options.sustained_s:
        _measure(configs, options)
    after = snapshots[-1] if snapshots else run_context.snapshot(started=started)
    static["versions"] = run_context.versions()  # now that the runtimes are imported
    reasons = run_context.throttle_reasons(before, after)
    usage = run_context.during(before, after)
    points = timeline(snapshots) if snapshots else []
    peak_mib = peak_rss_mib()
    launches = _launches(source, options, configs)
    results = [_result(config, options, launches, points, peak_mib) for config in configs]
    if options.eval:
        _agreements(configs, results, options.eval)
    first = configs[0].model
    assert first is not None
    report = {
        "schema": "edgekit.bench.report",
        "schema_version": SCHEMA_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "edgekit_version": __version__,
        "model": {"name": first.manifest.name, "source": str(source), "artifacts": [a.key for a in first.manifest.artifacts]},
        "device": fingerprint(profile=first.profile.name) | {"name": options.device_name or _hostname()},
        "settings": {"runs": options.runs, "warmup": options.warmup, "min_seconds": options.min_seconds,
                     "batch": options.batch, "sweep_threads": options.sweep_threads,
                     "sweep_batches": options.sweep_batches, "seed": options.seed, "cv_warn": options.cv_warn,
                     "sustained_s": options.sustained_s, "single_stream": options.single_stream},
        "thermal": {"before": _public(before), "after": _public(after), "throttled": bool(reasons), "reasons": reasons},
        "context": static | {"before": _public(before), "after": _public(after), "during": usage,
                             "timeline": points,
                             "conditions": run_context.conditions(static, before, after, usage)},
        "results": results,
        "warnings": ([f"THROTTLED: {r}" for r in reasons]) + _shared_warning(usage)
        + [w for r in results for w in r["warnings"]] + _fastest_unresolved(results),
    }
    for config in configs:
        if config.model is not None:
            config.model.close()
    return report


def _agreements(configs: list[_Config], results: list[dict[str, Any]], data: str) -> None:
    """Each quantized configuration's agreement with its float fallback measured in the same run
    (``agreement.py``), on the evaluation data: what a card says of a model accuracy cannot judge."""
    from .card import float_fallbacks
    from .agreement import agreement_with_float

    by_key = {config.model.artifact.key: config.model for config in configs if config.model is not None}
    done: dict[str, Any] = {}
    for config, result in zip(configs, results):
        model = config.model
        if model is None or model.artifact.is_float:
            continue
        fallback = next((by_key[k] for k in float_fallbacks(model.manifest, model.artifact.key) if k in by_key), None)
        if fallback is not None:
            key = model.artifact.key
            done[key] = done.get(key) or agreement_with_float(model, fallback, data)
            result["agreement_with_float"] = done[key]


MAX_STORED_SAMPLES = 10_000  # a 30-minute run of a 1 ms model is 1.8 M samples: the report keeps a stride


def _thinned(samples_ms: Sequence[float]) -> Sequence[float]:
    if len(samples_ms) <= MAX_STORED_SAMPLES:
        return samples_ms
    step = -(-len(samples_ms) // MAX_STORED_SAMPLES)
    return samples_ms[::step]


def _public(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A snapshot as written in the report (the raw CPU counters are only for differences)."""
    return {k: v for k, v in snapshot.items() if k != "counters"}


def _launches(source: str, options: BenchOptions, configs: list[_Config]) -> dict[tuple[Any, Any], dict[str, Any]]:
    """Launch times once per artifact and backend (threads change little of a load)."""
    if not options.launch:
        return {}
    from ..formats import exact_name
    from .launch import launch_times

    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for config in configs:
        key = (config.artifact, config.backend)
        if key not in found:
            assert config.model is not None
            found[key] = launch_times(source, exact_name(config.model.artifact.key), config.model.backend.name,
                                      config.threads, options.profile, options.require_signature, options.trusted_keys)
    return found


def _shared_warning(usage: dict[str, Any]) -> list[str]:
    share = usage.get("other_share")
    if share is None or share < run_context.BUSY_SHARE:
        return []
    return [f"SHARED: other processes used {usage['other_cores']:.2f} cores ({share:.0%} of the CPU time) during the "
            "run: latency is higher than on an idle device; compare only with runs taken under the same load"]


def _sustained_warning(result: dict[str, Any]) -> list[str]:
    sustained = result["sustained"]
    verdict = sustained.get("verdict") or {}
    if verdict.get("verdict") != "slowed down":
        return []
    return [f"{_config_name(result)} slowed down over the run: {first_to_last(sustained)}: {verdict['reason']}"]


def _fastest_unresolved(results: list[dict[str, Any]]) -> list[str]:
    """The conclusion a sweep is read for is which configuration is fastest: say so when the
    runner-up's p50 95% CI overlaps the fastest's, so either could be."""
    ranked = sorted((r for r in results if r["latency"].get("p50_ci95") and r["config"]["batch"] == 1),
                    key=lambda r: r["latency"]["p50"])
    if len(ranked) < 2:
        return []
    first, second = ranked[0], ranked[1]
    if second["latency"]["p50_ci95"][0] > first["latency"]["p50_ci95"][1]:
        return []
    return [f"{_config_name(first)} and {_config_name(second)} are the fastest and their p50 95% CIs overlap: either may be "
            "fastest here (edgekit tune decides only on a significant difference)"]


def _config_name(result: dict[str, Any]) -> str:
    config = result["config"]
    return f"{config['artifact']}/{config['backend']} t{config['threads']}"


def _facts() -> Any:
    from ..machine.facts import DeviceFacts

    return DeviceFacts.read()


def _hostname() -> str:
    import socket

    return socket.gethostname()


def default_report_path(source: str) -> Path:
    from ..names import name_from_source

    name = name_from_source(source)
    return Path(f"{name}.{_hostname()}.bench.json")
