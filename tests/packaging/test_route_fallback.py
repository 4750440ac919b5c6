"""Routes fall back: a format whose preferred route cannot convert the model is built on the next
route in the table that can, said out loud and recorded in the artifact (``routes.routes``)."""

from __future__ import annotations

import json

import pytest

from edgekit.routing import routes
from edgekit.formats import get_format
from edgekit.sources import SOURCES
from tests.conftest import edgekit_cli, verdict_model


def _pytorch():
    return next(s for s in SOURCES.values() if "torch_export" in s.provides)


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


GATED_MODEL = '''
import torch


class Gated(torch.nn.Module):
    """A small CNN whose forward branches on a tensor's value: torch.export cannot trace it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        if h.sum() >= 0:  # always true after a ReLU, but decided on the data
            h = h * 1.0
        return torch.softmax(self.head(h.mean(dim=(2, 3))), dim=-1)


def build():
    return Gated().eval()
'''


@pytest.mark.slow
def test_a_conversion_that_fails_on_the_preferred_route_is_built_on_the_next(tmp_path):
    """No preflight names the problem: litert-torch's own torch.export fails on a data-dependent
    branch. The TFLite build moves to the route through ONNX (whose exporter traces it), said
    with the first route's error, recorded, and judged like any build."""
    import numpy as np

    (tmp_path / "gated.py").write_text(GATED_MODEL)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calibration.npz", x=rng.normal(0, 1, (120, 3, 16, 16)).astype(np.float32))
    np.savez(tmp_path / "eval.npz", x=rng.normal(0, 1, (120, 3, 16, 16)).astype(np.float32))
    result = edgekit_cli("package", f"{tmp_path / 'gated.py'}:build", "-c", tmp_path / "calibration.npz", "--eval",
                         tmp_path / "eval.npz", "--format", "tflite", "--no-also-float", "--preprocessing", "raw",
                         "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    said = result.stdout + result.stderr
    assert "tflite: the route torch_factory -> torch-program -> tflite failed (" in said
    assert "trying torch_factory -> onnx-to-torch -> torch-program -> tflite" in said
    manifest = json.loads((tmp_path / "out" / "gated.edgekit" / "manifest.json").read_text())
    artifact = manifest["artifacts"][0]
    route = artifact["details"]["route"]
    assert route["used"] == "torch_factory -> onnx-to-torch -> torch-program -> tflite"
    assert route["instead_of"][0]["route"] == "torch_factory -> torch-program -> tflite"
    assert "data-dependent" in route["instead_of"][0]["because"]
    assert artifact["precision"].startswith("int8")
    assert manifest["validation"]["artifacts"]["tflite"]["verdict"] == "passed"
