"""ONNX sources as exporters write them: dynamic axes, old opsets, a fixed batch size.

Models are built with ``onnx.helper`` (no download): Conv -> Relu -> GlobalAveragePool ->
Flatten -> Gemm, NCHW.
"""

from __future__ import annotations

import json


import numpy as np
import pytest

import edgekit
from edgekit.errors import OTHER_ROUTES
from tests.conftest import assert_user_error, device_cli, device_matches, edgekit_cli

pytestmark = pytest.mark.slow


def conv_model(path, batch="N", height="H", width="W", opset=17):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "conv_b"),
        numpy_helper.from_array(rng.normal(0, 0.5, (8, 5)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(5, np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"]),
    ]
    graph = helper.make_graph(nodes, "convnet",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, height, width])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 5])],
                              initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def calibration(path, n=120, size=16):
    x = np.random.default_rng(1).uniform(0, 1, (n, 3, size, size)).astype(np.float32)
    np.savez(path, images=x)
    return x


def package_onnx(model, data, out, *extra):
    return edgekit_cli("package", model, "-c", data, "--format", "onnx", "-o", out, *extra)


def test_dynamic_batch_height_width(tmp_path):
    model = conv_model(tmp_path / "dynamic.onnx")
    x = calibration(tmp_path / "calib.npz")
    result = package_onnx(model, tmp_path / "calib.npz", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    pkg = tmp_path / "out" / "dynamic.edgekit"
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [-1, 3, -1, -1] and manifest["inputs"][0]["role"] == "values"
    with edgekit.load(pkg) as loaded:
        got = loaded.predict(x[:4])
    assert got.shape == (4, 5)
    assert manifest["validation"]["artifacts"]["onnx"]["cosine"] > 0.99


def test_input_shape_fixes_dynamic_dimensions(tmp_path):
    model = conv_model(tmp_path / "dynamic.onnx")
    calibration(tmp_path / "calib.npz")
    result = package_onnx(model, tmp_path / "calib.npz", tmp_path / "out", "--input-shape", "images=1x3x16x16")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "dynamic.edgekit" / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [-1, 3, 16, 16]
    wrong = package_onnx(model, tmp_path / "calib.npz", tmp_path / "o2", "--input-shape", "images=1x16x16")
    assert_user_error(wrong, "has 3 dimensions", "the batch first")


def test_opset_11_is_upgraded_before_quantization(tmp_path):
    model = conv_model(tmp_path / "old.onnx", opset=11)
    x = calibration(tmp_path / "calib.npz")
    result = package_onnx(model, tmp_path / "calib.npz", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "old.edgekit" / "manifest.json").read_text())
    converter = manifest["artifacts"][0]["converter"]
    assert converter["upgraded_from_opset"] == 11 and converter["opset"] >= 13
    with edgekit.load(tmp_path / "out" / "old.edgekit") as loaded:
        assert loaded.predict(x[:2]).shape == (2, 5)


