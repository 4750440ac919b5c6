"""Per-layer precision on every TFLite route (LiteRT Quantizer on the float conversion): a layer
asked to stay float or to take 16-bit activations is so in the ``.tflite`` itself, read op by op;
and a PyTorch BatchNorm after a ReLU, which litert-torch's PT2E left in float, is int8."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edgekit.conversion.layer_names import in_layer
from edgekit.formats.tflite.from_torch import torch_layer
from edgekit.formats.tflite.backend import open_interpreter
from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, ROOT, edgekit_cli

pytestmark = pytest.mark.slow

CONVERTING = {"QUANTIZE", "DEQUANTIZE", "DELEGATE"}
TORCH_DIGITS = ROOT / "models" / "digits_torch"


def op_precisions(path) -> list[tuple[str, str, str]]:
    """(op, output tensor name, the dtype it computes in) for every compute op of the file."""
    interpreter = open_interpreter(str(path), with_delegates=False)
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    found = []
    for op in interpreter._get_ops_details():
        if op["op_name"] in CONVERTING:
            continue
        data = int(op["inputs"][0])  # the activation an op reads (weights and biases come after it)
        found.append((op["op_name"], details[int(op["outputs"][0])]["name"], np.dtype(details[data]["dtype"]).name))
    return found


def test_a_keras_layer_asked_float_or_int16_is_so_in_the_tflite(tmp_path):
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "--eval", EVAL, "-o", tmp_path,
                         "--int16-activations", "block2_pw_conv", "--keep-float", "block3_pw_conv", "--no-also-float")
    assert result.returncode == 0, result.stderr
    package = tmp_path / "digits.edgekit"
    ops = op_precisions(package / "tflite" / "model.int8.tflite")
    wide = [dtype for _, tensor, dtype in ops if in_layer(tensor, "block2_pw_conv")]
    floating = [dtype for _, tensor, dtype in ops if in_layer(tensor, "block3_pw_conv")]
    rest = [dtype for _, tensor, dtype in ops if not in_layer(tensor, "block2_pw_conv")
            and not in_layer(tensor, "block3_pw_conv")]
    assert wide == ["int16"] and floating == ["float32"]
    assert set(rest) == {"int8"}
    artifact = json.loads((package / "manifest.json").read_text())["artifacts"][0]
    assert artifact["precision"] == "int8+int16+float (2 layers)"
    assert artifact["details"]["int16_layers"] == ["block2_pw_conv"]
    assert artifact["details"]["precision"]["ops"]["int16"] == 1
    assert "LiteRT Quantizer" in artifact["converter"]["tool"]


def test_an_unknown_layer_is_refused_by_name(tmp_path):
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "-o", tmp_path, "--int16-activations", "nope")
    assert result.returncode == 2 and "--int16-activations: the model has no layer 'nope'" in result.stderr


def test_a_pytorch_module_asked_float_or_int16_is_so_in_the_tflite(tmp_path):
    """The litert-torch route had no per-layer control: --keep-float was refused before loading."""
    result = edgekit_cli("package", f"{TORCH_DIGITS / 'model.py'}:factory", "--name", "digits_torch",
                         "-c", TORCH_DIGITS / "data" / "calibration.npz", "--eval", TORCH_DIGITS / "data" / "eval.npz",
                         "-o", tmp_path, "--format", "tflite", "--keep-float", "head", "--int16-activations", "down",
                         "--no-also-float")
    assert result.returncode == 0, result.stderr
    ops = op_precisions(tmp_path / "digits_torch.edgekit" / "tflite" / "model.int8.tflite")
    by_layer: dict[str, set[str]] = {}
    for _, tensor, dtype in ops:
        by_layer.setdefault(torch_layer(tensor).split(" (")[0], set()).add(dtype)
    assert by_layer["head"] == {"float32"}
    assert {k: v for k, v in by_layer.items() if k.startswith("down.")} and all(
        v == {"int16"} for k, v in by_layer.items() if k.startswith("down."))
    assert all(v <= {"int8"} for k, v in by_layer.items() if k.startswith(("stem.", "block.")))


@pytest.fixture(scope="module")
def audio_bn(tmp_path_factory):
    out = tmp_path_factory.mktemp("verdict")
    subprocess.run([sys.executable, str(ROOT / "models" / "verdict" / "build.py"), "audio_bn", "--output", str(out)],
                   check=True, capture_output=True, cwd=ROOT, timeout=900)
    return out / "audio_bn"


def test_batchnorm_after_relu_from_pytorch_is_int8_with_default_flags(audio_bn, tmp_path):
    """litert-torch's PT2E left BatchNorm-after-ReLU (a per-channel MUL and ADD) in float and the
    TFLite artifact was refused; LiteRT Quantizer on the float conversion quantizes every op."""
    result = edgekit_cli("package", audio_bn / "audio_bn.pt2", "-c", audio_bn / "calibration.npz",
                         "--eval", audio_bn / "eval.npz", "-o", tmp_path, "--format", "tflite", "--no-also-float")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "audio_bn.edgekit" / "manifest.json").read_text())
    artifact = manifest["artifacts"][0]
    assert artifact["precision"] == "int8" and artifact["float_ops"] == []
    assert "PT2E quantizer left ops in float" in artifact["converter"]["why"]
    assert {dtype for _, _, dtype in op_precisions(tmp_path / "audio_bn.edgekit" / "tflite" / "model.int8.tflite")} \
        == {"int8"}
    assert manifest["validation"]["artifacts"]["tflite"]["top1_agreement"] >= 0.99


def test_explain_on_the_litert_torch_route_names_pytorch_modules(tmp_path):
    """--explain was refused on the litert-torch route; LiteRT Quantizer's tensor-by-tensor
    validation gives the per-layer SQNR, named by module path as --keep-float takes it."""
    result = edgekit_cli("package", f"{TORCH_DIGITS / 'model.py'}:factory", "--name", "digits_torch",
                         "-c", TORCH_DIGITS / "data" / "calibration.npz", "--eval", TORCH_DIGITS / "data" / "eval.npz",
                         "-o", tmp_path, "--format", "tflite", "--explain", "--no-also-float")
    assert result.returncode == 0, result.stderr
    artifact = json.loads((tmp_path / "digits_torch.edgekit" / "manifest.json").read_text())["artifacts"][0]
    rows = artifact["details"]["explain"]
    assert rows and all(row["sqnr_db"] is None or np.isfinite(row["sqnr_db"]) for row in rows)
    layers = {row["layer"].split(" (")[0] for row in rows}
    assert {"stem.0", "head"} & layers or any(layer.startswith(("stem", "block", "down")) for layer in layers), layers
    assert artifact["precision"] == "int8" or artifact["precision"].startswith("int8+float tail")
