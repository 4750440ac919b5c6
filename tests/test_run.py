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


def run_device(*args, env=None):
    return subprocess.run([sys.executable, "-c", _PROBE, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


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
    np.save(tmp_path / "a.npy", np.zeros((8, 8, 1), np.uint8))  # a real input: the package is what is missing
    result = run_device(tmp_path / "missing.edgekit", "--input", tmp_path / "a.npy")
    assert result.returncode == 1
    assert "error: package" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_import_edgekit_run_loads_no_build_side_library():
    code = (
        "import sys, edgekit.run, edgekit.runtime\n"
        "heavy = [m for m in ('tensorflow', 'keras', 'coremltools', 'tf2onnx') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_plain_tflite_and_onnx_files_run_without_a_manifest(digits_all_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "x.npy", x[:1].astype(np.float32) / 255)
    outputs = {}
    for artifact in ("tflite/model.int8.tflite", "onnx/model.int8.onnx"):
        result = run_device(digits_all_package / artifact, "-i", tmp_path / "x.npy", "-o", tmp_path / "o.json")
        assert result.returncode == 0, result.stderr
        outputs[artifact] = np.asarray(json.loads((tmp_path / "o.json").read_text()))
    assert outputs["tflite/model.int8.tflite"].shape == (1, 10)
    assert outputs["tflite/model.int8.tflite"].argmax() == outputs["onnx/model.int8.onnx"].argmax()


def test_url_source_profile_choice_and_prediction_cache(digits_all_package, tmp_path):
    from edgekit.package_io import write_archive

    archive = tmp_path / "digits.ekpkg"
    write_archive(digits_all_package, archive)
    x, y = load_npz(EVAL)
    np.save(tmp_path / "a.npy", x[0])
    env_cache = {"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")}
    args = (archive.as_uri(), "-i", tmp_path / "a.npy", "--target", "gpu-server", "-v", "--cache-predictions")
    first = run_device(*args, env=env_cache)
    assert first.returncode == 0, first.stderr
    assert "profile=gpu-server, artifact=onnx, backend=onnxruntime" in first.stderr
    assert "providers=['CPUExecutionProvider']" in first.stderr
    assert "0 hits, 1 misses" in first.stderr
    second = run_device(*args, env=env_cache)
    assert "1 hits, 0 misses" in second.stderr and "optimized_model_from_cache=True" in second.stderr
    assert first.stdout.split("HEAVY")[0] == second.stdout.split("HEAVY")[0]
    assert f": {y[0]} " in first.stdout


def test_device_errors_name_the_fix(digits_all_package, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((8, 8, 1), np.uint8))
    coreml = run_device(digits_all_package, "-i", tmp_path / "a.npy", "--artifact", "coreml")
    assert coreml.returncode == 1 and "coreml needs coreml" in coreml.stderr and "fix:" in coreml.stderr
    profile = run_device(digits_all_package, "-i", tmp_path / "a.npy", "--target", "nope")
    assert profile.returncode == 1 and "unknown device profile 'nope'" in profile.stderr
    np.save(tmp_path / "bad.npy", np.zeros((3, 3), np.uint8))
    shape = run_device(digits_all_package, "-i", tmp_path / "bad.npy")
    assert shape.returncode == 1 and "the model expects (N, 8, 8, 1)" in shape.stderr
    (tmp_path / "broken.png").write_bytes(b"\x89PNG no")
    image = run_device(digits_all_package, "-i", tmp_path / "broken.png")
    assert image.returncode == 1 and "cannot read image" in image.stderr
    for result in (coreml, profile, shape, image):
        assert "Traceback" not in result.stderr


def test_missing_input_file_is_named_before_the_model_loads(digits_package, tmp_path):
    result = run_device(digits_package, "--input", tmp_path / "cat.jpg")
    assert result.returncode == 1
    assert "input file(s) not found: " in result.stderr and "cat.jpg" in result.stderr
    assert "check the --input paths" in result.stderr and "Traceback" not in result.stderr
