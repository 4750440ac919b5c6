"""Quantized sources (``models/quantized/build.py``): a PyTorch CNN trained with QAT and exported
as QDQ ONNX, and an ONNX Runtime ``quantize_static`` graph with one layer left float. The ONNX
artifact is the source's graph with its learned scales and zero points, the TFLite artifact
carries them into LiteRT's quantization (both read back from the files), none is quantized a
second time; the manifest records the scheme; the routes that cannot carry the ranges yet refuse
it, naming the route and the formats that take it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, assert_user_error, built_once, edgekit_cli

pytestmark = pytest.mark.slow


def _source(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    def build(folder: Path) -> Path:
        subprocess.run([sys.executable, str(ROOT / "models/quantized/build.py"), name, "--output", str(folder)],
                       check=True, capture_output=True)
        return folder / name

    return built_once(tmp_path_factory, f"quantized-{name}", build)


@pytest.fixture(scope="module")
def qat_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _source(tmp_path_factory, "qat_torch")


@pytest.fixture(scope="module")
def fake_quant_keras(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _source(tmp_path_factory, "fake_quant_keras")


@pytest.fixture(scope="module")
def ort_excluded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _source(tmp_path_factory, "ort_excluded")


def _ranges(path: Path) -> dict[tuple[str, str], tuple[list[float], list[int]]]:
    """Every QuantizeLinear / DequantizeLinear's (data input, op) -> (scale, zero point), as stored."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:  # shared through Identity in PyTorch's export
        if node.op_type == "Identity" and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]]
    return {(node.input[0], node.op_type): (values[node.input[1]].reshape(-1).tolist(),
                                            values[node.input[2]].reshape(-1).tolist())
            for node in model.graph.node if node.op_type in ("QuantizeLinear", "DequantizeLinear")
            and node.input[2] in values}


def _package(source: Path, out: Path, *formats: str, extra: tuple[str, ...] = ()) -> tuple[object, dict]:
    flags = [f for fmt in formats for f in ("--format", fmt)]
    model = source / "model.onnx" if (source / "model.onnx").exists() else source / "saved_model"
    result = edgekit_cli("package", model, "-c", source / "calibration.npz", "--eval",
                         source / "eval.npz", *flags, *extra, "-o", out)
    manifest = json.loads((out / f"{model.stem}.edgekit" / "manifest.json").read_text())
    return result, manifest


