"""How long a newcomer's first command takes: ``./scripts/demo.sh`` on a fresh clone, then again.

``--fresh`` clones the repository's HEAD into a temporary folder (no ``.venv``, nothing built),
runs the demo there twice (the first creates the environment and installs, the second reuses
it) and reports both wall times with the machine's load. Without it, the demo runs ``--runs``
times in this checkout (warm). The goals are in the README: fresh <= 4 min, warm <= 60 s on a
2-core machine.

    python scripts/bench_demo.py --fresh --output out/bench_demo.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchio import ROOT, print_and_save


def run_demo(checkout: Path, log: Path) -> dict[str, float | int]:
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with open(log, "w") as out:
        code = subprocess.run(["./scripts/demo.sh"], cwd=checkout, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "DEMO_OUT": str(checkout / "out" / "demo")}).returncode
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 1), "exit_code": code, "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2), "log": str(log)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="clone HEAD into a temporary folder and run there twice")
    parser.add_argument("--runs", type=int, default=1, help="warm runs in this checkout (without --fresh)")
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench_demo.json")
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="edgekit-bench-demo-"))
    report: dict[str, object] = {"cores": os.cpu_count(), "goals_s": {"fresh": 240, "warm": 60}}
    if args.fresh:
        checkout = logs / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True)
        report["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                                          text=True, check=True).stdout.strip()
        report["fresh"] = run_demo(checkout, logs / "fresh.log")
        report["warm"] = run_demo(checkout, logs / "warm.log")
    else:
        report["warm_runs"] = [run_demo(ROOT, logs / f"warm{i}.log") for i in range(args.runs)]
    failed = [r for r in (report.get("fresh"), report.get("warm"), *report.get("warm_runs", [])) if r
              and r["exit_code"] != 0]
    print_and_save(report, args.output)
    if failed:
        sys.exit(f"the demo failed: see {failed[0]['log']}")


if __name__ == "__main__":
    main()
