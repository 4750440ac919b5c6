"""CoreML on Linux: float programs match Keras through the evaluator; digits W8A8 end to end."""

from __future__ import annotations

import json

import pytest

from edgekit.manifest import Manifest
from tests.conftest import DIGITS_MODEL

pytestmark = pytest.mark.slow

def _float_check(model, n: int) -> dict:
    """``model`` converted to a float ML program and run by the MIL evaluator beside Keras."""
    import coremltools as ct
    import numpy as np

    from edgekit.formats.coreml.evaluator import Evaluator, load_program_from_model

    shape = tuple(model.inputs[0].shape[1:])
    x = np.random.default_rng(0).uniform(0, 1, (n, *shape)).astype(np.float32)
    mlmodel = ct.convert(model, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17,
                         inputs=[ct.TensorType(name=model.inputs[0].name, shape=(1, *shape), dtype=np.float32)],
                         outputs=[ct.TensorType(dtype=np.float32)])
    ours = Evaluator(load_program_from_model(mlmodel)).predict(x).reshape(len(x), -1)
    ref = model.predict(x, verbose=0).reshape(len(x), -1)
    cos = float(np.min(np.sum(ours * ref, 1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))))
    return {"max_abs_error": float(np.abs(ours - ref).max()), "min_cosine": cos,
            "ref_range": [float(ref.min()), float(ref.max())]}


@pytest.fixture(scope="module")
def float_checks() -> dict:
    """The digits model and a MobileNetV2 (random weights; its inverted residuals, depthwise
    convolutions and ReLU6 at 96x96) converted to float ML programs and run by the MIL evaluator
    beside Keras, in this worker (which imports TensorFlow and coremltools for other tests already)."""
    import keras

    keras.utils.set_random_seed(0)
    mobilenet = keras.applications.MobileNetV2(input_shape=(96, 96, 3), weights=None, classifier_activation=None)
    return {"digits": _float_check(keras.models.load_model(DIGITS_MODEL, compile=False), 32),
            "mobilenet_v2": _float_check(mobilenet, 2)}


def test_digits_float_program_matches_keras(float_checks):
    result = float_checks["digits"]
    assert result["min_cosine"] >= 0.9999, result
    assert result["max_abs_error"] < 1e-2, result  # softmax outputs; the program stores float16 weights


def test_mobilenet_v2_float_program_matches_keras_logits(float_checks):
    result = float_checks["mobilenet_v2"]
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
    metrics = manifest.validation.to_dict()["artifacts"]["coreml"]
    assert metrics["measured"] is True and "MIL evaluator" in metrics["measured_by"]
    assert metrics["accuracy"] >= manifest.validation.to_dict()["float"]["accuracy"] - 0.01
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


def test_activation_ranges_span_every_calibration_sample_not_the_last_one():
    """coremltools' range update keeps only the last sample's min/max; edgekit's keeps the running
    range, on Linux (its own calibration) and on macOS (coremltools' calibration, patched)."""
    import numpy as np
    from coremltools.optimize.coreml.experimental import _model_debugger, _post_training_quantization

    from edgekit.formats.coreml.quantize import running_ranges, track_range

    stats: dict = {}
    for value in (np.array([-4.0, 5.0]), np.array([0.1, 0.2])):
        track_range("t", value, stats)
    assert stats["t"] == {"rmin": -4.0, "rmax": 5.0}
    original = _post_training_quantization._update_tensor_range
    with running_ranges():
        patched: dict = {"t": {}}
        for value in (np.array([-4.0, 5.0]), np.array([0.1, 0.2])):
            _post_training_quantization._update_tensor_range("t", value, patched)
            _model_debugger.ModelDebugger.record_intermediate_output(value * 2, "u", patched)
        assert patched["t"] == {"rmin": -4.0, "rmax": 5.0} and patched["u"] == {"rmin": -8.0, "rmax": 10.0}
    assert _post_training_quantization._update_tensor_range is original  # restored


def test_a_dense_layer_calibrates_on_every_sample(tmp_path):
    """One MatMul on [N, 16] features: with the last sample's range its output clipped at a
    quarter of its real range (8.3 dB SQNR); calibrated on every sample it is INT8-accurate."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.conftest import edgekit_cli

    weights = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.3, (16, 8)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["features", "W"], ["y"])], "dense",
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], initializer=[weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "dense.onnx")
    np.save(tmp_path / "features.npy", np.random.default_rng(1).normal(0, 1, (150, 16)).astype(np.float32))
    result = edgekit_cli("package", tmp_path / "dense.onnx", "-c", tmp_path / "features.npy", "-o", tmp_path / "out",
                         "--format", "coreml", "--no-also-float")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "out" / "dense.edgekit" / "manifest.json").read_text())
    assert manifest["validation"]["artifacts"]["coreml"]["sqnr_db"] > 30


def test_a_traced_pytorch_route_that_fails_int8_activations_ships_int8_weights_with_float16_activations(
        tmp_path_factory, tmp_path):
    """prelu_landmarks (a torch.export program): CoreML's traced route keeps no layer in float, so
    no plan reaches it; W8A8 misses its 20 dB floor (7.5 dB). The search's one rebuild there is
    int8 weights with float16 activations, which passes and is recorded as the fix kept."""
    from tests.conftest import edgekit_cli, verdict_model

    model = verdict_model(tmp_path_factory, "prelu_landmarks")
    result = edgekit_cli("package", model / "prelu_landmarks.pt2", "-c", model / "calibration.npz", "--eval",
                         model / "eval.npz", "--format", "coreml", "--no-also-float", "-o", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "search coreml: --coreml-activations float16" in result.stdout
    manifest = json.loads((tmp_path / "prelu_landmarks.edgekit" / "manifest.json").read_text())
    (artifact,) = manifest["artifacts"]
    assert artifact["precision"] == "int8 weights"
    kept = [t for t in manifest["validation"]["artifacts"]["coreml"]["auto_fix"] if t.get("kept")]
    assert kept[0]["change"] == "--coreml-activations float16"