def test_a_qat_export_ships_with_its_learned_ranges_and_is_never_quantized_twice(qat_torch, tmp_path):
    import onnxruntime as ort

    result, manifest = _package(qat_torch, tmp_path, "all")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the source is already quantized (QDQ, weights int8 per-channel symmetric (3)" in result.stdout
    scheme = manifest["source"]["quantized"]
    assert scheme["format"] == "QDQ" and scheme["weights"]["per_channel"] and scheme["weights"]["signed"]
    assert scheme["activations"]["tensors"] == 4 and scheme["weights"]["bits"] == [8]
    # no float model to fall back to, no scheme variant
    assert sorted(a["format"] for a in manifest["artifacts"]) == ["coreml", "executorch", "onnx", "tflite"]
    for fmt in ("coreml", "executorch"):  # the four activation pairs, as given
        found = next(a for a in manifest["artifacts"] if a["format"] == fmt)["details"]["learned_ranges"]
        assert len(found["carried"]) == 4 and not found["not_found"], (fmt, found)
    artifact = next(a for a in manifest["artifacts"] if a["format"] == "onnx")
    assert not artifact.get("variant")
    assert artifact["converter"]["tool"].startswith("the source's quantized graph, kept as given")
    path = tmp_path / "model.edgekit" / artifact["path"]
    source, shipped = _ranges(qat_torch / "model.onnx"), _ranges(path)
    assert source and all(shipped[key] == value for key, value in source.items())  # the learned ranges, read back
    count = lambda p, op: sum(n.op_type == op for n in __import__("onnx").load(str(p)).graph.node)  # noqa: E731
    assert count(path, "QuantizeLinear") == count(qat_torch / "model.onnx", "QuantizeLinear")  # never twice
    assert artifact["details"]["quantized_source"]["ops"] == {"DequantizeLinear": 7, "QuantizeLinear": 7}
    assert artifact["details"]["quantized_biases"] == ["/conv1/Conv", "/conv2/Conv"]  # int32 at the learned scales
    assert artifact["precision"] == "int8+float (1 layer)"  # the float fc the export left (no Q after pool)
    assert [op["layer"] for op in artifact["float_ops"]] == ["fc"]
    assert all(v["verdict"] == "passed" for v in manifest["validation"]["artifacts"].values())
    with np.load(qat_torch / "eval.npz") as data:
        x = data["image"][:8]
    expected = ort.InferenceSession(str(qat_torch / "model.onnx")).run(None, {"image": x})[0]
    got = ort.InferenceSession(str(path)).run(None, {"image": x})[0]
    assert np.array_equal(expected.argmax(1), got.argmax(1))


def test_the_tflite_artifact_carries_the_learned_ranges_and_says_which_weights_it_quantized_again(qat_torch, tmp_path):
    """LiteRT's activation scales and zero points are the QAT ones (input, both ReLUs, the logits);
    a weight channel whose learned grid reaches -128 cannot stay on it in TFLite's symmetric
    [-127, 127] int8 weights: the artifact counts those channels, checked against the source."""
    import onnx
    from ai_edge_litert.interpreter import Interpreter
    from onnx import numpy_helper

    result, manifest = _package(qat_torch, tmp_path, "tflite")
    assert result.returncode == 0, result.stderr[-3000:]
    (artifact,) = manifest["artifacts"]
    learned = artifact["details"]["learned_ranges"]
    assert len(learned["carried"]) == 4 and not learned["not_found"]
    assert "the source's learned activation ranges carried: 4 of 4" in result.stdout
    interpreter = Interpreter(model_path=str(tmp_path / "model.edgekit" / artifact["path"]))
    pairs = [(float(d["quantization_parameters"]["scales"][0]), int(d["quantization_parameters"]["zero_points"][0]))
             for d in interpreter.get_tensor_details() if len(d["quantization_parameters"]["scales"]) == 1]
    source = onnx.load(str(qat_torch / "model.onnx"))
    values = {i.name: numpy_helper.to_array(i) for i in source.graph.initializer}
    for node in source.graph.node:
        if node.op_type == "Identity" and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]]
    activations = [n for n in source.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in values]
    assert len(activations) == 4
    for node in activations:  # read back from the .tflite: the learned scale and zero point
        scale, zero = float(values[node.input[1]].reshape(-1)[0]), int(values[node.input[2]].reshape(-1)[0])
        assert any(abs(s - scale) <= 1e-6 * scale and z == zero for s, z in pairs), (node.input[0], scale, zero, pairs)
    for node in source.graph.node:  # the channels whose learned grid reaches -128, counted from the source
        if node.op_type == "QuantizeLinear" and node.input[0] in values and values[node.input[0]].ndim == 4:
            weight, scale = values[node.input[0]], values[node.input[1]].reshape(-1, 1, 1, 1)
            reaching = int(np.sum(np.clip(np.round(weight / scale), -128, 127).reshape(len(scale), -1).min(1) == -128))
            layer = "/" + node.input[0].split(".")[0] + "/Conv"
            assert learned["weights"][layer]["requantized"] == reaching, (layer, learned["weights"])
    assert artifact["converter"]["tool"].endswith("the source's learned ranges)")
    assert manifest["validation"]["artifacts"]["tflite"]["verdict"] == "passed"


