"""The search reaches models plain INT8 breaks: a streaming step whose state collapses (a
multi-input model: the per-layer report feeds every input), searched by blocks with default
flags and checked on held-out data the search did not see."""

from __future__ import annotations

import json

import pytest

from tests.conftest import edgekit_cli, verdict_model

pytestmark = pytest.mark.slow


def test_a_streaming_state_that_collapses_in_int8_ships_with_a_searched_block_plan(tmp_path_factory, tmp_path):
    model = verdict_model(tmp_path_factory, "vad_stream")
    common = (model / "vad_stream.pt2", "-c", model / "calibration.npz", "--eval", model / "eval.npz", "--format",
              "onnx", "--no-also-float")
    plain = edgekit_cli("package", *common, "-o", tmp_path / "plain", "--no-auto-fix")
    assert plain.returncode == 1 and "output_1': SQNR" in plain.stderr + plain.stdout
    searched = edgekit_cli("package", *common, "-o", tmp_path / "out")
    assert searched.returncode == 0, searched.stderr[-3000:]
    assert "blocks to raise" in searched.stdout
    manifest = json.loads((tmp_path / "out" / "vad_stream.edgekit" / "manifest.json").read_text())
    record = manifest["validation"]["artifacts"]["onnx"]
    assert record["verdict"] == "passed"
    tries = record["auto_fix"]
    assert tries[0]["change"] == "--calibration-method percentile" or any(t["change"] == "per-layer report"
                                                                          for t in tries)
    confirmation = tries[-1]
    assert confirmation["stage"] == "confirmation" and confirmation["kept"] and "budget" in confirmation
    artifact = next(a for a in manifest["artifacts"] if a["format"] == "onnx" and not a.get("variant"))
    plan = artifact["details"]["precision_plan"]["layers"]
    assert plan and len(plan) < 6 and artifact["precision"].startswith("int8+")  # most of it still int8