def test_fixed_batch_model_runs_in_slices_everywhere(tmp_path):
    model = conv_model(tmp_path / "fixed.onnx", batch=1, height=16, width=16)
    x = calibration(tmp_path / "calib.npz")
    result = package_onnx(model, tmp_path / "calib.npz", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    pkg = tmp_path / "out" / "fixed.edgekit"
    with edgekit.load(pkg) as loaded:
        batch = loaded.predict(x[:7])
        one_by_one = np.concatenate([loaded.predict(x[i : i + 1]) for i in range(7)])
    np.testing.assert_array_equal(batch, one_by_one)
    np.save(tmp_path / "seven.npy", x[:7])
    run = device_cli(pkg, "-i", tmp_path / "seven.npy")
    assert run.returncode == 0 and run.stdout.count("seven.npy[") == 7, run.stderr


def test_preprocessing_is_said_and_a_guess_is_a_warning(tmp_path):
    """An image folder for an NCHW model: the preprocessing line names where each value came from."""
    from PIL import Image

    model = conv_model(tmp_path / "img.onnx", height=16, width=16)
    for i in range(30):
        folder = tmp_path / "images"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    guessed = package_onnx(model, tmp_path / "images", tmp_path / "out")
    assert guessed.returncode in (0, 1, 4), guessed.stderr  # 15 held-out samples: a pass is not decidable (4)
    assert "input 'images' (image): x * 0.00392157" in guessed.stdout  # the report, before converting
    assert "is a guess" in guessed.stderr and "--preprocessing" in guessed.stderr
    preset = package_onnx(model, tmp_path / "images", tmp_path / "out2", "--preprocessing", "imagenet",
                          "--allow-accuracy-drop")
    assert "--preprocessing imagenet" in preset.stdout and "is a guess" not in preset.stderr, preset.stderr
    if preset.returncode == 0:
        manifest = json.loads((tmp_path / "out2" / "img.edgekit" / "manifest.json").read_text())
        assert manifest["inputs"][0]["preprocessing"]["mean"] == [0.485, 0.456, 0.406]


def lstm_model(path, op="LSTM"):
    """An LSTM (or plain RNN) + Gemm sequence classifier saved with its weights in
    ``NAME.onnx.data``, as ``torch.onnx.export`` writes larger models."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    hidden, features, steps = 64, 8, 6  # each step unrolls into its own layers on the TFLite route
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    weights = [
        numpy_helper.from_array(rng.normal(0, 0.2, (1, gates * hidden, features)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.normal(0, 0.2, (1, gates * hidden, hidden)).astype(np.float32), "R"),
        numpy_helper.from_array(np.zeros((1, 2 * gates * hidden), np.float32), "B"),
        numpy_helper.from_array(rng.normal(0, 0.5, (hidden, 4)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "fc_b"),
        numpy_helper.from_array(np.asarray([-1, hidden], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Transpose", ["seq"], ["t"], perm=[1, 0, 2]),  # [N, T, F] -> [T, N, F]
        helper.make_node(op, ["t", "W", "R", "B"], ["", "h"], hidden_size=hidden),
        helper.make_node("Reshape", ["h", "shape"], ["last"]),  # the last hidden state, [1, N, H] -> [N, H]
        helper.make_node("Gemm", ["last", "fc_w", "fc_b"], ["scores"]),
    ]
    graph = helper.make_graph(nodes, "lstm",
                              [helper.make_tensor_value_info("seq", TensorProto.FLOAT, ["N", steps, features])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 4])],
                              initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location=path.name + ".data", size_threshold=1024)  # as exporters do
    return rng.normal(0, 1, (120, steps, features)).astype(np.float32)


def test_a_plain_rnn_is_refused_on_the_litert_torch_route_before_converting(tmp_path):
    """The ONNX -> PyTorch rebuild has no plain RNN: the TFLite route says so once the model is
    described, before any conversion (it used to convert for minutes, then fail); ONNX, which
    keeps it, still ships."""
    import time

    data = lstm_model(tmp_path / "rnn.onnx", op="RNN")
    np.save(tmp_path / "seq.npy", data)
    started = time.monotonic()
    alone = edgekit_cli("package", tmp_path / "rnn.onnx", "-c", tmp_path / "seq.npy", "-o", tmp_path / "a",
                        "--format", "tflite", "--no-also-float")
    assert alone.returncode == 1 and "Traceback" not in alone.stderr
    assert "onnx-to-torch -> torch-program -> tflite cannot convert RNN" in alone.stderr
    assert "refused before converting; package it for onnx" in alone.stderr and "Calibrating" not in alone.stdout
    assert time.monotonic() - started < 120
    both = edgekit_cli("package", tmp_path / "rnn.onnx", "-c", tmp_path / "seq.npy", "-o", tmp_path / "b",
                       "--format", "tflite", "--format", "onnx", "--no-also-float", "--allow-partial")
    assert both.returncode == 0, both.stderr[-3000:]
    assert "tflite: not built: the route" in both.stdout and "onnx: shipped int8+float" in both.stdout
    assert "package it for onnx (--format onnx)" in both.stderr + both.stdout


def test_an_lstm_reaches_tflite_unrolled_into_int8_linear_layers(tmp_path):
    """GRU and LSTM are rebuilt step by step (linear layers and gates), so the TFLite route
    converts them (it refused them before) and its matmuls are int8."""
    import onnxruntime as ort

    data = lstm_model(tmp_path / "lstm.onnx")
    np.save(tmp_path / "seq.npy", data)
    result = edgekit_cli("package", tmp_path / "lstm.onnx", "-c", tmp_path / "seq.npy", "-o", tmp_path / "out",
                         "--format", "tflite", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "lstm.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["validation"]["artifacts"]["tflite"]["passed"]
    assert manifest["artifacts"][0]["details"]["precision"]["ops"]["integer_weighted"] >= 6  # 6 steps, and more
    expected = ort.InferenceSession(str(tmp_path / "lstm.onnx")).run(None, {"seq": data[:8]})[0]
    device_matches(package, data[:8], expected, 0.15, tmp_path, artifacts=("tflite",))


def test_a_route_limit_refuses_before_the_model_loads(tmp_path):
    """The ops of an ONNX graph are read without loading it (no weights, no checker): a route
    whose converter lacks an op refuses before anything loads. Here the weights file is gone, so
    loading would fail: the route's refusal comes first. (CoreML takes a two-input graph.)"""
    import onnx
    from onnx import TensorProto, helper

    data = lstm_model(tmp_path / "rnn.onnx", op="RNN")
    np.save(tmp_path / "seq.npy", data)
    (tmp_path / "rnn.onnx.data").unlink()
    refused = edgekit_cli("package", tmp_path / "rnn.onnx", "-c", tmp_path / "seq.npy", "-o", tmp_path / "a",
                          "--format", "tflite")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "tflite cannot convert RNN" in refused.stderr and "not a valid ONNX model" not in refused.stderr
    two = helper.make_graph([helper.make_node("Add", ["a", "b"], ["sum"])], "two",
                            [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in ("a", "b")],
                            [helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["N", 4])])
    onnx.save(helper.make_model(two, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "two.onnx")
    np.savez(tmp_path / "two.npz", a=np.ones((40, 4), np.float32), b=np.ones((40, 4), np.float32))  # 20 held out
    coreml = edgekit_cli("package", tmp_path / "two.onnx", "-c", tmp_path / "two.npz", "-o", tmp_path / "b",
                         "--format", "coreml", "--no-also-float")
    assert coreml.returncode == 0, coreml.stderr[-3000:]  # a traced module's inputs each by name: no limit
    manifest = json.loads((tmp_path / "b" / "two.edgekit" / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["a", "b"]
    assert manifest["validation"]["artifacts"]["coreml"]["passed"]


def test_external_data_quantizes_and_the_precision_label_counts_what_stayed_float(tmp_path):
    """quant_pre_process once lost `model.onnx.data` (it copies the model into its own temp
    folder); and ORT leaves LSTM in float while the artifact was labelled int8."""
    data = lstm_model(tmp_path / "lstm.onnx")
    assert (tmp_path / "lstm.onnx.data").stat().st_size > 50_000
    np.save(tmp_path / "seq.npy", data)
    result = edgekit_cli("package", tmp_path / "lstm.onnx", "-c", tmp_path / "seq.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "lstm.edgekit" / "manifest.json").read_text())
    artifact = manifest["artifacts"][0]
    counts = artifact["details"]["precision"]
    assert artifact["precision"].startswith("int8+float (") and "LSTM" in {op["op"] for op in artifact["float_ops"]}
    assert counts["integer_weight_fraction"] < 0.2 and counts["ops"]["int8"] >= 1
    assert "keeps these ops in float: LSTM" in result.stdout
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "lstm.onnx"))  # the source, its weights read from lstm.onnx.data
    expected = session.run(None, {session.get_inputs()[0].name: data[:8]})[0]
    device_matches(tmp_path / "out" / "lstm.edgekit", data[:8], expected, 0.1 * np.abs(expected).max() + 1e-3,
                   tmp_path, artifacts=("onnx",))


def gain_model(path):
    """audio [N, 16] -> Gemm -> times a scalar ``gain`` input (rank 0): a sample-rate style input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.3, (16, 8)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["audio", "W"], ["m"]),
                               helper.make_node("Mul", ["m", "gain"], ["y"])], "gain",
                              [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 16]),
                               helper.make_tensor_value_info("gain", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], initializer=[weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_scalar_input_is_refused_up_front_by_name(tmp_path):
    """A sample-rate style scalar input cannot be fed as a batch: said before any conversion,
    with the option that fixes it."""
    gain_model(tmp_path / "gain.onnx")
    np.savez(tmp_path / "data.npz", audio=np.zeros((60, 16), np.float32), gain=np.ones((60, 1), np.float32))
    result = edgekit_cli("package", tmp_path / "gain.onnx", "-c", tmp_path / "data.npz", "-o", tmp_path / "out",
                         "--format", "onnx")
    assert_user_error(result, "model input 'gain' is a scalar (rank 0)", "--input gain=")
    np.save(tmp_path / "audio.npy", np.ones((3, 16), np.float32))  # the bare runtime says the same
    np.save(tmp_path / "gain.npy", np.asarray(2.0, np.float32))  # (it blamed "different numbers of samples")
    run = device_cli(tmp_path / "gain.onnx", "-i", f"audio={tmp_path / 'audio.npy'}", "-i",
                     f"gain={tmp_path / 'gain.npy'}")
    assert_user_error(run, "model input 'gain' is a scalar (rank 0)", "--input gain=")


def test_a_scalar_input_fixed_with_input_name_value_packages_for_every_format(tmp_path):
    """``--input gain=2`` folds the scalar into every artifact; each runs on the device with the
    one remaining input and matches the source fed gain=2."""
    import onnxruntime as ort

    gain_model(tmp_path / "gain.onnx")
    audio = np.random.default_rng(1).normal(0, 1, (150, 16)).astype(np.float32)
    np.save(tmp_path / "audio.npy", audio)
    result = edgekit_cli("package", tmp_path / "gain.onnx", "-c", tmp_path / "audio.npy", "-o", tmp_path / "out",
                         "--format", "all", "--input", "gain=2", "--no-also-float")
    assert result.returncode == 0, result.stderr
    package = tmp_path / "out" / "gain.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["source"]["fixed_inputs"] == {"gain": {"value": 2.0}}
    assert [i["name"] for i in manifest["inputs"]] == ["audio"]
    assert sorted({a["format"] for a in manifest["artifacts"]}) == ["coreml", "executorch", "onnx", "tflite"]
    expected = ort.InferenceSession(str(tmp_path / "gain.onnx")).run(
        None, {"audio": audio[:8], "gain": np.asarray(2.0, np.float32)})[0]
    device_matches(package, audio[:8], expected, 0.25 * np.abs(expected).max(), tmp_path)
    given = device_cli(package, "-i", f"audio={tmp_path / 'audio.npy'}", "-i", f"gain={tmp_path / 'audio.npy'}")
    assert_user_error(given, "'gain'", "fixed to 2")  # the fixed input is not an input any more: said so


def test_input_name_value_is_checked_before_the_model_loads(tmp_path):
    gain_model(tmp_path / "gain.onnx")
    np.save(tmp_path / "audio.npy", np.zeros((60, 16), np.float32))
    for value, message in (("loud", "neither a number nor a .npy file"), ("nan", "must be finite"),
                           ("missing.npy", "does not exist")):
        result = edgekit_cli("package", tmp_path / "gain.onnx", "-c", tmp_path / "audio.npy", "-o",
                             tmp_path / "out", "--format", "onnx", "--input", f"gain={value}")
        assert_user_error(result, message)
    result = edgekit_cli("package", tmp_path / "gain.onnx", "-c", tmp_path / "audio.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--input", "volume=2")
    assert_user_error(result, "'volume'", "its inputs: ['audio', 'gain']")
    from tests.conftest import DIGITS_MODEL

    result = edgekit_cli("package", DIGITS_MODEL, "-c", tmp_path / "audio.npy", "-o", tmp_path / "out",
                         "--input", "gain=2")
    assert_user_error(result, "works for ONNX and PyTorch sources, not Keras models", "tf2onnx")


def yolo_head(path):
    """A YOLO-style head: box rows and sigmoid class rows concatenated into [N, 7, anchors]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "stem_w"),
               numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "box_w"),
               numpy_helper.from_array(rng.normal(0, 0.3, (3, 8, 1, 1)).astype(np.float32), "cls_w"),
               numpy_helper.from_array(np.asarray([1, 4, -1], np.int64), "box_shape"),
               numpy_helper.from_array(np.asarray([1, 3, -1], np.int64), "cls_shape"),
               numpy_helper.from_array(np.asarray(16.0, np.float32), "stride")]
    nodes = [helper.make_node("Conv", ["images", "stem_w"], ["s"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["s"], ["f"]),
             helper.make_node("Conv", ["f", "box_w"], ["b4"]), helper.make_node("Reshape", ["b4", "box_shape"], ["b"]),
             helper.make_node("Mul", ["b", "stride"], ["boxes"]),
             helper.make_node("Conv", ["f", "cls_w"], ["c4"]), helper.make_node("Reshape", ["c4", "cls_shape"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["output0"], axis=1)]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 7, 256])],
                              initializer=weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return rng.random((120, 3, 32, 32), dtype=np.float32)


