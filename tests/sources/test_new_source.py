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
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

TOY_SOURCE = '''
"""Toy: a dense layer (``w``, ``b`` in NAME.linear.npz) with a ReLU, provided as a float ONNX graph."""

from pathlib import Path

from .. import forms
from ..forms import ModelForm
from .base import Source


def detect(model: Path):
    return "linear" if model.name.endswith(".linear.npz") else None


def prepare(model_path, kind, export_dir, hints=None):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    with np.load(model_path) as stored:
        w, b = stored["w"].astype(np.float32), stored["b"].astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "w"], ["z"], name="dense"),
         helper.make_node("Add", ["z", "b"], ["y"], name="bias"),
         helper.make_node("Relu", ["y"], ["activation"], name="relu")],
        "linear", [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", w.shape[0]])],
        [helper.make_tensor_value_info("activation", TensorProto.FLOAT, ["batch", w.shape[1]])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(Path(export_dir).with_name("linear.onnx"))
    onnx.save(model, path)
    return {
        "inputs": [{"name": "features", "shape": [-1, int(w.shape[0])], "dtype": "float32"}],
        "outputs": [{"name": "activation", "shape": [-1, int(w.shape[1])], "dtype": "float32"}],
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
'''


def test_a_toy_source_is_one_module_and_reaches_every_format(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(ROOT / "edgekit", site / "edgekit", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "edgekit" / "sources" / "toy_linear.py").write_text(textwrap.dedent(TOY_SOURCE).lstrip())
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=8).astype(np.float32) * 0.1
    np.savez(tmp_path / "dense.linear.npz", w=w, b=b)
    x = rng.normal(size=(240, 16)).astype(np.float32)
    np.savez(tmp_path / "calibration.npz", x=x)
    # the checkout's device profiles: the copy has no targets/, and without them the package would be
    # for this machine alone (then its S8S8 ONNX is judged by this CPU's kernels, which saturate without VNNI)
    env = {**os.environ, "PYTHONPATH": str(site), "TF_CPP_MIN_LOG_LEVEL": "3", "EDGEKIT_PROFILES": str(ROOT / "targets")}

    def child(*args):
        return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=900)

    routes = child("-m", "edgekit.cli", "routes")
    assert "linear -> onnx-graph -> onnx" in routes.stdout, routes.stdout
    assert "linear -> onnx-to-torch -> torch-program -> tflite" in routes.stdout
    assert "linear -> onnx-to-torch -> torch-module -> coreml" in routes.stdout
    built = child("-m", "edgekit.cli", "package", tmp_path / "dense.linear.npz", "-c", tmp_path / "calibration.npz",
                  "--format", "all", "--also-float", "-o", tmp_path / "out")
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
