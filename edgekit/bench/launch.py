"""What an app user waits for: a new process loading the package and running its first inference.

Measured in child processes, so the user's own caches are never emptied: the first launch
with an empty edgekit cache (``EDGEKIT_CACHE_DIR`` pointed at a fresh folder: the package is
unpacked and verified, ONNX Runtime optimizes the graph, OpenVINO compiles, TensorRT builds
its engines), then a relaunch with that cache warm (compiled-engine cache hits). The OS page
cache is not dropped (that needs root), so "first launch" reads files the OS may still hold:
a device straight after boot can be slower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

_CHILD = r"""
import json, sys, time
started = time.perf_counter()
import numpy as np
from edgekit.device.runtime import load
imported = time.perf_counter()
source, artifact, backend, threads, profile, require_signature, trusted_keys = json.loads(sys.argv[1])
timings = {}
model = load(source, artifact=artifact, backend=backend, threads=threads, profile=profile, warmup=False,
             timings=timings, allow_failed=True, require_signature=require_signature, trusted_keys=trusted_keys)
loaded = time.perf_counter()
runtime = model.backend
feeds = [np.zeros((runtime.fixed_batch or 1, *[d if d > 0 else 1 for d in info.shape[1:]]), info.dtype)
         for info in runtime.inputs]
runtime.run(feeds, raw=True)
first = time.perf_counter()
described = runtime.describe()
print(json.dumps({"import_ms": (imported - started) * 1e3, "load_ms": (loaded - imported) * 1e3,
                  "first_inference_ms": (first - loaded) * 1e3, "cache_hit": timings.get("cache_hit"),
                  "compiled": {k: v for k, v in described.items()
                               if k in ("optimized_model_from_cache", "compiled_cache")}}))
"""
TIMEOUT_S = 600  # a TensorRT engine build on a Jetson takes minutes


def _child(source: str, config: tuple[Any, ...], cache: str) -> dict[str, Any]:
    env = dict(os.environ, EDGEKIT_CACHE_DIR=cache, PYTHONWARNINGS="ignore")
    start = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([source, *config])], capture_output=True,
                                text=True, timeout=TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"unreadable": f"the launch could not be measured ({type(exc).__name__})"}
    wall = (time.perf_counter() - start) * 1e3
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return {"unreadable": f"the launch could not be measured: {last[:300]}"}
    measured = json.loads(lines[-1])
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in measured.items()} | {
        "process_ms": round(wall, 3)}


def launch_times(source: str, artifact: str | None, backend: str | None, threads: int | None,
                 profile: str, require_signature: bool | None = None, trusted_keys: str | None = None) -> dict[str, Any]:
    """``first_launch`` (empty caches) and ``relaunch`` (caches warm), each: interpreter start to
    first result (``process_ms``) and its parts (import, load, first inference)."""
    with tempfile.TemporaryDirectory(prefix="edgekit-launch-") as cache:
        config = (artifact, backend, threads, profile, require_signature, trusted_keys)
        first = _child(source, config, cache)
        again = _child(source, config, cache) if "unreadable" not in first else first
    return {"first_launch": first, "relaunch": again,
            "note": "new processes; edgekit's cache empty, then warm; the OS page cache is not dropped"}
