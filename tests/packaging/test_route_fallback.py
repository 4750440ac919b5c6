"""Routes fall back: a format whose preferred route cannot convert the model is built on the next
route in the table that can, said out loud and recorded in the artifact (``routes.routes``)."""

from __future__ import annotations

import json

import pytest

from edgekit import routes
from edgekit.formats import get_format
from edgekit.sources import SOURCES
from tests.conftest import edgekit_cli, verdict_model


def _pytorch():
    return next(s for s in SOURCES if "torch_export" in s.provides)


def test_every_route_to_a_format_is_listed_preferred_first():
    found = routes.routes(_pytorch(), "torch_export", get_format("tflite"))
    assert [r.describe() for r in found] == ["torch_export -> torch-program -> tflite",
                                             "torch_export -> onnx-to-torch -> torch-program -> tflite"]
    assert "LSTM" in found[0].cannot and "LSTM" not in found[1].cannot  # the rebuild unrolls it
    assert routes.route(_pytorch(), "torch_export", get_format("tflite")) == found[0]


def test_the_fallback_is_the_next_route_that_converts_the_ops():
    found = routes.routes(_pytorch(), "torch_export", get_format("tflite"))
    assert routes.fallback_route(found[0], found, ["LSTM", "Gemm"]) == found[1]
    assert routes.fallback_route(found[0], found, ["RNN"]) is None  # no route here converts a plain RNN
    assert routes.fallback_route(found[1], found[1:], ["LSTM"]) is None  # nothing left to try


@pytest.mark.slow
def test_a_pytorch_lstm_reaches_tflite_through_onnx(tmp_path_factory, tmp_path):
    """litert-torch has no LSTM: the encoder is built through ONNX and the ONNX -> PyTorch
    rebuild (which unrolls it), said, recorded, and judged on held-out data like any build."""
    model = verdict_model(tmp_path_factory, "lstm_encoder")
    result = edgekit_cli("package", model / "lstm_encoder.pt2", "-c", model / "calibration.npz", "--eval",
                         model / "eval.npz", "--format", "tflite", "-o", tmp_path, "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    said = result.stdout + result.stderr
    assert "cannot convert this model (LSTM" in said and "using torch_export -> onnx-to-torch" in said
    manifest = json.loads((tmp_path / "lstm_encoder.edgekit" / "manifest.json").read_text())
    artifact = manifest["artifacts"][0]
    assert artifact["format"] == "tflite" and artifact["precision"].startswith("int8")
    assert artifact["details"]["route"]["used"] == "torch_export -> onnx-to-torch -> torch-program -> tflite"
    assert "LSTM" in artifact["details"]["route"]["instead_of"][0]["because"]
    assert manifest["validation"]["artifacts"]["tflite"]["verdict"] == "passed"
