"""Histogram calibration (percentile, entropy) held every sample's activations at once (killed at
21 GB on a speech model); above a memory bound it runs in strides and holds one stride's."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.formats.onnx import convert as build

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _conv_onnx(path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_strides_are_equal_and_at_least_as_many_as_asked():
    assert build.histogram_stride(200, 8) == 25 and build.histogram_stride(199, 3) == 1  # a prime: one at a time
    assert build.histogram_stride(300, 11) == 25 and build.histogram_stride(10, 1) == 10


def test_activation_bytes_come_from_the_inferred_shapes(tmp_path):
    _conv_onnx(tmp_path / "conv.onnx")
    assert build.activation_bytes(str(tmp_path / "conv.onnx")) == 2 * 4 * 4 * 16 * 16  # h and y, float32


def test_a_percentile_calibration_over_the_bound_runs_in_strides_and_matches(tmp_path, monkeypatch):
    _conv_onnx(tmp_path / "conv.onnx")
    x = np.random.default_rng(1).normal(0, 1, (40, 1, 1, 16, 16)).astype(np.float32)[:, 0]
    settings = {"calibration_method": "percentile", "max_intermediate_outputs": None, "excluded": []}
    whole = build._quantize_static(str(tmp_path / "conv.onnx"), str(tmp_path / "whole.onnx"), {"x": x}, ["x"],
                                   "s8", False, settings)
    monkeypatch.setattr(build, "HISTOGRAM_MEMORY", 4096)  # a stride holds a few samples' 8 KiB
    strided = build._quantize_static(str(tmp_path / "conv.onnx"), str(tmp_path / "strided.onnx"), {"x": x}, ["x"],
                                     "s8", False, settings)
    assert whole["outputs"] == strided["outputs"]

    def scales(path):
        model = onnx.load(str(path))
        found = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        return {name: float(v) for name, v in found.items() if name.endswith("_scale") and v.ndim == 0}

    one, many = scales(tmp_path / "whole.onnx"), scales(tmp_path / "strided.onnx")
    assert one.keys() == many.keys() and one
    for name in one:  # the same percentile ranges, up to histogram binning
        assert many[name] == pytest.approx(one[name], rel=0.15), name
