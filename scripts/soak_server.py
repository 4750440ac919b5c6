#!/usr/bin/env python
"""Soak test: run edgekit serve under steady load for N minutes; report RSS growth and errors.

    .venv/bin/python scripts/soak_server.py PACKAGE [--minutes 10] [--concurrency 16] [--output out/bench/soak.json]

Not part of the test suite (it runs for minutes). The server runs as a child process on
loopback; its RSS is sampled from /proc every few seconds. A healthy server shows RSS that
levels off after warm-up and zero errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchio import save_json  # noqa: E402

from bench_server import closed_loop, free_port, wait_ready  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "soak_server.json")
    args = parser.parse_args()

    import edgekit

    with edgekit.load(args.package) as model:
        name, spec = model.manifest.name, model.manifest.inputs[0]
    shape = [1, *[d if d > 0 else 1 for d in spec.shape[1:]]]
    x = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
    body = json.dumps({"inputs": [{"name": spec.name, "shape": shape, "datatype": "FP32",
                                   "data": x.reshape(-1).tolist()}]}).encode()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "edgekit.run", args.package, "--serve", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    samples, totals = [], {"requests": 0, "errors": 0}
    try:
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready")
        url = f"http://127.0.0.1:{port}/v2/models/{name}/infer"
        end = time.time() + args.minutes * 60
        while time.time() < end:
            result = asyncio.run(closed_loop(url, body, {"content-type": "application/json"}, args.concurrency,
                                             args.interval, 10**9))
            totals["requests"] += result["requests"]
            totals["errors"] += result["errors"]
            samples.append({"t_s": round(args.minutes * 60 - (end - time.time()), 1), "rss_mib": round(rss_mib(server.pid), 1),
                            "throughput_per_s": result["throughput_per_s"], "p99_ms": result["p99_ms"]})
            print(json.dumps(samples[-1]), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    rss = [s["rss_mib"] for s in samples]
    after_warmup = rss[len(rss) // 5:] or rss
    report = {"package": args.package, "minutes": args.minutes, "concurrency": args.concurrency, **totals,
              "rss_first_mib": rss[0] if rss else None, "rss_last_mib": rss[-1] if rss else None,
              "rss_growth_after_warmup_mib": round(after_warmup[-1] - after_warmup[0], 1) if after_warmup else None,
              "samples": samples}
    save_json(report, args.output)
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))


if __name__ == "__main__":
    main()