def test_a_yolo_head_sigmoid_beside_box_rows_gets_the_int8_scale_litert_kernels_need(tmp_path):
    """litert-torch shares one scale over a concatenation, so a sigmoid beside box rows came out
    as an int8 LOGISTIC with the box scale, which LiteRT's kernels refuse to prepare; the
    LOGISTIC now writes 1/256 and a QUANTIZE takes it to the concat's scale."""
    import onnxruntime as ort

    from edgekit.formats.tflite.backend import open_interpreter

    images = yolo_head(tmp_path / "head.onnx")
    np.save(tmp_path / "images.npy", images)
    result = edgekit_cli("package", tmp_path / "head.onnx", "-c", tmp_path / "images.npy", "-o", tmp_path / "out",
                         "--format", "tflite", "--format", "onnx", "--no-also-float", "--allow-accuracy-drop",
                         "--no-auto-fix")  # litert-torch's own build, as it converts
    assert result.returncode == 0, result.stderr
    package = tmp_path / "out" / "head.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    tflite = next(a for a in manifest["artifacts"] if a["format"] == "tflite")
    assert tflite["details"]["requantized_outputs"] == ["LOGISTIC"]
    open_interpreter(str(package / tflite["path"]), with_delegates=False).allocate_tensors()  # refused before
    session = ort.InferenceSession(str(tmp_path / "head.onnx"))  # a batch-1 head: one sample per call
    expected = np.concatenate([session.run(None, {"images": images[i : i + 1]})[0] for i in range(6)])
    # box rows reach ~27 on one shared int8 scale (~0.23 per step): a few steps is INT8's error here
    device_matches(package, images[:6], expected, 1.5, tmp_path)


