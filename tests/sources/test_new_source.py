"""A new source is one new module: it declares the forms it provides, and the route table takes
it to every format, with nothing else in edgekit edited.

The toy source reads a dense layer stored as ``NAME.linear.npz`` (``w``, ``b``) and provides
one form, a float ONNX graph (MatMul, Add, Relu). The ONNX format converts that graph itself;
TFLite and CoreML reach it through the ONNX -> PyTorch step. The module is added to a copy of the
edgekit package; a child process using that copy packages the model for every format, and the
device runtime's predictions match the layer computed with NumPy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import DENSE_LAYER_ONNX, dense_layer_files, edgekit_with

pytestmark = pytest.mark.slow

TOY_SOURCE = '''
"""Toy: a dense layer (``w``, ``b`` in NAME.linear.npz) with a ReLU, provided as a float ONNX graph."""

from pathlib import Path

from ..conversion import forms
from ..conversion.forms import ModelForm
from .base import Source


def detect(model: Path):
    return "linear" if model.name.endswith(".linear.npz") else None


def prepare(model_path, kind, export_dir, hints=None):
    path = str(Path(export_dir).with_name("linear.onnx"))
    inputs, outputs = dense_layer_onnx(model_path, path)
    return {
        "inputs": [{"name": "features", "shape": [-1, int(inputs)], "dtype": "float32"}],
        "outputs": [{"name": "activation", "shape": [-1, int(outputs)], "dtype": "float32"}],
        "layers": ["dense", "bias", "relu"], "rescales": False, "output_layers": {"activation": "relu"},
        "model_path": model_path,
        "forms": {forms.ONNX_GRAPH: ModelForm(forms.ONNX_GRAPH, path, via="toy dense layer as ONNX").to_dict()},
    }


def float_reference(prepared, inputs_npz, output_npz):
    import numpy as np

    with np.load(prepared["model_path"]) as stored, np.load(inputs_npz) as inputs:
        x = inputs["features"].astype(np.float32)
        np.savez(output_npz, activation=np.maximum(x @ stored["w"] + stored["b"], 0).astype(np.float32))


SOURCE = Source(name="toy", accepts="NAME.linear.npz", detect=detect, prepare=prepare,
                float_reference=float_reference, provides={"linear": (forms.ONNX_GRAPH,)})
''' + DENSE_LAYER_ONNX


def test_a_toy_source_is_one_module_and_reaches_every_format(tmp_path):
    child = edgekit_with(tmp_path, {"sources/toy_linear.py": TOY_SOURCE})
    w, b, x = dense_layer_files(tmp_path)
    routes = child("-m", "edgekit.cli", "routes")
    assert "linear -> onnx-graph -> onnx" in routes.stdout, routes.stdout
    assert "linear -> onnx-to-torch -> torch-program -> tflite" in routes.stdout
    assert "linear -> onnx-to-torch -> torch-module -> coreml" in routes.stdout
    built = child("-m", "edgekit.cli", "package", tmp_path / "dense.linear.npz", "-c", tmp_path / "calibration.npz",
                  "--format", "all", "--no-also-float", "-o", tmp_path / "out")
    assert built.returncode == 0, built.stderr[-3000:]
    package = tmp_path / "out" / "dense.linear.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"]} >= {"tflite", "onnx", "coreml"}
    for key in ("tflite", "onnx", "coreml"):
        record = manifest["validation"]["artifacts"][key]
        assert record.get("measured") is False or record["passed"], (key, record)
    from edgekit.manifest import Manifest

    tools = {a.key: a.converter["tool"] for a in Manifest.from_json((package / "manifest.json").read_bytes()).artifacts}
    assert tools["onnx"].startswith("toy dense layer as ONNX, then ")
    assert tools["tflite"].startswith("edgekit ONNX -> PyTorch module, then litert_torch")
    np.save(tmp_path / "x.npy", x[:5])
    expected = np.maximum(x[:5] @ w + b, 0)
    for artifact in ("tflite", "onnx"):
        run = child("-m", "edgekit.run", package, "-i", tmp_path / "x.npy", "--artifact", artifact,
                    "-o", tmp_path / f"{artifact}.npy")
        assert run.returncode == 0, run.stderr[-3000:]
        predicted = np.load(tmp_path / f"{artifact}.npy")
        assert predicted.shape == expected.shape
        assert np.abs(predicted - expected).max() < 0.1 * np.abs(expected).max(), artifact
