"""The ONNX target on real models: QDQ INT8 accuracy, .ort output, ONNX sources, options."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import edgekit
from edgekit.fsutil import sha256_file
from edgekit.manifest import Manifest
from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, edgekit_cli, load_npz, run_cli

pytestmark = pytest.mark.slow


def test_digits_onnx_accuracy_within_one_point_and_agreement_at_least_98_percent(digits_all_package):
    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    metrics = manifest.validation.to_dict()["artifacts"]["onnx"]
    assert metrics["measured"] is True
    assert metrics["accuracy"] >= manifest.validation.to_dict()["float"]["accuracy"] - 0.01
    assert metrics["top1_agreement"] >= 0.98
    converter = manifest.artifact("onnx").converter
    assert converter["opset"] >= 17 and converter["per_channel"] is True and converter["activation_type"] == "s8"


def test_the_optimized_graph_count_says_what_onnx_runtime_runs_in_int8(digits_all_package):
    """After ONNX Runtime's own graph optimization on this CPU: int8 kernels and float compute
    nodes, counted and recorded (the float fallback of the same model counts all float)."""
    from edgekit.formats.onnx.fused import runtime_graph

    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    graph = manifest.artifact("onnx").details["runtime_graph"]
    assert graph["runtime"].startswith("onnxruntime ") and graph["cpu"].startswith(("x86_64", "aarch64", "arm64"))
    assert graph["int8_ops"] >= 8 and graph["int8_fraction"] >= 0.8  # the digits CNN's convolutions fuse
    assert set(graph) >= {"float_ops", "float_op_types", "quantize_dequantize_ops"}
    float_graph = runtime_graph(str(digits_all_package / manifest.artifact("onnx-float32").path))
    assert float_graph["int8_ops"] == 0 and float_graph["float_ops"] >= 8 and float_graph["int8_fraction"] == 0.0
    assert float_graph["float_op_types"].get("Conv", 0) + float_graph["float_op_types"].get("FusedConv", 0) >= 5


def test_onnx_model_is_qdq_with_per_channel_int8_weights(digits_all_package):
    model = onnx.load(str(digits_all_package / "onnx" / "model.int8.onnx"))
    ops = [node.op_type for node in model.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    conv_weights = [node.input[1] for node in model.graph.node if node.op_type == "Conv"]
    producers = {out: node for node in model.graph.node for out in node.output}
    per_channel = 0
    for weight in conv_weights:
        dequantize = producers[weight]
        assert dequantize.op_type == "DequantizeLinear"
        assert initializers[dequantize.input[0]].dtype == np.int8
        scale = initializers[dequantize.input[1]]
        zero_point = initializers[dequantize.input[2]]
        assert not zero_point.any(), "weights must be symmetric"
        per_channel += scale.size > 1
    assert conv_weights and per_channel == len(conv_weights)


def test_ort_format_model_and_operator_config_are_recorded_and_run(digits_all_package):
    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    artifact = manifest.artifact("onnx")
    companions = {c["path"]: c for c in artifact.companions}
    assert set(companions) == {"onnx/model.int8.ort", "onnx/required_operators.config"}
    for path, entry in companions.items():
        assert sha256_file(digits_all_package / path) == entry["sha256"]
    config = (digits_all_package / "onnx" / "required_operators.config").read_text()
    assert "ai.onnx;" in config and "/tmp" not in config
    x, _ = load_npz(EVAL)
    session = ort.InferenceSession(str(digits_all_package / "onnx" / "model.int8.ort"), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x[:4].astype(np.float32) / 255})
    assert out.shape == (4, 10)
    usability = artifact.details["mobile_usability"]
    for ep in ("nnapi", "coreml_neuralnetwork", "coreml_mlprogram"):
        assert usability[ep]["fixed_shapes"]["nodes"] > 0
        assert usability[ep]["as_is"]["suitability"] in ("YES", "MAYBE", "NO")


def test_runtime_runs_the_onnx_artifact_with_onnxruntime(digits_all_package):
    x, y = load_npz(EVAL)
    with edgekit.load(digits_all_package, artifact="onnx") as model:
        assert model.artifact.target == "onnx"
        assert type(model.backend).__name__ == "OnnxRuntimeBackend"
        probabilities = model.predict(x)
    assert np.mean(probabilities.argmax(axis=1) == y) >= 0.97


def test_spin_false_lets_onnxruntime_threads_sleep_with_the_same_answers(digits_all_package):
    """What the server loads: worker threads that do not spin between runs, same outputs."""
    x, _ = load_npz(EVAL)
    with edgekit.load(digits_all_package, artifact="onnx") as spinning, \
            edgekit.load(digits_all_package, artifact="onnx", spin=False) as sleeping:
        options = sleeping.backend._session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert sleeping.backend.describe()["spin"] is False and spinning.backend.describe()["spin"] is True
        assert np.array_equal(spinning.predict(x[:16]), sleeping.predict(x[:16]))


@pytest.fixture(scope="module")
def digits_onnx(digits_all_package, tmp_path_factory):
    """A float ONNX export of digits (what a user would bring as an ONNX source)."""
    from tests.conftest import DIGITS_MODEL, run_tf

    out = tmp_path_factory.mktemp("onnx_source")
    saved = out / "saved"
    run_tf(f"import keras; keras.models.load_model({str(DIGITS_MODEL)!r}).export({str(saved)!r}, verbose=False)")
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved), "--opset", "17",
                    "--output", str(out / "digits.onnx")], check=True, capture_output=True)
    return out / "digits.onnx"


def test_onnx_preparation_and_the_ort_tool_run_without_importing_pytorch(digits_onnx, tmp_path):
    """ONNX Runtime's tools package imports PyTorch in its ``__init__`` (4 s) for nothing edgekit
    calls: quant_pre_process's shape inference, the usability checker and the ``.ort`` tool run,
    in one process as in a packaging run's converter child, with PyTorch never loaded."""
    from tests.conftest import run_python

    said = run_python(f"""
        import sys
        from pathlib import Path
        from edgekit.conversion.worker import ModuleRequest, module_main
        from edgekit.conversion.messages import PathRequest
        from edgekit.formats.onnx.convert import _pre_process, mobile_usability
        print(_pre_process({str(digits_onnx)!r}, {str(tmp_path / "prepared.onnx")!r}))
        print(mobile_usability(PathRequest({str(tmp_path / "prepared.onnx")!r})).record["tool"])
        ran = module_main(ModuleRequest("onnxruntime.tools.convert_onnx_models_to_ort",
                          ({str(tmp_path / "prepared.onnx")!r}, "--output_dir", {str(tmp_path / "ort")!r},
                           "--optimization_style", "Fixed")))
        print(ran.returncode, len(list(Path({str(tmp_path / "ort")!r}).glob("*.ort"))), "torch" in sys.modules)
    """)
    assert said.split("\n")[:3] == ["symbolic", "onnxruntime.tools.mobile_helpers.usability_checker",
                                    "0 1 False"], said


