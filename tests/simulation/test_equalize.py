"""Cross-layer equalization rescales a convolution pair so an outlier channel is written at its
neighbours' size, with the float function unchanged; what it cannot rescale exactly it leaves."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.simulation.equalize import equalize


def _pair(folder, between: str = "Relu", depthwise: bool = False, shared: bool = False, external: bool = False):
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 8).astype(np.float32)
    w1[:2] *= 50  # two outlier channels
    b1[:2] *= 50
    w2 = (rng.normal(0, 0.3, (8, 1, 3, 3)) if depthwise else rng.normal(0, 0.3, (4, 8, 3, 3))).astype(np.float32)
    if depthwise:
        w2[:2] /= 50
    else:
        w2[:, :2] /= 50
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4)]
    if between == "Clip":  # ReLU6: not positively homogeneous, so not rescaled
        inits += [numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
        nodes.append(helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="act"))
    else:
        nodes.append(helper.make_node(between, ["c1"], ["a1"], name="act"))
    nodes.append(helper.make_node("Conv", ["a1", "w2"], ["y"], name="conv2", pads=[1] * 4,
                                  **({"group": 8} if depthwise else {})))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if shared:  # the first conv's output read twice: rescaling it would change the other reader
        nodes.append(helper.make_node("Relu", ["c1"], ["z"], name="other"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "pair.onnx"
    if external:
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="pair.data",
                  size_threshold=0)
    else:
        onnx.save(model, path)
    return path


def _run(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("external", [False, True])
def test_an_outlier_channel_pair_is_equalized_with_the_float_function_unchanged(tmp_path, depthwise, external):
    source = _pair(tmp_path, depthwise=depthwise, external=external)
    found = equalize(str(source), str(tmp_path / "eq.onnx"))
    assert found["pairs"] == [["conv1", "conv2"]] and found["largest_factor"] > 10
    x = np.random.default_rng(1).normal(size=(1, 3, 8, 8)).astype(np.float32)
    assert np.allclose(_run(tmp_path / "eq.onnx", x), _run(source, x), rtol=1e-4, atol=1e-5)
    weights = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "eq.onnx")).graph.initializer}
    ranges = np.abs(weights["w1"].reshape(8, -1)).max(axis=1)
    assert ranges.max() / ranges.min() < 10  # the outlier channels written at their neighbours' size
    assert [n.name for n in onnx.load(str(tmp_path / "eq.onnx")).graph.node] == ["conv1", "act", "conv2"]


@pytest.mark.parametrize("case", [{"between": "Clip"}, {"shared": True}])
def test_what_cannot_be_rescaled_exactly_is_left_as_it_is(tmp_path, case):
    source = _pair(tmp_path, **case)
    found = equalize(str(source), str(tmp_path / "eq.onnx"))
    assert found["pairs"] == []
