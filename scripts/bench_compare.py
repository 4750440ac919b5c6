"""`edgekit compare` on reports holding many latency samples (an hour-long sustained run, or a
report edited by hand): its wall time and peak memory, in a child process, per sample count.

    python scripts/bench_compare.py [--samples 250000] [--out out/bench/bench_compare.json]

Each run writes two schema 1 reports (two devices, two artifacts each, log-normal latencies, the
second device 10% slower), then times `edgekit compare DIR --markdown` in a fresh interpreter and
reads its peak RSS (``ru_maxrss`` of the child). The goal it checks: under 30 s and 1 GiB for two
250,000-sample reports on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchio import ROOT, print_and_save

LIMIT_S = 30.0
LIMIT_MIB = 1024.0


def report(device: str, scale: float, samples: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    results = []
    for i, artifact in enumerate(("tflite", "onnx")):
        x = (scale * (1 + 0.5 * i) * rng.lognormal(0, 0.08, samples)).round(6)
        results.append({
            "config": {"artifact": artifact, "backend": "litert" if artifact == "tflite" else "onnxruntime",
                       "precision": "int8", "threads": 2, "batch": 1},
            "size_bytes": 24000, "load_ms": {"total_s": 12.0}, "first_inference_ms": 2.0,
            "warmup": {"runs": 10, "total_ms": 1.0},
            "latency": {"unit": "ms", "count": samples, "p50": float(np.median(x)), "p90": float(np.percentile(x, 90)),
                        "p95": float(np.percentile(x, 95)), "p99": float(np.percentile(x, 99)),
                        "mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()), "max": float(x.max()),
                        "cv": 0.08, "samples_ms": x.tolist()},
            "throughput": {"batch": 1, "per_s": 1000 / float(x.mean())}, "end_to_end": None,
            "accuracy": None, "peak_rss_mib": 45.0, "warnings": [],
        })
    return {"schema": "edgekit.bench.report", "schema_version": 1, "created": "2026-11-26T00:00:00Z",
            "edgekit_version": "0.1.0", "model": {"name": "digits"},
            "device": {"name": device, "arch": "x86_64", "cpu": {"model": "x"}, "cores": 2, "os": "Linux",
                       "python": "3.11", "libraries": {}},
            "settings": {}, "thermal": {"before": {}, "after": {}, "throttled": False, "reasons": []},
            "results": results, "warnings": []}


def measure(samples: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        for device, scale, seed in (("box-a", 1.0, 1), ("box-b", 1.1, 2)):
            Path(folder, f"{device}.json").write_text(json.dumps(report(device, scale, samples, seed)))
        code = ("import resource, sys; from edgekit.cli.main import run; status = run(sys.argv[1:]); "
                "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
                "sys.exit(status)")
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code, "compare", folder, "--markdown"], capture_output=True,
                              text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
        seconds = time.perf_counter() - began
    peak = next((int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("PEAK_KIB")), 0)
    return {"samples_per_result": samples, "exit": done.returncode, "seconds": round(seconds, 2),
            "peak_rss_mib": round(peak / 1024, 1), "within_goal": done.returncode == 0 and seconds < LIMIT_S
            and peak / 1024 < LIMIT_MIB, "table_tail": done.stdout.strip().splitlines()[-3:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[1000, 250000])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "bench_compare.json")
    args = parser.parse_args()
    runs = [measure(n) for n in args.samples]
    print_and_save({"goal": {"seconds": LIMIT_S, "peak_rss_mib": LIMIT_MIB}, "cpus": os.cpu_count(),
                    "self_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                    "runs": runs}, args.out)
    sys.exit(0 if all(r["within_goal"] for r in runs) else 1)


if __name__ == "__main__":
    main()
