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


def _byte_statistics_model(path) -> None:
    """A file-type classifier's front end: int32 bytes (0 pads), their mean and mean square divided
    by the text's length, a computed divisor from 1 to 1023."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    node = helper.make_node
    nodes = [node("Cast", ["bytes"], ["bf"], to=TensorProto.FLOAT), node("Greater", ["bf", "zero"], ["nonpad"]),
             node("Cast", ["nonpad"], ["nf"], to=TensorProto.FLOAT),
             node("ReduceSum", ["nf", "axis1"], ["count"], keepdims=1, name="length"),
             node("Div", ["bf", "scale"], ["bn"], name="norm_bytes"),
             node("ReduceSum", ["bn", "axis1"], ["total"], keepdims=1, name="total"),
             node("Mul", ["bn", "bn"], ["sq"], name="square"),
             node("ReduceSum", ["sq", "axis1"], ["sqsum"], keepdims=1, name="sqsum"),
             node("Div", ["total", "count"], ["mean"], name="mean_byte"),
             node("Div", ["sqsum", "count"], ["meansq"], name="mean_square"),
             node("Concat", ["mean", "meansq"], ["feats"], axis=1, name="features"),
             node("MatMul", ["feats", "W"], ["logits"], name="head"), node("Softmax", ["logits"], ["label"], name="probs")]
    graph = helper.make_graph(
        nodes, "filetype", [helper.make_tensor_value_info("bytes", TensorProto.INT32, ["N", 1024])],
        [helper.make_tensor_value_info("label", TensorProto.FLOAT, ["N", 5])],
        [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.array([1], np.int64), "axis1"),
         numpy_helper.from_array(np.float32(255.0), "scale"),
         numpy_helper.from_array(rng.normal(0, 1.0, (2, 5)).astype(np.float32), "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_a_div_by_a_computed_value_stays_float_so_litert_runs_what_the_quantizer_wrote(tmp_path):
    """LiteRT's int8 DIV refuses a divisor that rounds to its zero point (div.cc:262 data[i] !=
    zero_point): a text's byte statistics divided by its length, quantized on 0..1023, made a
    TFLite its own runtime refused on a one-byte text. Such a DIV stays float in every LiteRT
    Quantizer build (here a plan's), named in the artifact's float ops."""
    _byte_statistics_model(tmp_path / "filetype.onnx")
    rng = np.random.default_rng(1)
    lengths = np.concatenate([rng.integers(1, 1024, 230), np.ones(20, int)])
    x = np.zeros((250, 1024), np.int32)
    for i, length in enumerate(lengths):
        x[i, :length] = rng.integers(1, 256, length)
    np.save(tmp_path / "bytes.npy", x)
    result = edgekit_cli("package", tmp_path / "filetype.onnx", "-c", tmp_path / "bytes.npy", "-o", tmp_path / "out",
                         "--format", "tflite", "--keep-float", "probs", "--no-auto-fix", "--no-also-float",
                         "--allow-accuracy-drop")
    assert result.returncode == 0, result.stderr[-3000:]
    artifact = tmp_path / "out" / "filetype.edgekit" / "tflite" / "model.int8.tflite"
    divisions = [(tensor, dtype) for op, tensor, dtype in op_precisions(artifact) if op == "DIV"]
    assert len(divisions) == 2 and all(dtype == "float32" for _, dtype in divisions), divisions
    import edgekit

    with edgekit.load(tmp_path / "out" / "filetype.edgekit", artifact="tflite") as model:  # a one-byte text runs
        assert model.predict_all(x[lengths == 1][:3])["label"].shape == (3, 5)
