#!/usr/bin/env python
"""What the benchmark's own bookkeeping costs: run context, placement, launch timing, sustained runs.

    .venv/bin/python scripts/bench_context.py [--seconds 20] [--output out/bench/bench_context.json]

Packages digits (INT8 TFLite + ONNX), then, in one run:
* the run context: ``static_context`` and ``snapshot`` (read once per run and once per window of
  a sustained run), in milliseconds per call;
* a sustained run's per-sample bookkeeping: ``Recorder.add`` (bounded reservoir per window)
  against a bare ``list.append`` of (time, latency), in nanoseconds per sample; it is outside
  the timed call, but it sets how many samples a fast model gives per second;
* placement per backend (LiteRT's delegate walk; ONNX Runtime's profiled second session;
  OpenVINO's runtime model), and launch timing (two child processes), in milliseconds;
* memory: peak RSS of ``--bench --sustained SECONDS`` on the fastest artifact (digits, tens of
  microseconds per call: the worst case for sample counts) against a plain two-second ``--bench``.
Prints and saves JSON; compare ratios within one run (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchio import ROOT, print_and_save

import edgekit  # noqa: E402
from edgekit.bench import context  # noqa: E402
from edgekit.bench.sustained import Recorder  # noqa: E402


def per_call_ms(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e3, 4)


def recorder_cost(samples: int = 200_000) -> dict:
    recorder = Recorder(window_s=1.0)
    plain: list[tuple[float, float]] = []
    start = time.perf_counter()
    for i in range(samples):
        recorder.add(i * 1e-5, 2e-5)
    kept = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(samples):
        plain.append((i * 1e-5, 2e-5))
    appended = time.perf_counter() - start
    return {"samples": samples, "recorder_ns_per_sample": round(kept / samples * 1e9, 1),
            "list_append_ns_per_sample": round(appended / samples * 1e9, 1),
            "ratio": round(kept / appended, 2), "kept": int(recorder.samples()[1].size)}


def placement_ms(package: Path) -> dict:
    from edgekit.formats.onnx.backend import OnnxRuntimeBackend
    from edgekit.formats.tflite.backend import LiteRTBackend

    found = {"litert": per_call_ms(LiteRTBackend(str(package / "tflite" / "model.int8.tflite")).placement, 20),
             "onnxruntime": per_call_ms(OnnxRuntimeBackend(str(package / "onnx" / "model.int8.onnx")).placement, 10)}
    try:
        from edgekit.formats.onnx.openvino import OpenVINOBackend

        found["openvino"] = per_call_ms(OpenVINOBackend(str(package / "onnx" / "model.int8.onnx")).placement, 10)
    except Exception as exc:  # openvino is x86-only and optional
        found["openvino"] = f"not run: {exc}"[:100]
    return found


def peak_rss_mib(command: list[str]) -> tuple[float, float]:
    """(peak RSS of the child in MiB, wall seconds)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command} failed")
    return round(usage.ru_maxrss / 1024, 1), round(time.perf_counter() - start, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20, help="length of the sustained run")
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "bench_context.json")
    args = parser.parse_args()
    report: dict = {"benchmark": "bench_context",
                    "machine": {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count()},
                    "settings": {"seconds": args.seconds}}
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-context-") as tmp:
        work = Path(tmp)
        os.environ["EDGEKIT_CACHE_DIR"] = str(work / "cache")
        package = edgekit.package(str(ROOT / "models/digits/digits.keras"),
                                  str(ROOT / "models/digits/data/calibration.npz"), str(work / "digits"),
                                  formats=["tflite", "onnx"]).path
        report["context_ms"] = {"static_context": per_call_ms(context.static_context, 50),
                                "snapshot": per_call_ms(context.snapshot, 200)}
        report["sustained_bookkeeping"] = recorder_cost()
        report["placement_ms"] = placement_ms(package)
        from edgekit.bench.launch import launch_times

        start = time.perf_counter()
        launch = launch_times(str(package), "tflite", "litert", None, "auto")
        report["launch"] = {"wall_ms": round((time.perf_counter() - start) * 1e3, 1),
                            "first_launch_ms": launch["first_launch"].get("process_ms"),
                            "relaunch_ms": launch["relaunch"].get("process_ms")}
        run = [sys.executable, "-m", "edgekit.run", str(package), "--bench", "--artifact", "tflite", "--no-launch",
               "--report", str(work / "r.json")]
        plain = peak_rss_mib(run)
        sustained = peak_rss_mib([*run, "--sustained", f"{args.seconds}s"])
        import json

        measured = json.loads((work / "r.json").read_text())["results"][0]["latency"]
        report["memory"] = {"plain_bench": {"peak_rss_mib": plain[0], "wall_s": plain[1]},
                            "sustained": {"peak_rss_mib": sustained[0], "wall_s": sustained[1],
                                          "samples_measured": measured["count"],
                                          "samples_kept": measured.get("summarized")},
                            "ratio": round(sustained[0] / plain[0], 2)}
    print_and_save(report, args.output)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
