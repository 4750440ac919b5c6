"""Models with several inputs and outputs: nothing dropped, nothing misaligned.

Bare ``.onnx`` and ``.tflite`` files with several outputs return every output, identical to the
raw ONNX Runtime session / LiteRT interpreter, through ``edgekit.load`` and ``python -m
edgekit.cli.run`` (printed and written with ``--output``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import edgekit
from edgekit.errors import InputError
from tests.conftest import device_cli, run_tf


@pytest.fixture(scope="module")
def two_in_three_out_onnx(tmp_path_factory):
    """a (N,4) and b (N,3) -> boxes (N,4) = a*2, scores (N,2) = softmax(b W), flag (N,1) = sum(a)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(3, 2)).astype(np.float32), "w")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("Mul", ["a", "two"], ["boxes"]),
        helper.make_node("MatMul", ["b", "w"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["scores"], axis=-1),
        helper.make_node("ReduceSum", ["a", "axes"], ["flag"], keepdims=1),
    ]
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    graph = helper.make_graph(
        nodes, "multi",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 2]),
         helper.make_tensor_value_info("flag", TensorProto.FLOAT, ["N", 1])],
        initializer=[w, two, axes],
    )
    path = tmp_path_factory.mktemp("multi") / "multi.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


@pytest.fixture(scope="module")
def three_output_tflite(tmp_path_factory):
    """A float TFLite with one input and three heads of different shapes."""
    path = tmp_path_factory.mktemp("tflite_multi") / "heads.tflite"
    run_tf(f"""
        import keras, tensorflow as tf
        keras.utils.set_random_seed(0)
        x = keras.Input((8,), name="features")
        hidden = keras.layers.Dense(16, activation="relu")(x)
        outputs = {{"boxes": keras.layers.Dense(4, name="boxes")(hidden),
                    "scores": keras.layers.Dense(3, activation="softmax", name="scores")(hidden),
                    "presence": keras.layers.Dense(1, activation="sigmoid", name="presence")(hidden)}}
        model = keras.Model(x, outputs)
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
        open({str(path)!r}, "wb").write(converter.convert())
    """)
    return path