def test_onnx_source_is_quantized_directly(digits_onnx, tmp_path, capsys):
    code, out, err = run_cli(capsys, "package", digits_onnx, "--target", "onnx", "--calibration", CALIBRATION,
                             "--eval", EVAL, "-o", tmp_path, "--calibration-method", "percentile")
    assert code == 0, err
    manifest = json.loads((tmp_path / "digits.edgekit" / "manifest.json").read_text())
    assert manifest["source"]["format"] == "onnx"
    assert manifest["artifacts"][0]["converter"]["calibration_method"] == "percentile"
    metrics = manifest["validation"]["artifacts"]["onnx"]
    assert metrics["accuracy"] >= manifest["validation"]["float"]["accuracy"] - 0.01


@pytest.mark.slow
def test_an_onnx_source_packages_for_tflite_and_coreml(digits_onnx, tmp_path, capsys):
    """tf2onnx's graph of the Keras digits model (NHWC input, MatMul + Add, Transposes) reaches
    TFLite and CoreML through edgekit's ONNX -> PyTorch module, validated against ONNX Runtime
    on the source, with the float conversion measured apart from quantization."""
    code, out, err = run_cli(capsys, "package", digits_onnx, "--target", "tflite", "--target", "coreml",
                             "--calibration", CALIBRATION, "--eval", EVAL, "-o", tmp_path, "--allow-float-ops",
                             "--no-also-float")
    assert code == 0, err
    manifest = json.loads((tmp_path / "digits.edgekit" / "manifest.json").read_text())
    assert [a["target"] for a in manifest["artifacts"]] == ["tflite", "coreml"]
    float_accuracy = manifest["validation"]["float"]["accuracy"]
    for target in ("tflite", "coreml"):
        metrics = manifest["validation"]["artifacts"][target]
        assert metrics["passed"] and metrics["accuracy"] >= float_accuracy - 0.01, (target, metrics)
        assert metrics["float_conversion"]["sqnr_db"] > 40, metrics["float_conversion"]
    converter = manifest["artifacts"][0]["converter"]["tool"]
    assert converter.startswith("edgekit ONNX -> PyTorch module") and "litert_torch" in converter
    assert "float conversion vs the source, before quantization" in out
    with np.load(EVAL) as stored:
        images = stored["x"][:32]
    session = ort.InferenceSession(str(digits_onnx), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: images.astype(np.float32) / 255})[0]
    predicted = edgekit.load(tmp_path / "digits.edgekit", artifact="tflite").predict(images)
    assert np.mean(predicted.argmax(axis=1) == expected.argmax(axis=1)) >= 0.95