def test_a_tflite_artifact_litert_refuses_is_named_by_its_converter_not_a_staging_path(tmp_path):
    """The safety net behind every rewrite: LiteRT refusing what a converter wrote is that format's
    ConversionError, and the message holds no path of the staging folder."""
    from edgekit.errors import ConversionError
    from edgekit.formats.tflite.builder import _loadable
    from edgekit.formats.tflite.precision import analyse

    broken = tmp_path / "staged.partial" / "model.tflite"
    broken.parent.mkdir()
    broken.write_bytes(b"TFL3" + bytes(64))
    with pytest.raises(ConversionError) as raised:
        _loadable(lambda: analyse(str(broken), []), "litert-torch")
    assert "LiteRT cannot load the INT8 TFLite model litert-torch wrote" in raised.value.message
    assert "staged.partial" not in raised.value.message
    assert OTHER_ROUTES in raised.value.hint  # the packager names the formats from the route table


def one_hot_classifier(path):
    """Byte features: int32 ids -> OneHot(depth 32) -> Gemm -> Softmax over 214 classes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(np.asarray(32, np.int32), "depth"),
               numpy_helper.from_array(np.asarray([0, 1], np.float32), "values"),
               numpy_helper.from_array(np.asarray([-1, 512], np.int64), "shape"),
               numpy_helper.from_array(rng.normal(0, 0.5, (512, 214)).astype(np.float32), "w"),
               numpy_helper.from_array(np.zeros(214, np.float32), "b")]
    nodes = [helper.make_node("OneHot", ["bytes", "depth", "values"], ["hot"], axis=-1),
             helper.make_node("Reshape", ["hot", "shape"], ["flat"]), helper.make_node("Gemm", ["flat", "w", "b"], ["l"]),
             helper.make_node("Softmax", ["l"], ["scores"], axis=1)]
    graph = helper.make_graph(nodes, "bytes", [helper.make_tensor_value_info("bytes", TensorProto.INT32, ["N", 16])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 214])],
                              initializer=weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return rng.integers(0, 32, (120, 16)).astype(np.int32)


def test_an_integer_one_hot_front_end_reaches_tflite_and_coreml(tmp_path):
    """OneHot over int32 ids: once refused for TFLite and CoreML ("cannot convert these ONNX ops:
    OneHot"); now a comparison both quantize around, CoreML weights-only with the reason, and ONNX's
    own build keeps the lookup int8."""
    import onnxruntime

    ids = one_hot_classifier(tmp_path / "bytes.onnx")
    np.save(tmp_path / "ids.npy", ids)
    result = edgekit_cli("package", tmp_path / "bytes.onnx", "-c", tmp_path / "ids.npy", "-o", tmp_path / "out",
                         "--format", "tflite", "--format", "coreml", "--format", "onnx", "--no-also-float",
                         "--allow-accuracy-drop")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "bytes.edgekit" / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"]} == {"tflite", "onnx", "coreml"}
    assert "integer input(s) bytes" in result.stdout  # CoreML: weights-only INT8, said
    onnx_precision = next(a for a in manifest["artifacts"] if a["format"] == "onnx")["precision"]
    assert onnx_precision == "int8"  # the OneHot is a lookup, not float compute
    expected = onnxruntime.InferenceSession(str(tmp_path / "bytes.onnx")).run(None, {"bytes": ids[:8]})[0]
    device_matches(tmp_path / "out" / "bytes.edgekit", ids[:8], expected, 0.1, tmp_path)


def gru_model(path, hidden=8, squeeze=True):
    """frames [batch, 5, 4] -> GRU with a seq-first initial state h0 [1, batch, hidden] -> h [batch, hidden]
    (``squeeze=False``: the GRU's own seq-first h [1, batch, hidden])."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden = 8
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Transpose", ["frames"], ["t"], perm=[1, 0, 2]),
             helper.make_node("GRU", ["t", "W", "R", "", "", "h0"], ["", "h1"], hidden_size=hidden),
             helper.make_node("Squeeze", ["h1", "axis0"], ["h"]) if squeeze else helper.make_node("Identity", ["h1"], ["h"])]
    graph = helper.make_graph(
        nodes, "gru",
        [helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["batch", 5, 4]),
         helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, "batch", hidden])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", hidden] if squeeze else [1, "batch", hidden])],
        initializer=[numpy_helper.from_array(rng.normal(0, 0.3, (1, 3 * hidden, 4)).astype(np.float32), "W"),
                     numpy_helper.from_array(rng.normal(0, 0.3, (1, 3 * hidden, hidden)).astype(np.float32), "R"),
                     numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_state_input_batched_on_axis_1_is_made_batch_first(tmp_path):
    """A seq-first recurrent state [layers, N, hidden] beside [N, T, F] frames: its batch is on
    axis 1. Stacking samples on axis 0 would mix them up, so a Transpose at the graph's edge makes
    it batch-first: the package takes h0 as [N, layers, hidden] and says so; values match the
    source fed the same states in its own layout."""
    import onnxruntime as ort

    gru_model(tmp_path / "gru.onnx")
    rng = np.random.default_rng(3)
    frames, h0 = rng.normal(0, 1, (90, 5, 4)).astype(np.float32), rng.normal(0, 0.5, (90, 1, 8)).astype(np.float32)
    np.savez(tmp_path / "data.npz", frames=frames, h0=h0)
    result = edgekit_cli("package", tmp_path / "gru.onnx", "-c", tmp_path / "data.npz", "-o", tmp_path / "out",
                         "--format", "onnx", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "gru.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["source"]["rewrites"]["batch_axes"] == {"h0": 1}
    assert next(i for i in manifest["inputs"] if i["name"] == "h0")["shape"][1:] == [1, 8]
    expected = ort.InferenceSession(str(tmp_path / "gru.onnx")).run(
        None, {"frames": frames[:6], "h0": h0[:6].transpose(1, 0, 2)})[0]
    import edgekit

    with edgekit.load(package, artifact="onnx") as model:
        produced = model.predict({"frames": frames[:6], "h0": h0[:6]})
    np.testing.assert_allclose(produced, expected, atol=0.1)


def test_a_state_input_fixed_to_zeros_follows_the_batch_of_the_frames(tmp_path):
    """``--input h0=0``: the initial state becomes zeros shaped [1, batch of frames, hidden] at run
    time, so the package runs any batch and matches the source fed zeros."""
    import onnxruntime as ort

    gru_model(tmp_path / "gru.onnx")
    frames = np.random.default_rng(2).normal(0, 1, (150, 5, 4)).astype(np.float32)
    np.save(tmp_path / "frames.npy", frames)
    result = edgekit_cli("package", tmp_path / "gru.onnx", "-c", tmp_path / "frames.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--input", "h0=0", "--no-also-float")  # GRU: ONNX only
    assert result.returncode == 0, result.stderr
    package = tmp_path / "out" / "gru.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["source"]["fixed_inputs"] == {"h0": {"value": 0.0}}
    expected = ort.InferenceSession(str(tmp_path / "gru.onnx")).run(
        None, {"frames": frames[:7], "h0": np.zeros((1, 7, 8), np.float32)})[0]
    device_matches(package, frames[:7], expected, 0.1, tmp_path, artifacts=("onnx",))


def test_a_state_saved_for_one_sample_is_repeated_for_each_sample_of_a_batch(tmp_path):
    """``--input h0=h0.npy`` with one sample's state [1, 1, 8] for h0 [1, batch, 8] failed inside
    ONNX Runtime (the constant fixed the batch at 1); a state saved for a whole batch is refused
    by name (the package would run that batch only). From Python, the array itself is the value."""
    import onnxruntime as ort

    import edgekit

    gru_model(tmp_path / "gru.onnx")
    frames = np.random.default_rng(2).normal(0, 1, (150, 5, 4)).astype(np.float32)
    state = np.random.default_rng(3).normal(0, 0.5, (1, 1, 8)).astype(np.float32)
    np.save(tmp_path / "frames.npy", frames)
    np.save(tmp_path / "h0.npy", state)
    result = edgekit_cli("package", tmp_path / "gru.onnx", "-c", tmp_path / "frames.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--input", f"h0={tmp_path / 'h0.npy'}", "--no-also-float")
    assert result.returncode == 0, result.stderr
    expected = ort.InferenceSession(str(tmp_path / "gru.onnx")).run(
        None, {"frames": frames[:7], "h0": np.repeat(state, 7, axis=1)})[0]
    device_matches(tmp_path / "out" / "gru.edgekit", frames[:7], expected, 0.1, tmp_path, artifacts=("onnx",))
    np.save(tmp_path / "h4.npy", np.zeros((1, 4, 8), np.float32))
    result = edgekit_cli("package", tmp_path / "gru.onnx", "-c", tmp_path / "frames.npy", "-o", tmp_path / "out4",
                         "--format", "onnx", "--input", f"h0={tmp_path / 'h4.npy'}")
    assert_user_error(result, "has size 4 on axis 1, which is the batch of input 'frames'", "one sample's value")
    made = edgekit.package(str(tmp_path / "gru.onnx"), frames, tmp_path / "py", formats=["onnx"],
                           fixed_inputs={"h0": state}, also_float=False)
    assert made.manifest.source["fixed_inputs"]["h0"]["shape"] == [1, 1, 8]


def test_an_output_batched_on_axis_1_is_made_batch_first(tmp_path):
    """A seq-first state as an output would be joined across samples on axis 0: a Transpose makes
    it [batch, 1, hidden], recorded, and its values are the source's transposed."""
    import onnxruntime as ort

    gru_model(tmp_path / "gru.onnx", squeeze=False)
    frames = np.random.default_rng(4).normal(0, 1, (60, 5, 4)).astype(np.float32)
    np.save(tmp_path / "frames.npy", frames)
    result = edgekit_cli("package", tmp_path / "gru.onnx", "-c", tmp_path / "frames.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--input", "h0=0", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "gru.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["source"]["rewrites"]["batch_axes"] == {"h": 1}
    expected = ort.InferenceSession(str(tmp_path / "gru.onnx")).run(
        None, {"frames": frames[:5], "h0": np.zeros((1, 5, 8), np.float32)})[0]
    import edgekit

    with edgekit.load(package) as model:
        np.testing.assert_allclose(model.predict(frames[:5]), expected.transpose(1, 0, 2), atol=0.1)


def test_a_state_whose_batch_axis_is_named_otherwise_is_found_by_its_fixed_first_axis(tmp_path):
    """A state ``[2, n, 4]`` beside frames ``[batch, 4]``: the exporter named its batch ``n``, not
    ``batch``. ONNX Runtime refused the samples stacked on axis 0 and the message blamed a
    converter; its only free axis after a first axis fixed at 2 is the batch, made batch-first
    like a named one, and each sample's state reaches the model in the source's layout."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    frames_in = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    state_in = helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "n", 4])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    rng = np.random.default_rng(5)
    weights = numpy_helper.from_array(rng.normal(0, 0.5, (4, 4)).astype(np.float32), "w")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    graph = helper.make_graph([helper.make_node("ReduceSum", ["state", "axes"], ["summed"], keepdims=0),
                               helper.make_node("MatMul", ["x", "w"], ["mixed"]),
                               helper.make_node("Add", ["mixed", "summed"], ["y"])],
                              "state", [frames_in, state_in], [out], [weights, axes])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "state.onnx")
    x, state = rng.normal(0, 1, (120, 4)).astype(np.float32), rng.normal(0, 1, (120, 2, 4)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x, state=state)
    result = edgekit_cli("package", tmp_path / "state.onnx", "-c", tmp_path / "data.npz", "-o", tmp_path / "out",
                         "--format", "onnx", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "state.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["source"]["rewrites"]["batch_axes"] == {"state": 1}
    expected = ort.InferenceSession(str(tmp_path / "state.onnx")).run(
        None, {"x": x[:1], "state": state[:1].transpose(1, 0, 2)})[0]
    import edgekit

    with edgekit.load(package, artifact="onnx") as model:
        produced = model.predict({"x": x[:1], "state": state[:1]})
    np.testing.assert_allclose(produced, expected, atol=0.15)


def test_a_paddle_style_export_with_batch_norm_nodes_builds_on_executorch(tmp_path_factory, tmp_path):
    """paddle2onnx writes BatchNormalization after bias-less convolutions (PP-LCNet: depthwise,
    HardSwish, squeeze-excite). ExecuTorch failed two seconds in on such exports ("attribute
    'const_111' already exists"); now it builds and runs like the source, beside ONNX's own build.
    (The ONNX source's routes to TFLite and CoreML are the attention encoder's and the route
    matrix's subject, not this graph's.)"""
    import onnxruntime

    from tests.conftest import verdict_model

    model = verdict_model(tmp_path_factory, "paddle_lcnet")
    result = edgekit_cli("package", model / "paddle_lcnet.onnx", "-c", model / "calibration.npz", "--eval",
                         model / "eval.npz", "--format", "executorch", "--format", "onnx", "--no-also-float",
                         "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "paddle_lcnet.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"]} == {"onnx", "executorch"}
    x = np.load(model / "eval.npz")["x"][:8]
    expected = onnxruntime.InferenceSession(str(model / "paddle_lcnet.onnx")).run(None, {"x": x})[0]
    device_matches(package, x, expected, 0.1, tmp_path, artifacts=("onnx", "executorch"))


@pytest.mark.parametrize("formats", [("tflite", "onnx"), ("coreml", "executorch")])
def test_a_masked_bidirectional_gru_from_keras_builds_on_every_format(tmp_path_factory, tmp_path, formats):
    """A Keras tagger with Masking and a bidirectional GRU: TF's converter fails on its loops
    (TensorListReserve), coremltools on both Keras routes (IndexError), and its ONNX form holds
    Loops that the ONNX -> PyTorch rebuild refused. Now TFLite converts the graph traced at batch
    1 (TensorList ops lower to WHILE loops only at a static shape; the loops stay float, which
    LiteRT Quantizer wrote unloadable), CoreML falls back to the route through tf2onnx and the
    rebuild, which unrolls the loops; every format builds, and the device runtimes give the
    source's answers. (Two halves: they run side by side.)"""
    import keras

    from tests.conftest import verdict_model

    model = verdict_model(tmp_path_factory, "masked_gru")
    also_float = "executorch" in formats  # its float program is not lowered where loops were unrolled
    result = edgekit_cli("package", model / "masked_gru.keras", "-c", model / "calibration.npz", "--eval",
                         model / "eval.npz", *(a for f in formats for a in ("--format", f)),
                         "--also-float" if also_float else "--no-also-float", "--no-auto-fix", "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "masked_gru.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"] if a["precision"] not in ("float16", "float32")} == set(formats)
    if also_float:  # the loop steps run in float in the INT8 program: no minutes-long float lowering beside it
        assert not [a for a in manifest["artifacts"] if a["format"] == "executorch" and a["precision"] == "float32"]
        evaluated = manifest["validation"]["artifacts"]["executorch"]["float_conversion"]["evaluated"]
        assert "unrolled loops already run in float" in evaluated
        executorch = next(a for a in manifest["artifacts"] if a["format"] == "executorch")
        assert executorch["details"]["placement"]["portable"]  # the loop steps: ExecuTorch's kernels, not XNNPACK
    assert all(v["verdict"] == "passed" for v in manifest["validation"]["artifacts"].values())
    if "tflite" in formats:  # TF's converter on the graph at batch 1: seconds, where the unrolled route took minutes
        assert "tf2onnx" not in result.stderr
        tflite = next(a for a in manifest["artifacts"] if a["format"] == "tflite")
        assert "traced at batch 1" in tflite["converter"]["tool"]
        assert {op["op"] for op in tflite["float_ops"]} >= {"WHILE"}
    x = np.load(model / "eval.npz")["features"][:16]
    expected = keras.models.load_model(model / "masked_gru.keras").predict(x, verbose=0)
    device_matches(package, x, expected, 0.15, tmp_path, artifacts=tuple(f for f in formats if f != "coreml"))