def _coreml_pairs(package: Path) -> list[tuple[float, int]]:
    """Every Core ML quantize op's (scale, zero point as int8), read from the saved ML program."""
    from edgekit.formats.coreml.evaluator import load_program

    pairs = []
    for op in load_program(str(package)).functions["main"].operations:
        if op.op_type == "quantize":
            zero = op.inputs.get("zero_point")
            point = int(np.asarray(zero.val).reshape(-1)[0]) if zero is not None else 0
            pairs.append((float(np.asarray(op.inputs["scale"].val).reshape(-1)[0]),
                          point if str(op.inputs["output_dtype"].val) == "int8" else point - 128))
    return pairs


def test_a_mixed_onnx_runtime_graph_keeps_its_float_layer_and_its_ranges_in_every_format(ort_excluded, tmp_path):
    """ONNX Runtime's S8S8 graph with conv2 excluded: every format ships it with that layer float
    and labelled; CoreML's quantize ops and weights and ExecuTorch's program hold the source's
    own scales and zero points (read back), none calibrated again."""
    result, manifest = _package(ort_excluded, tmp_path / "all", "all")
    assert result.returncode == 0, result.stderr[-3000:]
    shipped = {a["format"]: a for a in manifest["artifacts"]}
    assert set(shipped) == {"onnx", "tflite", "coreml", "executorch"}
    assert all(a["precision"].startswith("int8+float") for a in shipped.values()), shipped
    artifact = shipped["onnx"]
    assert {op["layer"] for op in artifact["float_ops"]} >= {"conv2"}
    source, kept = _ranges(ort_excluded / "model.onnx"), _ranges(tmp_path / "all" / "model.edgekit" / artifact["path"])
    assert source and all(kept[key] == value for key, value in source.items())
    assert any("conv2" in op["layer"] for op in shipped["tflite"]["float_ops"])  # the excluded layer float there too
    activations = {(round(scale[0], 9), zero[0]) for (tensor, op), (scale, zero) in source.items()
                   if op == "QuantizeLinear" and len(scale) == 1}
    assert len(activations) >= 4  # distinct ranges (a pool and the flatten after it share one)
    pairs = _coreml_pairs(tmp_path / "all" / "model.edgekit" / shipped["coreml"]["path"])
    for scale, zero in activations:  # float16 scales: within their rounding
        assert any(abs(s - scale) <= 1e-3 * scale and z == zero for s, z in pairs), (scale, zero, pairs)
    coreml = shipped["coreml"]["details"]
    assert coreml["learned_ranges"]["float_layers"] == ["/conv2/Conv"]
    assert coreml["learned_ranges"]["weights"]["int8_constants"] == 2  # conv1 and fc: the learned int8 weights
    assert shipped["coreml"]["converter"]["tool"].endswith("(its learned ranges)")
    executorch = shipped["executorch"]["details"]
    assert len(executorch["learned_ranges"]["carried"]) == 6 and not executorch["learned_ranges"]["not_found"]
    assert executorch["placement"]["layers"] == {"/conv1/Conv": "int8", "/conv2/Conv": "float", "/fc/Gemm": "int8"}
    assert all(v["verdict"] == "passed" for v in manifest["validation"]["artifacts"].values())


