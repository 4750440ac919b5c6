"""`python -m edgekit.run PKG --bench` end to end on the real digits package."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edgekit.bench.report import SCHEMA_FILE, read_report
from tests.conftest import EVAL, ROOT, load_npz

pytestmark = pytest.mark.slow


def _check_required(schema: dict, value: object, where: str, defs: dict) -> None:
    """The `required` and `type: object/array` parts of the JSON Schema, recursively."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].split("/")[-1]]
    if isinstance(value, dict):
        for key in schema.get("required", []):
            assert key in value, f"{where}.{key} missing"
        for key, sub in schema.get("properties", {}).items():
            if key in value and value[key] is not None:
                _check_required(sub, value[key], f"{where}.{key}", defs)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check_required(schema["items"], item, f"{where}[{i}]", defs)


def bench(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "edgekit.run", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def test_sweep_report_follows_the_schema(digits_all_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "digit.npy", x[0])
    report_path = tmp_path / "r.json"
    result = bench(digits_all_package, "--bench", "--sweep", "--sweep-threads", "1,2", "--runs", "40",
                   "--min-seconds", "0.2", "--warmup", "3", "--input", tmp_path / "digit.npy", "--eval", EVAL,
                   "--report", report_path, "--csv", tmp_path / "r.csv", "--device-name", "ci",
                   "--no-launch")  # launch timing: test_run_context_cli.py (12 configurations would start 12 children)
    assert result.returncode == 0, result.stderr
    report = read_report(report_path)
    schema = json.loads(SCHEMA_FILE.read_text())
    _check_required(schema, report, "report", schema["$defs"])
    configs = [(r["config"]["artifact"], r["config"]["threads"]) for r in report["results"]]
    # every artifact (each ONNX INT8 scheme, the float fallbacks too); coreml: not on Linux
    assert sorted(configs) == [(a, t) for a in ("executorch", "executorch-float32", "onnx", "onnx-float32",
                                                "onnx-u8s7", "onnx-u8s8", "tflite", "tflite-float16") for t in (1, 2)]
    for entry in report["results"]:
        latency = entry["latency"]
        assert latency["count"] == len(latency["samples_ms"]) >= 40
        assert latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
        assert entry["accuracy"]["accuracy"] >= 0.97 and entry["accuracy"]["samples"] == 360
        e2e = entry["end_to_end"]
        assert e2e["total"]["p50_ms"] >= e2e["invoke"]["p50_ms"] > 0
        assert {"profile_s", "open_package_s", "verify_s", "create_runtime_s", "total_s"} <= set(entry["load_ms"])
    assert report["device"]["name"] == "ci" and report["device"]["libraries"]["numpy"]
    assert "thermal" in report and report["thermal"]["throttled"] in (True, False)
    assert "end to end p50" in result.stdout and f"report: {report_path}" in result.stdout
    assert (tmp_path / "r.csv").read_text().count("\n") == 1 + len(configs)


def test_archive_bench_reports_cache_miss_then_hit(digits_package, tmp_path):
    env_dir = tmp_path / "cache"
    import os

    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(env_dir)}
    reports = []
    for i in range(2):
        path = tmp_path / f"{i}.json"
        proc = subprocess.run([sys.executable, "-m", "edgekit.run", str(digits_package.with_suffix(".ekpkg")),
                               "--bench", "--runs", "10", "--min-seconds", "0", "--report", str(path)],
                              capture_output=True, text=True, cwd=ROOT, env=env)
        assert proc.returncode == 0, proc.stderr
        reports.append(read_report(path))
    assert reports[0]["results"][0]["load_ms"]["cache_hit"] is False
    assert reports[1]["results"][0]["load_ms"]["cache_hit"] is True


@pytest.mark.parametrize("args, message", [
    (["--runs", "0"], "--runs: must be at least 1"),
    (["--warmup", "-1"], "--warmup: must not be negative"),
    (["--min-seconds", "-2"], "--min-seconds: must not be negative"),
    (["--min-seconds", "nan"], "--min-seconds: must be a finite number, got nan"),  # was "must not be negative"
    (["--tune-seconds", "inf"], "--tune-seconds: must be a finite number, got inf"),  # was taken
    (["--sweep-threads", "0,2"], "must be at least 1"),
])
def test_bad_bench_options_are_usage_errors(digits_package, args, message):
    result = bench(digits_package, "--bench", *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
