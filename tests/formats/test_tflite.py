"""The TFLite target on real models: full-integer output, float-op detection, sources."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.formats.tflite.backend import open_interpreter
from edgekit.manifest import Manifest
from edgekit.conversion.layer_names import layer_of
from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, run_cli, run_tf

pytestmark = pytest.mark.slow

_WEIGHTED_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}
_PARAMETER_INPUTS = {"MEAN": 1, "RESHAPE": 1, "PAD": 1}  # op -> index of its int32 parameter input


def test_digits_model_is_full_integer(digits_package):
    interpreter = open_interpreter(str(digits_package / "tflite" / "model.int8.tflite"), with_delegates=False)
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    ops = interpreter._get_ops_details()
    assert {op["op_name"] for op in ops} & {"QUANTIZE", "DEQUANTIZE"} == set()

    biases = {int(op["inputs"][2]) for op in ops if op["op_name"] in _WEIGHTED_OPS and len(op["inputs"]) > 2}
    parameters = {int(op["inputs"][_PARAMETER_INPUTS[op["op_name"]]]) for op in ops if op["op_name"] in _PARAMETER_INPUTS}
    used = {int(i) for op in ops for i in list(op["inputs"]) + list(op["outputs"]) if i >= 0}
    for index in used:
        dtype = np.dtype(details[index]["dtype"])
        if index in biases or index in parameters:
            assert dtype == np.int32, details[index]["name"]
        else:
            assert dtype == np.int8, f"{details[index]['name']} is {dtype}"
    assert biases, "expected int32 biases in conv/dense ops"
    (model_input,) = interpreter.get_input_details()
    (model_output,) = interpreter.get_output_details()
    assert np.dtype(model_input["dtype"]) == np.int8 and np.dtype(model_output["dtype"]) == np.int8


def test_digits_accuracy_within_one_point_and_agreement_at_least_98_percent(digits_package):
    manifest = Manifest.from_json((digits_package / "manifest.json").read_bytes())
    metrics = manifest.validation.to_dict()["artifacts"]["tflite"]
    float_accuracy = manifest.validation.to_dict()["float"]["accuracy"]
    assert manifest.validation.to_dict()["data"]["samples"] == 360
    assert float_accuracy > 0.95
    assert metrics["accuracy"] >= float_accuracy - 0.01
    assert metrics["top1_agreement"] >= 0.98
    assert metrics["cosine"] > 0.999 and metrics["sqnr_db"] > 20
    artifact = manifest.artifact("tflite")
    assert artifact.inputs[0].dtype == "int8" and artifact.inputs[0].scale > 0
    assert manifest.calibration["samples"] == 300 and len(manifest.calibration["data_sha256"]) == 64
    assert manifest.inputs[0].preprocessing.scale == pytest.approx(1 / 255)


def test_op_that_cannot_be_int8_is_named_with_its_layer_under_full_integer(sin_saved_model, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "package", sin_saved_model, "--calibration", CALIBRATION, "-o", out,
                           "--allow-accuracy-drop", "--full-integer")
    assert code == 1
    assert "TFLite cannot run these ops in INT8: SIN (layer wave" in err
    assert "leave out --full-integer" in err
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_ops_with_no_int8_kernel_stay_float_by_default_and_are_recorded(sin_saved_model, tmp_path, capsys):
    # the plain build (--no-auto-fix): on this random model the search may keep the softmax float too
    code, out, err = run_cli(capsys, "package", sin_saved_model, "--calibration", CALIBRATION, "-o", tmp_path,
                             "--allow-accuracy-drop", "--no-auto-fix")
    assert code == 0, err
    manifest = json.loads((tmp_path / "sin_model.edgekit" / "manifest.json").read_text())
    artifact = manifest["artifacts"][0]
    assert artifact["precision"] == "int8+float (1 layer)"
    assert {op["op"] for op in artifact["float_ops"]} == {"SIN"}
    assert "keeps these ops in float: SIN" in out


# the route matrix's h5 and saved_model rows (tests/routing/route_matrix.py)
@pytest.mark.parametrize("kind", ["h5", "saved_model"])
def test_h5_and_saved_model_sources_package_for_every_format_like_keras(kind, tmp_path, capsys):
    """A Keras model saved as .h5 or exported as a SavedModel: every format builds from it by its
    declared route and passes against the source, as the .keras file does."""
    source = tmp_path / ("digits.h5" if kind == "h5" else "digits_sm")
    save = f"model.save({str(source)!r})" if kind == "h5" else f"model.export({str(source)!r}, verbose=False)"
    run_tf(f"""
        import keras
        model = keras.models.load_model({str(DIGITS_MODEL)!r}, compile=False)
        {save}
    """)
    code, out, err = run_cli(capsys, "package", source, "--calibration", CALIBRATION, "--eval", EVAL, "--format",
                             "all", "--no-also-float", "-o", tmp_path / "out", "--name", "digits")
    assert code == 0, err
    package = tmp_path / "out" / "digits.edgekit"
    manifest = Manifest.from_json((package / "manifest.json").read_bytes())
    assert manifest.source["format"] == kind
    assert {a.format for a in manifest.artifacts} == {"tflite", "onnx", "coreml", "executorch"}
    validation = manifest.validation.to_dict()
    for fmt in ("tflite", "onnx", "coreml", "executorch"):
        metrics = validation["artifacts"][fmt]
        assert metrics["verdict"] == "passed" and metrics["measured"], (fmt, metrics)
        assert metrics["accuracy"] >= validation["float"]["accuracy"] - 0.01, (fmt, metrics)
        assert metrics["top1_agreement"] >= 0.98, (fmt, metrics)
        assert "route" not in (manifest.artifact(fmt).details or {}), fmt  # its declared route, no fallback
    if kind == "saved_model":  # no Keras layers to inspect: uint8 data still scaled to [0, 1]
        assert manifest.inputs[0].preprocessing.scale == pytest.approx(1 / 255)
    import edgekit

    x, y = (np.load(EVAL)[key][:64] for key in ("x", "y"))
    for fmt in ("tflite", "onnx", "executorch"):  # CoreML runs on macOS; its numbers came from the MIL evaluator
        with edgekit.load(package, artifact=fmt) as model:
            assert np.mean(model.predict(x).argmax(-1) == y) >= 0.9, fmt


def test_layer_names_are_recovered_from_tensor_names():
    assert layer_of("functional_1/wave_1/Sin", ["conv", "wave"]) == "wave"
    assert layer_of("model/block_2_1/Relu;model/x", ["block_2"]) == "block_2"
    assert layer_of("model/unknown_1/Sin", []) == "unknown_1"


def test_a_computed_divisor_stays_float_on_the_tf_converter_route(tmp_path, capsys):
    """TF's own int8 DIV refuses a divisor that rounds to its zero point (``div.cc:262 data[i] !=
    zero_point``): a share of a sum over samples that range over four decades. The TF route wrote
    that artifact and lost the format to the fallback route; now the DIV stays float there."""
    source = tmp_path / "share.keras"
    run_tf(f"""
        import keras, numpy as np
        keras.utils.set_random_seed(0)
        x = keras.Input((16,), name="x")
        h = keras.layers.Dense(8, activation="relu", name="body")(x)
        share = keras.ops.divide(h, keras.ops.sum(h, axis=1, keepdims=True) + 0.01)
        keras.Model(x, keras.layers.Dense(4, activation="softmax", name="cls")(share)).save({str(source)!r})
        rng = np.random.default_rng(0)
        data = np.abs(rng.normal(0, 1, (200, 16))) * np.exp(rng.uniform(np.log(0.01), np.log(100), (200, 1)))
        np.savez({str(tmp_path / "cal.npz")!r}, x=data.astype(np.float32))
    """)
    code, out, err = run_cli(capsys, "package", source, "-c", tmp_path / "cal.npz", "--format", "tflite",
                             "-o", tmp_path / "out", "--allow-accuracy-drop", "--no-auto-fix", "--no-also-float")
    assert code == 0, err
    assert "route keras -> tf-graph -> tflite failed" not in err and "div.cc" not in err
    manifest = json.loads((tmp_path / "out" / "share.edgekit" / "manifest.json").read_text())
    artifact = manifest["artifacts"][0]
    assert "DIV" in {op["op"] for op in artifact["float_ops"]}
    assert "tf2onnx" not in json.dumps(manifest.get("converter", {}))