def test_a_qoperator_graph_ships_as_onnx_and_the_other_formats_say_so(tmp_path):
    """A QOperator graph (QLinearConv) keeps its ranges only as ONNX: every other format is
    refused before converting, naming the route and --format onnx."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("quantized_models", ROOT / "models/quantized/build.py")
    assert spec is not None and spec.loader is not None
    models = importlib.util.module_from_spec(spec)  # by path: a package named ``build`` is installed too
    spec.loader.exec_module(models)

    x, y = models.images(300, 7)
    torch.onnx.export(models._net().eval(), torch.from_numpy(x[:1]), str(tmp_path / "float.onnx"),
                      input_names=["image"], output_names=["logits"], dynamo=False,
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    rows = iter([{"image": x[i:i + 1]} for i in range(50)])

    class Reader(CalibrationDataReader):
        def get_next(self):  # type: ignore[no-untyped-def]
            return next(rows, None)

    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qop.onnx"), Reader(),
                    quant_format=QuantFormat.QOperator)
    np.savez(tmp_path / "data.npz", image=x[100:], y=y[100:])
    for fmt in ("coreml", "executorch", "tflite"):
        refused = edgekit_cli("package", tmp_path / "qop.onnx", "-c", tmp_path / "data.npz", "--format", fmt,
                              "-o", tmp_path / fmt)
        assert_user_error(refused, f"-> {fmt} cannot keep a quantized model's learned ranges", "--format onnx")


def test_float_biases_become_int32_at_the_learned_scales():
    """PyTorch's QAT export leaves Conv biases float; ONNX Runtime fuses a Conv into an int8 kernel
    only with an int32 bias at scale s_input x s_weight (per channel), which decides nothing new."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgekit.formats.onnx.kept import quantize_float_biases

    w_scale, x_scale = np.array([0.02, 0.05], np.float32), np.float32(0.1)
    bias = np.array([0.3, -1.234], np.float32)
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
         helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
         helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
         helper.make_node("Conv", ["xd", "wd", "b"], ["y"], name="conv")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
        [numpy_helper.from_array(x_scale, "xs"), numpy_helper.from_array(np.int8(0), "xz"),
         numpy_helper.from_array(np.ones((2, 1, 1, 1), np.int8), "wq"), numpy_helper.from_array(w_scale, "ws"),
         numpy_helper.from_array(np.zeros(2, np.int8), "wz"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert quantize_float_biases(model) == ["conv"]
    onnx.checker.check_model(model)
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert values["b_quantized"].tolist() == [150, -247] and values["b_quantized"].dtype == np.int32
    assert np.allclose(values["b_quantized_scale"], x_scale * w_scale)
    assert [n.op_type for n in model.graph.node] == ["QuantizeLinear", "DequantizeLinear", "DequantizeLinear",
                                                    "DequantizeLinear", "Conv"]


def test_a_keras_fake_quant_model_keeps_its_ranges_in_tflite_and_onnx_and_the_others_refuse_it(fake_quant_keras,
                                                                                              tmp_path):
    """TensorFlow's converter lowers fake-quant ops with their ranges (read back from the .tflite);
    tf2onnx writes them as QDQ, whose folded kernels on their learned grid become int8 again; no
    float fallback (there is no float model); CoreML and ExecuTorch are refused by name."""
    from ai_edge_litert.interpreter import Interpreter

    result, manifest = _package(fake_quant_keras, tmp_path, "all", extra=("--allow-partial",))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the source is already quantized (fake-quant, 4 FakeQuantWithMinMaxVars, 2 " \
           "FakeQuantWithMinMaxVarsPerChannel, 8 bits)" in result.stdout
    scheme = manifest["source"]["quantized"]
    assert scheme["format"] == "fake-quant" and scheme["per_channel_tensors"] == 2 and scheme["bits"] == [8]
    assert sorted(a["format"] + "/" + a["precision"].split(" ")[0] for a in manifest["artifacts"]) == \
        ["onnx/int8+float", "tflite/int8"]
    tflite = next(a for a in manifest["artifacts"] if a["format"] == "tflite")
    interpreter = Interpreter(model_path=str(tmp_path / "saved_model.edgekit" / tflite["path"]))
    (image,) = interpreter.get_input_details()
    assert image["quantization"][1] == round(-128 + 3.0 / (7.0 / 255)) and \
        abs(image["quantization"][0] - 7.0 / 255) < 1e-7  # the learned [-3, 4] range, read back
    pairs = [(float(d["quantization"][0]), int(d["quantization"][1])) for d in interpreter.get_tensor_details()]
    onnx_artifact = next(a for a in manifest["artifacts"] if a["format"] == "onnx")
    # every trained range tf2onnx wrote as a QDQ pair (uint8 there) is a TFLite tensor's (int8 here):
    # two converters, one set of learned ranges
    written = {(scale[0], zero[0]) for (tensor, op), (scale, zero) in
               _ranges(tmp_path / "saved_model.edgekit" / onnx_artifact["path"]).items()
               if op == "QuantizeLinear" and len(scale) == 1}
    assert len(written) >= 4
    for scale, zero in written:
        assert any(abs(s - scale) <= 1e-6 * scale and z == zero - 128 for s, z in pairs), (scale, zero, pairs)
    assert len(onnx_artifact["details"]["weights_on_grid"]) == 2  # both folded kernels int8 again
    assert [op["layer"] for op in onnx_artifact["float_ops"] if not op.get("tail")] == ["dense_1"]
    failed = {f["target"]: f["error"] for f in manifest["failed"]}
    assert set(failed) == {"coreml", "executorch"}
    assert all("cannot keep a quantized model's learned ranges" in e and "--format tflite --format onnx" in e
               for e in failed.values())


@pytest.fixture(scope="module")
def pt2e_qat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _source(tmp_path_factory, "pt2e_qat")


def test_a_pt2e_qat_program_ships_its_learned_ranges_to_onnx_and_tflite_and_never_through_pt2e_again(
        pt2e_qat, tmp_path):
    """A ``torch.export`` program from ``convert_pt2e`` (QAT) loads with its quantize ops, is
    recorded as quantized, and reaches TFLite through its QDQ export (ranges carried), never
    through litert-torch's PT2E quantizer, which would choose its ranges again."""
    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - the program's quantize ops
    from ai_edge_litert.interpreter import Interpreter

    result = edgekit_cli("package", pt2e_qat / "model.pt2", "-c", pt2e_qat / "calibration.npz", "--eval",
                         pt2e_qat / "eval.npz", "--format", "all", "-o", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the source is already quantized (QDQ" in result.stdout
    assert "using torch_export -> onnx-to-torch -> torch-program -> tflite instead" in result.stdout
    manifest = json.loads((tmp_path / "model.edgekit" / "manifest.json").read_text())
    assert manifest["source"]["quantized"]["weights"]["per_channel"]
    program = torch.export.load(str(pt2e_qat / "model.pt2"))
    learned = {(round(float(n.args[1]), 9), int(n.args[2])) for n in program.graph.nodes
               if "quantize_per_tensor" in str(n.target) and "dequantize" not in str(n.target)}
    assert len(learned) >= 4
    tflite = next(a for a in manifest["artifacts"] if a["format"] == "tflite")
    carried = tflite["details"]["learned_ranges"]["carried"]
    assert {(round(c["scale"], 9), c["zero_point"]) for c in carried.values()} <= learned and len(carried) >= 4
    interpreter = Interpreter(model_path=str(tmp_path / "model.edgekit" / tflite["path"]))
    pairs = [(float(d["quantization_parameters"]["scales"][0]), int(d["quantization_parameters"]["zero_points"][0]))
             for d in interpreter.get_tensor_details() if len(d["quantization_parameters"]["scales"]) == 1]
    for entry in carried.values():  # read back from the .tflite
        assert any(abs(s - entry["scale"]) <= 1e-6 * entry["scale"] and z == entry["zero_point"] for s, z in pairs)
    assert {a["format"]: a["precision"] for a in manifest["artifacts"]} == \
        {"onnx": "int8", "tflite": "int8", "coreml": "int8", "executorch": "int8"}
    for fmt in ("coreml", "executorch"):  # the program's own pairs, every one found in the result
        found = next(a for a in manifest["artifacts"] if a["format"] == fmt)["details"]["learned_ranges"]
        assert {(round(c["scale"], 9), c["zero_point"]) for c in found["carried"].values()} == learned
        assert not found["not_found"], (fmt, found)
    coreml = next(a for a in manifest["artifacts"] if a["format"] == "coreml")
    for scale, zero in learned:  # read back from the ML program, float16 scales
        assert any(abs(s - scale) <= 1e-3 * scale and z == zero
                   for s, z in _coreml_pairs(tmp_path / "model.edgekit" / coreml["path"]))
    assert all(v["verdict"] == "passed" for v in manifest["validation"]["artifacts"].values())


def test_an_eager_qat_module_given_directly_keeps_its_frozen_ranges_including_a_reduced_range(tmp_path):
    """PyTorch's default x86 QAT config: fused observer-and-fake-quant modules (no ONNX export of
    their op) and uint8 activations on [0, 127] (a Clip between each QDQ pair). The observers are
    frozen, the ONNX artifact keeps the exported pairs, and TFLite carries the narrower range."""
    from ai_edge_litert.interpreter import Interpreter

    sys.path.insert(0, str(ROOT / "models/quantized"))
    try:
        import eager_qat
    finally:
        sys.path.remove(str(ROOT / "models/quantized"))
    eager_qat.data(tmp_path)
    result = edgekit_cli("package", f"{ROOT / 'models/quantized/eager_qat.py'}:model", "-c",
                         tmp_path / "calibration.npz", "--eval", tmp_path / "eval.npz", "--format", "all",
                         "--allow-partial", "--allow-accuracy-drop", "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "eager_qat.edgekit" / "manifest.json").read_text())
    assert manifest["source"]["quantized"]["format"] == "QDQ"
    onnx_artifact = next(a for a in manifest["artifacts"] if a["format"] == "onnx")
    assert manifest["validation"]["artifacts"]["onnx"]["verdict"] == "passed"
    assert onnx_artifact["details"]["quantized_source"]["ops"]["QuantizeLinear"] >= 4
    tflite = next(a for a in manifest["artifacts"] if a["format"] == "tflite")
    entry = tflite["details"]["learned_ranges"]["carried"]["x"]
    (given,) = Interpreter(model_path=str(tmp_path / "out" / "eager_qat.edgekit" / tflite["path"])).get_input_details()
    scale, zero = given["quantization"]
    # the learned [(0 - z) s, (127 - z) s], on TFLite's 255 int8 steps
    assert abs(scale - entry["scale"] * 127 / 255) <= 1e-5 * scale
    assert abs((-128 - zero) * scale + entry["zero_point"] * entry["scale"]) <= scale
    coreml = next(a for a in manifest["artifacts"] if a["format"] == "coreml")  # the pairs, clamped at 127 steps
    assert len(coreml["details"]["learned_ranges"]["carried"]) == 4
    assert manifest["validation"]["artifacts"]["coreml"]["verdict"] == "passed"
    (refused,) = [f for f in manifest["failed"] if f["target"] == "executorch"]
    assert "narrower than their integer type (reduce_range" in refused["error"]


def test_a_clip_between_a_qdq_pair_narrows_the_learned_range():
    """PyTorch exports ``reduce_range`` activations as QuantizeLinear -> Clip(0, 127) ->
    DequantizeLinear: the range read back is [(0 - z) s, (127 - z) s], and the float graph keeps
    no Clip."""
    from onnx import TensorProto, helper, numpy_helper

    from edgekit.conversion.quantized import strip_qdq

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q"]),
         helper.make_node("Constant", [], ["top"], value=numpy_helper.from_array(np.uint8(127))),
         helper.make_node("Clip", ["q", "", "top"], ["c"]),
         helper.make_node("DequantizeLinear", ["c", "s", "z"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.uint8(3), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ranges = strip_qdq(model)
    assert ranges["r"]["min"] == -1.5 and ranges["r"]["max"] == 62.0 and ranges["r"]["type"] == "uint7"
    assert [n.op_type for n in model.graph.node] == ["Relu", "Identity"]


def test_a_float_reference_judges_every_artifact_and_the_source_itself(ort_excluded, tmp_path):
    """--float-reference: the float model the graph was quantized from, run on the same samples;
    the source is measured against it (recorded), and each artifact is judged against it too."""
    result, manifest = _package(ort_excluded, tmp_path, "onnx",
                                extra=("--float-reference", str(ort_excluded / "float.onnx"), "--samples", "20"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "calibrating on" not in result.stderr  # a quantized source's data only validates: no range warning
    assert "the quantized source against its float reference float.onnx on 150 samples: logits SQNR" in result.stdout
    assert "onnx: against the float reference: logits SQNR" in result.stdout
    recorded = manifest["source"]["quantized"]["float_reference"]
    assert recorded["file"] == "float.onnx" and len(recorded["sha256"]) == 64
    assert recorded["source_against_it"]["sqnr_db"] > 20
    metrics = manifest["validation"]["artifacts"]["onnx"]
    assert metrics["against_float_reference"]["sqnr_db"] > 20 and metrics["against_float_reference"]["tasks"]


def test_an_artifact_far_from_the_float_reference_fails_its_gates_named_so(qat_torch, ort_excluded, tmp_path):
    """Another float model with the same input and output names stands in for the float model:
    the artifact matches its source, but not that model, and the gates say which reference failed."""
    with np.load(qat_torch / "eval.npz") as data:  # unlabelled: judged by agreement with each reference
        np.savez(tmp_path / "unlabelled.npz", image=data["image"])
    result = edgekit_cli("package", qat_torch / "model.onnx", "-c", qat_torch / "calibration.npz", "--eval",
                         tmp_path / "unlabelled.npz", "--format", "onnx", "--float-reference",
                         ort_excluded / "float.onnx", "--allow-accuracy-drop", "-o", tmp_path)
    assert "onnx: FAILED against the float reference" in result.stdout, result.stdout[-3000:]
    manifest = json.loads((tmp_path / "model.edgekit" / "manifest.json").read_text())
    gates = manifest["validation"]["artifacts"]["onnx"]["gates"]
    assert gates and all(g["cause"].startswith("float_reference_") for g in gates), gates
    assert gates[0]["what"].startswith(f"against the float reference ({ort_excluded / 'float.onnx'}):")
    assert manifest["validation"]["artifacts"]["onnx"]["passed"] is False


def _usage_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """An option that cannot apply: exit 2, one error line naming it and a fix, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert sum(line.startswith("error: ") for line in result.stderr.splitlines()) == 1, result.stderr
    assert "  fix: " in result.stderr and all(needle in result.stderr for needle in needles), result.stderr


def test_a_float_reference_is_refused_where_it_cannot_mean_anything(qat_torch, ort_excluded, tmp_path):
    float_model, data = ort_excluded / "float.onnx", ort_excluded / "calibration.npz"
    refused = edgekit_cli("package", float_model, "-c", data, "--format", "onnx", "--float-reference", float_model,
                          "-o", tmp_path / "a")
    _usage_error(refused, "the model being packaged is not quantized", "leave out --float-reference")
    refused = edgekit_cli("package", qat_torch / "model.onnx", "-c", data, "--format", "onnx", "--float-reference",
                          ort_excluded / "model.onnx", "-o", tmp_path / "b")
    _usage_error(refused, "is itself quantized", "give the float model")
    import onnx

    renamed = onnx.load(str(float_model))
    renamed.graph.output[0].name = "scores"
    for node in renamed.graph.node:
        node.output[:] = ["scores" if o == "logits" else o for o in node.output]
    onnx.save(renamed, str(tmp_path / "renamed.onnx"))
    refused = edgekit_cli("package", qat_torch / "model.onnx", "-c", data, "--format", "onnx", "--float-reference",
                          tmp_path / "renamed.onnx", "-o", tmp_path / "c")
    _usage_error(refused, "has outputs ['scores'], the quantized model ['logits']: they are matched by name")