def _raw_onnx(path, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def test_bare_onnx_returns_every_output_identical_to_the_session(two_in_three_out_onnx):
    rng = np.random.default_rng(1)
    feeds = {"a": rng.normal(size=(5, 4)).astype(np.float32), "b": rng.normal(size=(5, 3)).astype(np.float32)}
    raw = _raw_onnx(two_in_three_out_onnx, feeds)
    with edgekit.load(two_in_three_out_onnx) as model:
        assert model.input_names == ["a", "b"] and model.output_names == ["boxes", "scores", "flag"]
        got = model.predict(feeds)
        assert isinstance(got, dict) and list(got) == ["boxes", "scores", "flag"]
        for name in raw:
            np.testing.assert_array_equal(got[name], raw[name])
        swapped = model.predict({"b": feeds["b"], "a": feeds["a"]})  # by name, whatever the order
        np.testing.assert_array_equal(swapped["boxes"], raw["boxes"])
        with pytest.raises(InputError, match="missing"):
            model.predict({"a": feeds["a"]})


def test_device_command_prints_and_writes_every_output(two_in_three_out_onnx, tmp_path):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(3, 3)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    raw = _raw_onnx(two_in_three_out_onnx, {"a": a, "b": b})
    result = device_cli(two_in_three_out_onnx, "-i", f"a={tmp_path / 'a.npy'}", "-i", f"b={tmp_path / 'b.npy'}")
    assert result.returncode == 0, result.stderr
    for name in ("boxes:", "scores:", "flag:"):
        assert result.stdout.count(name) == 3, result.stdout
    written = device_cli(two_in_three_out_onnx, "-i", f"a={tmp_path / 'a.npy'}", "-i", f"b={tmp_path / 'b.npy'}",
                        "--output", tmp_path / "out.npz")
    assert written.returncode == 0, written.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == ["boxes", "flag", "scores"]
        for name in raw:
            np.testing.assert_array_equal(out[name], raw[name])
    np.savez(tmp_path / "set.npz", a=a, b=b)
    as_json = device_cli(two_in_three_out_onnx, "-i", tmp_path / "set.npz", "--output", tmp_path / "out.json")
    assert as_json.returncode == 0, as_json.stderr
    rows = json.loads((tmp_path / "out.json").read_text())
    assert len(rows) == 3 and sorted(rows[0]["outputs"]) == ["boxes", "flag", "scores"]
    np.testing.assert_allclose(rows[2]["outputs"]["scores"], raw["scores"][2], rtol=1e-6)
    single = device_cli(two_in_three_out_onnx, "-i", tmp_path / "set.npz", "--output", tmp_path / "out.npy")
    assert single.returncode == 1 and "has 3 outputs" in single.stderr and ".npz" in single.stderr


@pytest.mark.slow
def test_bare_tflite_returns_every_output_identical_to_the_interpreter(three_output_tflite, tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    x = np.random.default_rng(3).normal(size=(4, 8)).astype(np.float32)
    interpreter = Interpreter(model_path=str(three_output_tflite))
    runner = interpreter.get_signature_runner()
    raw = {}
    for i in range(len(x)):  # the raw runner, one sample at a time
        for name, value in runner(features=x[i : i + 1]).items():
            raw.setdefault(name, []).append(value)
    raw = {k: np.concatenate(v) for k, v in raw.items()}
    with edgekit.load(three_output_tflite) as model:
        got = model.predict(x)
    assert isinstance(got, dict) and sorted(got) == sorted(raw) == ["boxes", "presence", "scores"]
    for name in raw:
        np.testing.assert_array_equal(got[name], raw[name])
    np.save(tmp_path / "x.npy", x)
    result = device_cli(three_output_tflite, "-i", tmp_path / "x.npy", "--output", tmp_path / "out.npz")
    assert result.returncode == 0, result.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == ["boxes", "presence", "scores"]
        np.testing.assert_array_equal(out["scores"], raw["scores"])


@pytest.mark.slow
def test_outputs_an_artifact_orders_otherwise_reach_their_names_on_the_device(tmp_path):
    """TFLite's signature lists outputs alphabetically: the source's points, quality, logits come
    out of the artifact as logits, points, quality, a reordering that is not its own inverse. On
    the device every output keeps its own values under its own name (they once came back rotated:
    points with quality's one column), through ``edgekit.load`` and ``python -m edgekit.run``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.conftest import edgekit_cli

    rng = np.random.default_rng(4)
    heads = {"points": 10, "quality": 1, "logits": 4}
    nodes, weights = [], []
    for name, width in heads.items():
        weights.append(numpy_helper.from_array(rng.normal(size=(6, width)).astype(np.float32), f"w_{name}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w_{name}"], [name]))
    graph = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", w]) for n, w in heads.items()],
                              initializer=weights)
    source = tmp_path / "heads.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), source)
    np.save(tmp_path / "cal.npy", rng.uniform(-1, 1, (100, 6)).astype(np.float32))
    built = edgekit_cli("package", source, "-c", tmp_path / "cal.npy", "--format", "tflite", "--no-also-float",
                        "--preprocessing", "raw", "-o", tmp_path / "out")
    assert built.returncode == 0, built.stderr[-3000:]
    package = tmp_path / "out" / "heads.edgekit"
    x = rng.uniform(-1, 1, (7, 6)).astype(np.float32)
    raw = _raw_onnx(source, {"x": x})
    with edgekit.load(package, artifact="tflite") as model:
        assert [t.name for t in model.backend.outputs] == ["logits", "points", "quality"]  # the artifact's order
        got = model.predict_all(x)
    assert list(got) == list(heads)
    for name, width in heads.items():
        assert got[name].shape == (7, width), name
        np.testing.assert_allclose(got[name], raw[name], atol=0.05 * np.abs(raw[name]).max(), err_msg=name)
    np.save(tmp_path / "x.npy", x)
    result = device_cli(package, "--artifact", "tflite", "-i", tmp_path / "x.npy", "--output", tmp_path / "out.npz")
    assert result.returncode == 0, result.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert {name: out[name].shape for name in out.files} == {name: (7, w) for name, w in heads.items()}
