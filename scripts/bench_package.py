#!/usr/bin/env python
"""Benchmark packaging MobileNetV2 224: conversion time, float vs INT8 size and LiteRT latency.

    .venv/bin/python scripts/bench_package.py [--threads 2] [--rounds 30] [--output out/bench/bench_package.json]

Builds the model from models/mobilenet_v2/build.py, packages it with `edgekit.package`
(INT8, 100 synthetic calibration images), converts the same SavedModel to float TFLite, and
times both with the LiteRT interpreter in one run, interleaving rounds so machine drift
affects both alike. Prints and saves JSON; compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import edgekit  # noqa: E402
from edgekit import worker  # noqa: E402
from edgekit.backends.litert import LiteRTBackend, open_interpreter  # noqa: E402


def cpu_description() -> dict[str, object]:
    """CPU model and the SIMD features that decide INT8 vs float speed on x86 (VNNI above all)."""
    info: dict[str, object] = {"machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if line.startswith("model name"):
            info["model"] = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            info["simd"] = sorted(flags & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "fma"})
            break
    return info


def median_invoke_ms(interpreters: dict[str, object], rounds: int, per_round: int) -> dict[str, dict[str, float]]:
    """Interleaved timing: each round times every model ``per_round`` times, in rotating order."""
    samples: dict[str, list[float]] = {name: [] for name in interpreters}
    names = list(interpreters)
    for name, interpreter in interpreters.items():  # warm-up
        for _ in range(10):
            interpreter.invoke()
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            interpreter = interpreters[name]
            for _ in range(per_round):
                start = time.perf_counter_ns()
                interpreter.invoke()
                samples[name].append((time.perf_counter_ns() - start) / 1e6)
    return {
        name: {
            "median_ms": statistics.median(values),
            "p90_ms": float(np.percentile(values, 90)),
            "mean_ms": statistics.fmean(values),
            "runs": len(values),
        }
        for name, values in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--samples", type=int, default=100, help="calibration samples")
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "bench_package.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="edgekit-bench-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        started = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "models/mobilenet_v2/build.py"), "--output", str(work),
                        "--samples", str(args.samples + 25)], check=True, env=env, stdout=subprocess.DEVNULL)
        build_s = time.perf_counter() - started

        started = time.perf_counter()
        result = edgekit.package(
            str(work / "mobilenet_v2.keras"), str(work / "calibration.npz"), str(work / "out"),
            samples=args.samples, eval_samples=25,
            preprocessing={"scale": 1 / 255, "mean": [0.5], "std": [0.5]},
        )
        package_s = time.perf_counter() - started
        artifact = result.manifest.artifact("tflite")
        int8_path = result.path / artifact.path

        source = worker.call("edgekit.targets.source:prepare", what="export",
                             model_path=str(work / "mobilenet_v2.keras"), fmt="keras",
                             export_dir=str(work / "saved_model"))
        float_path = work / "model.float32.tflite"
        float_info = worker.call("edgekit.targets.tflite:convert", what="float conversion",
                                 saved_model=source["saved_model"], calibration_npy="", output=str(float_path),
                                 quantize=False)

        interpreters = {}
        for name, path in (("float32", float_path), ("int8", int8_path)):
            interpreter = open_interpreter(str(path), threads=args.threads)
            detail = interpreter.get_input_details()[0]
            interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
            interpreters[name] = interpreter
        latency = median_invoke_ms(interpreters, args.rounds, args.per_round)
        float_bytes = float_path.stat().st_size

    report = {
        "benchmark": "bench_package",
        "model": "Keras MobileNetV2 224x224x3, weights=None",
        "machine": {"platform": platform.platform(), **cpu_description()},
        "versions": {**result.manifest.versions, "litert_backend": LiteRTBackend.available()},
        "settings": {"threads": args.threads, "rounds": args.rounds, "per_round": args.per_round,
                     "calibration_samples": args.samples},
        "seconds": {
            "build_model": round(build_s, 2),
            "edgekit_package_total": round(package_s, 2),
            "int8_converter_call": artifact.converter["seconds"],
            "float_converter_call": float_info["seconds"],
        },
        "size_bytes": {"float32": float_bytes, "int8": artifact.bytes},
        "ratios": {
            "int8_size_of_float": round(artifact.bytes / float_bytes, 4),
            "int8_speedup_median": round(latency["float32"]["median_ms"] / latency["int8"]["median_ms"], 3),
        },
        "latency": latency,
        "validation_int8_vs_float": result.manifest.validation["artifacts"]["tflite"],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"saved {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
