"""The ONNX source's lossless rewrites on real exports' shapes: nested Ifs that read values of
the branch around them, and recurrent states whose dims an exporter named after its nodes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.sources.onnx_rewrite import batch_dim_name, fold_constant_ifs
from tests.conftest import edgekit_cli

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def nested_if_model(path) -> None:
    """y = relu(x @ W) * 2 through two constant Ifs: the inner one reads ``t``, a value the outer
    branch makes (an outer-scope read), as streaming exports with a sample-rate switch do."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inner_then = helper.make_graph([helper.make_node("Mul", ["t", "two"], ["u"])], "inner_then", [],
                                   [helper.make_tensor_value_info("u", TensorProto.FLOAT, None)])
    inner_else = helper.make_graph([helper.make_node("Neg", ["t"], ["v"])], "inner_else", [],
                                   [helper.make_tensor_value_info("v", TensorProto.FLOAT, None)])
    outer_then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["t"]),
         helper.make_node("If", ["yes"], ["r"], then_branch=inner_then, else_branch=inner_else, name="inner")],
        "outer_then", [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    outer_else = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "outer_else", [],
                                   [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["yes"], ["y"], then_branch=outer_then, else_branch=outer_else, name="outer")],
        "nested", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [numpy_helper.from_array(rng.normal(0, 0.5, (8, 8)).astype(np.float32), "W"),
         numpy_helper.from_array(np.asarray(True), "yes"), numpy_helper.from_array(np.asarray(2.0, np.float32), "two")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_nested_ifs_fold_and_keep_their_outer_scope_reads(tmp_path):
    nested_if_model(tmp_path / "nested.onnx")
    model = onnx.load(str(tmp_path / "nested.onnx"))
    folded = fold_constant_ifs(model)
    assert [f["node"] for f in folded] == ["outer", "outer/inner"]
    onnx.checker.check_model(model, full_check=True)  # topologically sorted, every read defined
    onnx.save(model, str(tmp_path / "folded.onnx"))
    x = np.random.default_rng(1).normal(0, 1, (4, 8)).astype(np.float32)
    before = ort.InferenceSession(str(tmp_path / "nested.onnx")).run(None, {"x": x})[0]
    after = ort.InferenceSession(str(tmp_path / "folded.onnx")).run(None, {"x": x})[0]
    np.testing.assert_array_equal(before, after)


def test_a_nested_if_export_packages_with_default_flags(tmp_path):
    nested_if_model(tmp_path / "nested.onnx")
    x = np.random.default_rng(2).normal(0, 1, (300, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = edgekit_cli("package", tmp_path / "nested.onnx", "-c", tmp_path / "x.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "nested.edgekit" / "manifest.json").read_text())
    assert len(manifest["source"]["rewrites"]["folded_ifs"]) == 2
    assert manifest["validation"]["artifacts"]["onnx"]["verdict"] == "passed"


def test_the_batch_is_the_dim_the_inputs_share_whatever_it_is_named():
    # a state [AddstateN_dim_0, batch, 128] beside audio [batch, 512]: not the state's first dim
    assert batch_dim_name([["AddstateN_dim_0", "batch", ""], ["batch", ""]]) == "batch"
    assert batch_dim_name([["batch", ""], ["AddstateN_dim_0", "batch", ""]]) == "batch"
    assert batch_dim_name([["N", ""]]) == "N" and batch_dim_name([["", ""]]) is None


def state_on_axis_1_model(path, layers: int | None = 2) -> None:
    """A streaming step as VAD exports write it: frame ``x`` [N, 16] and a recurrent state
    ``state`` [2, N, 8] (layers first, batch on axis 1), every dimension unnamed; the next state
    ``stateN`` [2, N, 8] and a probability [N, 1]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def unnamed(name, shape):
        value = helper.make_tensor_value_info(name, TensorProto.FLOAT, [1] * len(shape))
        for dim, size in zip(value.type.tensor_type.shape.dim, shape):
            dim.Clear()
            if size is not None:
                dim.dim_value = size
        return value

    nodes = [helper.make_node("MatMul", ["x", "W1"], ["xw"], name="proj"), helper.make_node("Tanh", ["xw"], ["hx"]),
             helper.make_node("Unsqueeze", ["hx", "axis0"], ["hx0"]), helper.make_node("Mul", ["state", "decay"], ["kept"]),
             helper.make_node("Add", ["kept", "hx0"], ["mixed"]), helper.make_node("Tanh", ["mixed"], ["stateN"]),
             helper.make_node("ReduceMean", ["stateN"], ["pooled"], axes=[0], keepdims=0),
             helper.make_node("MatMul", ["pooled", "W2"], ["logit"]), helper.make_node("Sigmoid", ["logit"], ["output"])]
    graph = helper.make_graph(
        nodes, "vad", [unnamed("x", [None, 16]), unnamed("state", [layers, None, 8])],
        [unnamed("output", [None, 1]), unnamed("stateN", [layers, None, 8])],
        [numpy_helper.from_array(rng.normal(0, 0.3, (16, 8)).astype(np.float32), "W1"),
         numpy_helper.from_array(rng.normal(0, 3.0, (8, 1)).astype(np.float32), "W2"),
         numpy_helper.from_array(np.array([0], np.int64), "axis0"),
         numpy_helper.from_array(np.array([[[0.9]], [[0.5]]], np.float32), "decay")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_a_state_batched_on_axis_1_with_unnamed_dims_packages_on_every_format_and_streams_as_the_source(tmp_path):
    """A VAD whose state is [2, N, 128] was refused at the door, told to freeze its state to zeros
    (which gives up streaming); data given in the graph's own layout ([2, 200, 8]) were refused as
    "different numbers of samples". The state is made batch-first at the graph's edge, data in
    either layout are taken (what was done is said), every format builds, and the float artifact
    streams exactly as the source model does."""
    import edgekit

    state_on_axis_1_model(tmp_path / "vad.onnx")
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (300, 16)).astype(np.float32)
    state = np.tanh(rng.normal(0, 1, (2, 300, 8))).astype(np.float32)
    np.savez(tmp_path / "calibration.npz", x=x[:200], state=state[:, :200])  # the graph's own layout
    np.savez(tmp_path / "eval.npz", x=x[200:], state=np.moveaxis(state[:, 200:], 1, 0))  # batch-first
    result = edgekit_cli("package", tmp_path / "vad.onnx", "-c", tmp_path / "calibration.npz", "--eval",
                         tmp_path / "eval.npz", "--format", "all", "-o", tmp_path / "out", "--allow-partial")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "array 'state' (2, 200, 8) holds its 200 samples on axis 1 (the model's own layout): fed batch-first " \
           "as (200, 2, 8)" in result.stdout
    package = tmp_path / "out" / "vad.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["source"]["rewrites"]["batch_axes"] == {"state": 1, "stateN": 1}
    # every format converts; one may still miss its accuracy gate (CoreML's symmetric grid, on a few
    # probabilities near 0.5), never fail its route
    assert all(f["error"].startswith("INT8 validation failed") for f in manifest.get("failed") or []), manifest["failed"]
    assert {"tflite", "onnx", "executorch"} <= {a["format"] for a in manifest["artifacts"]}
    assert "coreml" in {a["format"] for a in manifest["artifacts"]} | {f["format"] for f in manifest.get("failed") or []}
    source = ort.InferenceSession(str(tmp_path / "vad.onnx"))
    carried = np.zeros((2, 1, 8), np.float32)
    expected = []
    for step in range(5):
        probability, carried = source.run(None, {"x": x[step:step + 1], "state": carried})
        expected.append(probability)
    with edgekit.load(package, artifact="onnx-float32") as model:
        streamed = model.stream().run({"x": x[:5]})
        from edgekit.errors import InputError

        with pytest.raises(InputError, match="frames for input 'x' are not a rectangular array"):  # was numpy's ValueError
            model.stream().run({"x": [[0.5] * 16, [0.5] * 15]})
    np.testing.assert_allclose(streamed["output"], np.concatenate(expected), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(streamed["stateN"][-1], np.moveaxis(carried, 1, 0)[0], rtol=1e-6, atol=1e-7)
    for fmt in ("tflite", "onnx", "executorch"):  # each INT8 artifact streams in its own runtime
        with edgekit.load(package, artifact=fmt) as model:
            assert model.stream().run({"x": x[:5]})["output"].shape == (5, 1)


def no_batch_axis_model(path) -> None:
    """An online tracker exported without a batch axis: one call takes a clip ``frames`` [frames,
    12] and a state vector ``h`` [5], and gives per-frame activations ``beats`` [frames, 1] and
    the next state ``hN`` [5]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def value(name, shape):
        made = helper.make_tensor_value_info(name, TensorProto.FLOAT, [1] * len(shape))
        for dim, size in zip(made.type.tensor_type.shape.dim, shape):
            dim.Clear()
            if isinstance(size, int):
                dim.dim_value = size
            else:
                dim.dim_param = size
        return made

    nodes = [helper.make_node("ReduceMean", ["frames"], ["m"], axes=[0], keepdims=0, name="pool"),
             helper.make_node("MatMul", ["m", "Wh"], ["mh"], name="to_state"),
             helper.make_node("Mul", ["h", "half"], ["hh"], name="decay"), helper.make_node("Add", ["hh", "mh"], ["ha"]),
             helper.make_node("Tanh", ["ha"], ["hN"], name="next_state"),
             helper.make_node("MatMul", ["frames", "W"], ["fw"], name="per_frame"),
             helper.make_node("MatMul", ["hN", "Wy"], ["bias"], name="from_state"),
             helper.make_node("Add", ["fw", "bias"], ["logits"]), helper.make_node("Sigmoid", ["logits"], ["beats"])]
    graph = helper.make_graph(
        nodes, "tracker", [value("frames", ["frames", 12]), value("h", [5])],
        [value("beats", ["frames", 1]), value("hN", [5])],
        [numpy_helper.from_array(rng.normal(0, 0.4, (12, 1)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.normal(0, 0.4, (12, 5)).astype(np.float32), "Wh"),
         numpy_helper.from_array(rng.normal(0, 1.0, (5, 1)).astype(np.float32), "Wy"),
         numpy_helper.from_array(np.float32(0.5), "half")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_a_model_without_a_batch_axis_packages_on_every_format_and_runs_one_sample_per_call(tmp_path):
    """An online tracker exported without a batch axis (a clip [frames, F] and state vectors) was
    refused at the door: "has shape (128, 1000, 162); the model expects (N, ?)". Its data show it:
    each sample has the inputs' whole shape. A batch axis of 1 is added at the graph's edge (said),
    every format builds, samples run one per call, and a stream carries the state as the source does."""
    import edgekit

    no_batch_axis_model(tmp_path / "tracker.onnx")
    rng = np.random.default_rng(1)
    frames = rng.normal(0, 1, (300, 40, 12)).astype(np.float32)
    state = np.tanh(rng.normal(0, 1, (300, 5))).astype(np.float32)
    np.savez(tmp_path / "calibration.npz", frames=frames[:200], h=state[:200])
    np.savez(tmp_path / "eval.npz", frames=frames[200:], h=state[200:])
    result = edgekit_cli("package", tmp_path / "tracker.onnx", "-c", tmp_path / "calibration.npz", "--eval",
                         tmp_path / "eval.npz", "--format", "all", "-o", tmp_path / "out", "--allow-partial")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the model has no batch axis" in result.stdout
    package = tmp_path / "out" / "tracker.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["source"]["rewrites"]["batch_axis_added"] == ["frames", "h", "beats", "hN"]
    assert all(f["error"].startswith("INT8 validation failed") for f in manifest.get("failed") or []), manifest["failed"]
    assert {"tflite", "onnx", "executorch"} <= {a["format"] for a in manifest["artifacts"]}
    source = ort.InferenceSession(str(tmp_path / "tracker.onnx"))
    carried, expected = np.zeros(5, np.float32), []
    for clip in frames[:3]:
        beats, carried = source.run(None, {"frames": clip, "h": carried})
        expected.append(beats)
    with edgekit.load(package, artifact="onnx-float32") as model:
        batch = model.predict_all({"frames": frames[:3], "h": state[:3]})  # three samples, one call each
        assert batch["beats"].shape == (3, 40, 1)
        streamed = model.stream(pairs={"h": "hN"}).run({"frames": frames[:3]})
    np.testing.assert_allclose(streamed["beats"], np.stack(expected), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(streamed["hN"][-1], carried, rtol=1e-6, atol=1e-7)
    for fmt in ("tflite", "onnx", "executorch"):  # each INT8 artifact in its own runtime
        with edgekit.load(package, artifact=fmt) as model:
            assert model.predict_all({"frames": frames[:2], "h": state[:2]})["beats"].shape == (2, 40, 1)


def test_batch_axis_names_what_neither_the_graph_nor_the_data_can_tell(tmp_path):
    """A state whose every dimension is free ([?, ?, 8]): nothing in the graph says which axis is
    the batch, so it is taken batch-first and the data's layout is refused; --batch-axis says it."""
    state_on_axis_1_model(tmp_path / "vad.onnx", layers=None)
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (300, 16)).astype(np.float32)
    state = np.tanh(rng.normal(0, 1, (2, 300, 8))).astype(np.float32)
    np.savez(tmp_path / "calibration.npz", x=x, state=state)
    common = ("package", tmp_path / "vad.onnx", "-c", tmp_path / "calibration.npz", "--format", "onnx",
              "--no-also-float", "--no-auto-fix", "--allow-accuracy-drop")
    unsaid = edgekit_cli(*common, "-o", tmp_path / "bad")  # fed as it was read, the batch would be the layers
    assert unsaid.returncode == 1 and "array 'state' holds its samples on axis 1, but the model takes 'state' " \
        "batch-first" in unsaid.stderr and "--batch-axis state=1" in unsaid.stderr, unsaid.stderr[-2000:]
    wrong = edgekit_cli(*common, "-o", tmp_path / "bad", "--batch-axis", "nosuch=1")
    assert wrong.returncode != 0 and "--batch-axis names nosuch" in wrong.stderr and "state" in wrong.stderr
    result = edgekit_cli(*common, "-o", tmp_path / "out", "--batch-axis", "state=1", "--batch-axis", "stateN=1")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "vad.edgekit" / "manifest.json").read_text())
    assert manifest["source"]["rewrites"]["batch_axes"] == {"state": 1, "stateN": 1}
    assert [i["shape"] for i in manifest["inputs"]] == [[-1, 16], [-1, -1, 8]]
