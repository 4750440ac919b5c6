"""CoreML artifacts measured on Linux for the model class users bring, and the ones that cannot be
said as such: built, unverified, never shipped as verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import CALIBRATION, ROOT, built_once, edgekit_cli

pytestmark = pytest.mark.slow
pytest.importorskip("coremltools")


def _coreml_ops(folder: Path) -> Path:
    pytest.importorskip("torch")
    subprocess.run([sys.executable, str(ROOT / "models/verdict/build.py"), "coreml_ops", "--output", str(folder)],
                   check=True, capture_output=True, env={"TF_CPP_MIN_LOG_LEVEL": "3", **os.environ})
    return folder / "coreml_ops"


def test_a_model_with_prelu_upsample_silu_split_and_lstm_is_measured_on_linux(tmp_path_factory, tmp_path):
    model = built_once(tmp_path_factory, "coreml-ops", _coreml_ops)
    result = edgekit_cli("package", model / "coreml_ops.pt2", "-c", model / "calibration.npz", "--eval",
                         model / "eval.npz", "--format", "coreml", "-o", tmp_path, "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "coreml_ops.edgekit" / "manifest.json").read_text())
    artifact = manifest["artifacts"][0]
    assert artifact["precision"] == "int8" and artifact["details"]["activations"] == "int8"
    record = manifest["validation"]["artifacts"]["coreml"]
    assert record["measured"] is True and record["verdict"] == "passed"
    assert record["tasks"]["output"]["evidence"][0]["n"] == 150  # gates with numbers, not "not measured"
    assert record["top1_agreement"] >= 0.99
    from edgekit.formats.coreml.evaluator import load_program

    program = load_program(str(tmp_path / "coreml_ops.edgekit" / artifact["path"]))
    ops = Counter(op.op_type for op in program.functions["main"].operations)
    for op in ("prelu", "upsample_nearest_neighbor", "silu", "split", "concat", "lstm"):
        assert ops[op] >= 1, ops


def test_a_coreml_artifact_nothing_here_can_run_is_built_unverified_never_shipped(sin_saved_model, tmp_path):
    result = edgekit_cli("package", sin_saved_model, "-c", CALIBRATION, "--format", "coreml", "-o", tmp_path)
    assert result.returncode == 5, result.stderr[-3000:]  # written, but no verified INT8 in it
    assert "built, unverified" in result.stderr and "sin" in result.stderr
    assert "--artifact coreml --eval" in result.stderr  # how to measure it where CoreML runs
    manifest = json.loads((tmp_path / "sin_model.edgekit" / "manifest.json").read_text())
    record = manifest["validation"]["artifacts"]["coreml"]
    assert record["measured"] is False and "sin" in record["reason"]
    assert manifest["validation"]["state"] == "not measured"