def test_a_layer_asked_for_16_bit_activations_reads_int16_in_the_onnx(tmp_path):
    """--int16-activations on ONNX: the layer's activations are quantized to int16 (Q/DQ with an
    int16 zero point, opset 21), every other layer stays int8; read from the .onnx itself."""
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "--eval", EVAL, "-o", tmp_path,
                         "--format", "onnx", "--int16-activations", "block2_dw", "--no-also-float", "--profile", "rpi5")
    assert result.returncode == 0, result.stderr
    package = tmp_path / "digits.edgekit"
    model = onnx.load(str(package / "onnx" / "model.int8.onnx"))
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    dequantized = {n.output[0]: initializers[n.input[2]].dtype.name for n in model.graph.node
                   if n.op_type == "DequantizeLinear" and len(n.input) > 2 and n.input[2] in initializers}
    activations = {n.name: dequantized.get(n.input[0]) for n in model.graph.node if n.op_type == "Conv"}
    wide = {name for name, dtype in activations.items() if dtype == "int16"}
    assert wide and all("block2_dw" in name for name in wide), activations
    assert {dtype for name, dtype in activations.items() if name not in wide} == {"int8"}
    artifact = json.loads((package / "manifest.json").read_text())["artifacts"][0]
    assert artifact["precision"] == "int8+int16 (1 layer)" and artifact["details"]["int16_layers"] == ["block2_dw"]


def test_a_mask_comparison_reads_the_exact_input_not_its_quantized_copy(tmp_path):
    """Keras ``Masking(-1)`` exported to ONNX compares the input with -1 (Equal, Not). The quantizer fed
    that Equal the dequantized input, where -1 lands a rounding step away, so every padded step counted
    as data (a masked bidirectional GRU kept 88% of float's decisions). A comparison has no int8
    kernel: it reads the float input as given, and padded steps stay masked exactly."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    node = helper.make_node
    nodes = [node("Equal", ["steps", "sentinel"], ["padded"], name="masking"), node("Not", ["padded"], ["kept"]),
             node("Cast", ["kept"], ["weights"], to=TensorProto.FLOAT),
             node("Mul", ["steps", "weights"], ["masked"], name="masked"),
             node("MatMul", ["masked", "W"], ["features"], name="project"),
             node("ReduceSum", ["features", "axis1"], ["pooled"], keepdims=0, name="pool"),
             node("Softmax", ["pooled"], ["label"], name="probs")]
    graph = helper.make_graph(
        nodes, "masked", [helper.make_tensor_value_info("steps", TensorProto.FLOAT, ["N", 20, 6])],
        [helper.make_tensor_value_info("label", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.float32(-1.0), "sentinel"), numpy_helper.from_array(np.array([1], np.int64), "axis1"),
         numpy_helper.from_array(rng.normal(0, 1, (6, 4)).astype(np.float32), "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "masked.onnx"))
    x = rng.normal(0, 1, (200, 20, 6)).astype(np.float32)
    for i, length in enumerate(rng.integers(5, 21, 200)):
        x[i, length:] = -1.0
    np.save(tmp_path / "steps.npy", x)
    result = edgekit_cli("package", tmp_path / "masked.onnx", "-c", tmp_path / "steps.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--no-auto-fix", "--no-also-float", "--allow-accuracy-drop")
    assert result.returncode == 0, result.stderr[-3000:]
    artifact = onnx.load(str(tmp_path / "out" / "masked.edgekit" / "onnx" / "model.int8.onnx"))
    (masking,) = [n for n in artifact.graph.node if n.op_type == "Equal"]
    assert masking.input[0] == "steps", list(masking.input)
