"""The simulation's float graph has each Conv -> BatchNormalization folded, as every format's
converter folds it: the same function, one node fewer, the convolution's name kept; and an
equalizable pair appears through it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from edgekit.simulation.equalize import equalize
from edgekit.simulation.fold import fold_batchnorm


def _conv_bn_relu_conv(path, bias: bool) -> None:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32) * np.r_[40, 40, [1] * 6].astype(np.float32),
                                     "gamma"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "beta"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32), "var"),
             numpy_helper.from_array((rng.normal(0, 0.3, (4, 8, 3, 3)) * np.r_[[1 / 40] * 2, [1] * 6].reshape(1, 8, 1, 1))
                                     .astype(np.float32), "w2")]
    conv1 = ["x", "w1"] + (["b1"] if bias else [])
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b1"))
    nodes = [helper.make_node("Conv", conv1, ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["n1"], name="bn1",
                              epsilon=1e-3),
             helper.make_node("Relu", ["n1"], ["a1"], name="act"),
             helper.make_node("Conv", ["a1", "w2"], ["y"], name="conv2", pads=[1] * 4)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _run(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]


def test_a_batch_norm_is_folded_into_its_convolution_with_the_function_unchanged(tmp_path):
    x = np.random.default_rng(1).normal(size=(4, 3, 8, 8)).astype(np.float32)
    for bias in (True, False):
        _conv_bn_relu_conv(tmp_path / "g.onnx", bias)
        found = fold_batchnorm(str(tmp_path / "g.onnx"), str(tmp_path / "folded.onnx"))
        assert found["folded"] == ["bn1"]
        assert [n.name for n in onnx.load(str(tmp_path / "folded.onnx")).graph.node] == ["conv1", "act", "conv2"]
        assert np.allclose(_run(tmp_path / "folded.onnx", x), _run(tmp_path / "g.onnx", x), rtol=1e-4, atol=1e-4)
        # through the batch norm no pair is seen; folded, the outlier channels are equalized
        assert equalize(str(tmp_path / "g.onnx"), str(tmp_path / "eq.onnx"))["pairs"] == []
        assert equalize(str(tmp_path / "folded.onnx"), str(tmp_path / "eq.onnx"))["pairs"] == [["conv1", "conv2"]]


def test_a_graph_without_a_foldable_batch_norm_is_left_as_it_is(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="act")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph), tmp_path / "g.onnx")
    assert fold_batchnorm(str(tmp_path / "g.onnx"), str(tmp_path / "folded.onnx")) == {"folded": []}
    assert not (tmp_path / "folded.onnx").exists()
