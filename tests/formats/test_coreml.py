"""The CoreML target on Linux: ML program with int8 weights, checked structurally; numerics unmeasured."""

from __future__ import annotations

import json

import pytest

import edgekit
from edgekit.errors import BackendUnavailableError
from edgekit.manifest import Manifest

pytestmark = pytest.mark.slow


def _spec(path):
    """The saved ML program's spec, read back by coremltools itself in this process (the test
    workers import coremltools already: tests/formats/test_coreml_eval.py)."""
    from edgekit.formats.coreml.tools import coremltools  # without probing sklearn and ExecuTorch

    return coremltools().models.MLModel(str(path), skip_model_load=True).get_spec()


def test_coreml_package_structure(digits_all_package):
    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    artifact = manifest.artifact("coreml")
    assert artifact.path == "coreml/model.int8.mlpackage"
    assert artifact.converter["minimum_deployment_target"] == "iOS17"
    assert "calibrated on Linux" in artifact.details["activations_reason"]
    structure = artifact.details["structure"]
    assert structure["weight_ops"] == structure["int8_weight_ops"] == 8  # 7 conv + 1 dense
    assert structure["input"] == {"name": "image", "shape": [1, 8, 8, 1]}


def test_float16_activations_option_keeps_weights_only_int8(tmp_path, capsys):
    from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, run_cli

    code, out, err = run_cli(capsys, "package", DIGITS_MODEL, "--target", "coreml", "--calibration", CALIBRATION,
                             "--eval", EVAL, "-o", tmp_path, "--coreml-activations", "float16")
    assert code == 0, err
    manifest = Manifest.from_json((tmp_path / "digits.edgekit" / "manifest.json").read_bytes())
    artifact = manifest.artifact("coreml")
    assert artifact.precision == "int8 weights" and artifact.details["activations"] == "float16"
    assert artifact.details["structure"]["int8_activation_quantize_ops"] == 0
    assert manifest.validation.to_dict()["artifacts"]["coreml"]["top1_agreement"] >= 0.98


def test_coreml_spec_read_back_independently(digits_all_package):
    """Re-read the saved .mlpackage with coremltools: inputs match the manifest, weights are int8."""
    path = digits_all_package / "coreml" / "model.int8.mlpackage"
    from coremltools.proto import MIL_pb2

    spec = _spec(path)
    fn = spec.mlProgram.functions["main"]
    ops = fn.block_specializations[fn.opset].operations
    dequant = [op for op in ops if op.type == "constexpr_affine_dequantize"]
    activations = [op for op in ops if op.type == "quantize"]
    int8 = [op for op in dequant if op.attributes["quantized_data"].type.tensorType.dataType == MIL_pb2.INT8]
    float_weights = [op for op in ops if op.type == "const" and op.attributes["val"].type.tensorType.dimensions
                     and len(op.attributes["val"].type.tensorType.dimensions) >= 2]
    inp = spec.description.input[0]
    report = {"input": inp.name, "shape": list(inp.type.multiArrayType.shape), "dequant": len(dequant),
              "int8": len(int8), "float_weights": len(float_weights), "activation_quantize": len(activations)}
    manifest = json.loads((digits_all_package / "manifest.json").read_text())
    assert report["input"] == manifest["inputs"][0]["name"]
    assert report["shape"][1:] == manifest["inputs"][0]["shape"][1:]
    assert report["dequant"] == report["int8"] == 8
    assert report["float_weights"] == 0
    assert report["activation_quantize"] >= 8  # W8A8


def test_loading_the_coreml_artifact_on_linux_is_a_clear_error(digits_all_package):
    with pytest.raises(BackendUnavailableError, match="coreml needs coreml"):
        edgekit.load(digits_all_package, artifact="coreml")
    with edgekit.load(digits_all_package) as model:  # auto: first artifact this device can run
        assert model.artifact.target == "tflite"


def test_a_keep_float_layer_is_float_in_the_coreml_program(tmp_path, capsys):
    """Read from the saved ML program: the kept layer's conv takes float16 weights (a const, no
    int8 dequantize) and its result is not quantized (it reads the int8 result before it,
    dequantized, as a float op does in TFLite); every other conv stays W8A8."""
    from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, run_cli

    code, _, err = run_cli(capsys, "package", DIGITS_MODEL, "--format", "coreml", "--calibration", CALIBRATION,
                           "--eval", EVAL, "-o", tmp_path, "--keep-float", "block2_pw_conv", "--no-also-float")
    assert code == 0, err
    manifest = Manifest.from_json((tmp_path / "digits.edgekit" / "manifest.json").read_bytes())
    artifact = manifest.artifact("coreml")
    kept = artifact.details["float_layer_ops"]["block2_pw_conv"]
    assert artifact.precision == "int8+float (1 layer)"
    path = tmp_path / "digits.edgekit" / "coreml" / "model.int8.mlpackage"
    spec = _spec(path)
    fn = spec.mlProgram.functions["main"]
    ops = fn.block_specializations[fn.opset].operations
    produced = {out.name: op for op in ops for out in op.outputs}
    readers: dict[str, list[str]] = {}
    for op in ops:
        for argument in op.inputs.values():
            for value in argument.arguments:
                readers.setdefault(value.name, []).append(op.type)
    convs = {}
    for op in ops:
        if op.type != "conv":
            continue
        weight = produced[op.inputs["weight"].arguments[0].name].type
        x = produced.get(op.inputs["x"].arguments[0].name)
        convs[op.outputs[0].name] = {"weight": weight, "x": x.type if x is not None else "input",
                                     "read_by": readers.get(op.outputs[0].name, [])}
    kept_convs = [name for name in convs if name in kept]
    assert len(kept_convs) == 1, (kept, list(convs))
    assert convs[kept_convs[0]]["weight"] == "const"  # float16 weights
    assert "quantize" not in convs[kept_convs[0]]["read_by"]  # its activations stay float
    others = [c for name, c in convs.items() if name not in kept]
    assert others and all(c["weight"] == "constexpr_affine_dequantize" for c in others)
    assert all(c["x"] == "dequantize" for c in others[1:])  # W8A8 (the first conv reads the input)
    assert sum(c["x"] == "dequantize" for c in others) >= len(others) - 1  # W8A8 (the first reads the input)
