"""`python -m edgekit.run`: the device command line, and that it never imports TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import EVAL, ROOT, load_npz

pytestmark = pytest.mark.slow

_PROBE = """
import runpy, sys
sys.argv = ["edgekit.run", *sys.argv[1:]]
try:
    runpy.run_module("edgekit.run", run_name="__main__")
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "coremltools", "tf2onnx"))
print("HEAVY:" + ",".join(heavy))
sys.exit(code)
"""


def run_device(*args):
    env = {**os.environ}
    return subprocess.run([sys.executable, "-c", _PROBE, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT)


def test_run_prints_top_k_labels_without_importing_tensorflow(digits_package, tmp_path):
    x, y = load_npz(EVAL)
    np.save(tmp_path / "a.npy", x[0])
    np.save(tmp_path / "b.npy", x[1])
    result = run_device(digits_package.with_suffix(".ekpkg"), "--input", tmp_path / "a.npy",
                        "--input", tmp_path / "b.npy", "--top-k", "2")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.endswith(".npy") or ".npy:" in line]
    assert len(lines) == 2
    assert lines[0].split(": ")[1].startswith(f"{y[0]} ")
    assert "HEAVY:\n" in result.stdout or result.stdout.rstrip().endswith("HEAVY:")


def test_run_writes_json_output(digits_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "a.npy", x[0])
    result = run_device(digits_package, "-i", tmp_path / "a.npy", "--output", tmp_path / "out.json")
    assert result.returncode == 0, result.stderr
    values = json.loads((tmp_path / "out.json").read_text())
    assert np.asarray(values).shape == (1, 10)


def test_run_errors_are_one_line_without_traceback(tmp_path):
    result = run_device(tmp_path / "missing.edgekit", "--input", tmp_path / "a.npy")
    assert result.returncode == 1
    assert "error: package" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
