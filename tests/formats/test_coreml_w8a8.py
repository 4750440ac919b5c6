"""CoreML on Linux: float programs match Keras through the evaluator; digits W8A8 end to end."""

from __future__ import annotations

import json

import pytest

from edgekit.manifest import Manifest
from tests.conftest import DIGITS_MODEL, ROOT, run_python

pytestmark = pytest.mark.slow

_FLOAT_CHECK = """
import json, os, sys
import numpy as np, keras, coremltools as ct
sys.path.insert(0, {root!r})
from edgekit.formats.coreml.evaluator import Evaluator, load_program_from_model
model = {build}
shape = tuple(model.inputs[0].shape[1:])
x = np.random.default_rng(0).uniform(0, 1, ({n}, *shape)).astype(np.float32)
mlmodel = ct.convert(model, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17,
                     inputs=[ct.TensorType(name=model.inputs[0].name, shape=(1, *shape), dtype=np.float32)],
                     outputs=[ct.TensorType(dtype=np.float32)])
ours = Evaluator(load_program_from_model(mlmodel)).predict(x).reshape(len(x), -1)
ref = model.predict(x, verbose=0).reshape(len(x), -1)
cos = float(np.min(np.sum(ours * ref, 1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))))
print(json.dumps({{"max_abs_error": float(np.abs(ours - ref).max()), "min_cosine": cos,
                  "ref_range": [float(ref.min()), float(ref.max())]}}))
"""


def float_check(build: str, n: int) -> dict:
    out = run_python(_FLOAT_CHECK.format(root=str(ROOT), build=build, n=n))
    return json.loads(out.strip().splitlines()[-1])


def test_digits_float_program_matches_keras():
    result = float_check(f"keras.models.load_model({str(DIGITS_MODEL)!r}, compile=False)", 32)
    assert result["min_cosine"] >= 0.9999, result
    assert result["max_abs_error"] < 1e-2, result  # softmax outputs; the program stores float16 weights


def test_mobilenet_v2_float_program_matches_keras_logits():
    build = ("(keras.utils.set_random_seed(0), keras.applications.MobileNetV2(input_shape=(224, 224, 3), "
             "weights=None, classifier_activation=None))[1]")
    result = float_check(build, 2)
    assert result["min_cosine"] >= 0.9999, result
    assert result["max_abs_error"] < 1e-2 * max(abs(v) for v in result["ref_range"]), result


def test_digits_coreml_w8a8_on_linux(digits_all_package):
    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    artifact = manifest.artifact("coreml")
    details = artifact.details
    assert artifact.precision == "int8" and details["activations"] == "int8"
    assert details["structure"]["int8_activation_quantize_ops"] >= 8
    assert details["structure"]["int8_weight_ops"] == details["structure"]["weight_ops"] == 8
    calibration = details["activation_calibration"]
    assert calibration["samples"] == 300 and "edgekit MIL evaluator" in calibration["method"]
    assert calibration["tensors"] == len(calibration["ranges"]) > 10
    metrics = manifest.validation["artifacts"]["coreml"]
    assert metrics["measured"] is True and "MIL evaluator" in metrics["measured_by"]
    assert metrics["accuracy"] >= manifest.validation["float"]["accuracy"] - 0.01
    assert metrics["top1_agreement"] >= 0.98


@pytest.mark.skipif(__import__("sys").platform != "darwin",
                    reason="CoreML prediction exists only on macOS: the evaluator-vs-CoreML comparison runs there")
def test_evaluator_agrees_with_coreml_prediction_on_macos(digits_all_package):
    import numpy as np

    from edgekit.formats.coreml.backend import CoreMLBackend
    from edgekit.formats.coreml.evaluator import Evaluator, load_program
    from tests.conftest import EVAL, load_npz

    path = str(digits_all_package / "coreml" / "model.int8.mlpackage")
    x, _ = load_npz(EVAL)
    x = x[:64].astype(np.float32) / 255
    ours = Evaluator(load_program(path)).predict(x)
    coreml = CoreMLBackend(path).run(x)[0]
    assert np.mean(ours.argmax(1) == coreml.argmax(1)) >= 0.98
    assert np.abs(ours - coreml).max() < 0.05
