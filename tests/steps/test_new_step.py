"""A new conversion step is one new module in ``edgekit/steps/``: the route table takes it, with
nothing else in edgekit edited.

The toy source provides a dense layer only as its stored weights (a ``linear-weights`` form no
format converts from), so without a step it reaches no format. The toy step turns those weights
into a float ONNX graph (MatMul, Add, Relu); with it, the model reaches ONNX through the step,
packages (the source's own versions and facts in the manifest), and the device runtime's
predictions match the layer computed with NumPy. Both modules
are added to a copy of the edgekit package and used by child processes; a second module declaring
the same step is refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import DENSE_LAYER_ONNX, add_to_copy, dense_layer_files, edgekit_with

pytestmark = pytest.mark.slow

TOY_SOURCE = '''
"""Toy: a dense layer (``w``, ``b`` in NAME.linear.npz) with a ReLU, provided as its weights alone."""

from pathlib import Path

from ..conversion.forms import ModelForm
from .base import Source

WEIGHTS = "linear-weights"


def detect(model: Path):
    return "linear" if model.name.endswith(".linear.npz") else None


def prepare(model_path, kind, export_dir, hints=None):
    import numpy as np

    with np.load(model_path) as stored:
        inputs, outputs = stored["w"].shape
    return {
        "inputs": [{"name": "features", "shape": [-1, int(inputs)], "dtype": "float32"}],
        "outputs": [{"name": "activation", "shape": [-1, int(outputs)], "dtype": "float32"}],
        "layers": ["dense", "bias", "relu"], "rescales": False, "output_layers": {"activation": "relu"},
        "model_path": str(model_path),
        "forms": {WEIGHTS: ModelForm(WEIGHTS, str(model_path), via="toy dense layer weights").to_dict()},
        "versions": {"toy-weights": "1.0"}, "recorded": {"layout": "w, b"},  # what the manifest keeps
    }


def float_reference(prepared, inputs_npz, output_npz):
    import numpy as np

    with np.load(prepared["model_path"]) as stored, np.load(inputs_npz) as inputs:
        x = inputs["features"].astype(np.float32)
        np.savez(output_npz, activation=np.maximum(x @ stored["w"] + stored["b"], 0).astype(np.float32))


SOURCE = Source(name="toy", accepts="NAME.linear.npz", detect=detect, prepare=prepare,
                float_reference=float_reference, provides={"linear": (WEIGHTS,)})
'''

TOY_STEP = '''
"""Toy step: a dense layer's stored weights as a float ONNX graph (MatMul, Add, Relu)."""

from pathlib import Path

from ..conversion import forms
from ..conversion.forms import ModelForm
from .base import Conversion


def weights_to_onnx(form, context):
    path = Path(context.workdir) / "linear.onnx"
    dense_layer_onnx(form.path, path)
    return ModelForm(forms.ONNX_GRAPH, str(path), via=f"{form.via}, then the toy weights-to-ONNX step")


CONVERSIONS = (Conversion("weights-to-onnx", "linear-weights", forms.ONNX_GRAPH, weights_to_onnx),)
''' + DENSE_LAYER_ONNX


def test_a_toy_step_is_one_module_and_takes_a_new_form_to_a_format(tmp_path):
    child = edgekit_with(tmp_path, {"sources/toy_weights.py": TOY_SOURCE})
    w, b, x = dense_layer_files(tmp_path)
    package_args = ("-m", "edgekit.cli", "package", tmp_path / "dense.linear.npz", "-c", tmp_path / "calibration.npz",
                    "--format", "onnx", "-o", tmp_path / "out")
    # without the step the weights reach no format
    before = child("-m", "edgekit.cli", "routes")
    assert before.returncode == 0 and "linear ->" not in before.stdout, before.stdout
    refused = child(*package_args)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert "no route converts a linear model to onnx" in refused.stderr, refused.stderr[-2000:]

    add_to_copy(child.site, {"steps/toy_weights_to_onnx.py": TOY_STEP})
    routes = child("-m", "edgekit.cli", "routes")
    assert "linear -> weights-to-onnx -> onnx-graph -> onnx" in routes.stdout, routes.stdout + routes.stderr
    built = child(*package_args)
    assert built.returncode == 0, built.stderr[-3000:]
    package = tmp_path / "out" / "dense.linear.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["validation"]["artifacts"]["onnx"]["passed"], manifest["validation"]["artifacts"]["onnx"]
    # a new source's own facts and versions reach the manifest (no fixed table drops them)
    assert manifest["versions"]["toy-weights"] == "1.0" and manifest["source"]["layout"] == "w, b"
    from edgekit.manifest import Manifest

    tool = next(a.converter["tool"] for a in Manifest.from_json((package / "manifest.json").read_bytes()).artifacts
                if a.key == "onnx")
    assert tool.startswith("toy dense layer weights, then the toy weights-to-ONNX step"), tool
    np.save(tmp_path / "x.npy", x[:5])
    run = child("-m", "edgekit.run", package, "-i", tmp_path / "x.npy", "--artifact", "onnx", "-o", tmp_path / "y.npy")
    assert run.returncode == 0, run.stderr[-3000:]
    expected = np.maximum(x[:5] @ w + b, 0)
    predicted = np.load(tmp_path / "y.npy")
    assert predicted.shape == expected.shape
    assert np.abs(predicted - expected).max() < 0.1 * np.abs(expected).max()

    # the same step declared twice is an error that names it, not a silent replacement
    add_to_copy(child.site, {"steps/toy_again.py": TOY_STEP})
    twice = child("-m", "edgekit.cli", "routes")
    assert twice.returncode != 0
    assert "conversion step 'weights-to-onnx -> onnx-graph' is registered twice" in twice.stderr, twice.stderr[-2000:]
