"""Output kinds: from the graph first (ONNX built here with onnx.helper), then from the values."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from edgekit.kinds import infer
from edgekit.comparison.structure import describe_onnx_outputs


def _yolo_graph(transpose: bool) -> onnx.ModelProto:
    """boxes [N, 4, A] (values) and sigmoid scores [N, 3, A] joined on axis 1, maybe transposed."""
    nodes = [helper.make_node("Mul", ["boxes_in", "scale"], ["boxes"], name="box_scale"),
             helper.make_node("Sigmoid", ["logits"], ["scores"], name="score_sigmoid"),
             helper.make_node("Concat", ["boxes", "scores"], ["joined"], axis=1, name="head_concat")]
    out = "joined"
    if transpose:
        nodes.append(helper.make_node("Transpose", ["joined"], ["output0"], perm=[0, 2, 1], name="to_rows"))
        out = "output0"
    graph = helper.make_graph(
        nodes, "yolo",
        [helper.make_tensor_value_info("boxes_in", TensorProto.FLOAT, ["N", 4, "A"]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3, "A"])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [320.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _yolo_values(transpose: bool) -> np.ndarray:
    rng = np.random.default_rng(0)
    joined = np.concatenate([rng.uniform(0, 320, (20, 4, 50)), rng.uniform(0, 1, (20, 3, 50))], axis=1)
    return joined.transpose(0, 2, 1) if transpose else joined


def test_a_yolo_concat_is_detections_on_its_real_axis_in_either_layout():
    for transpose, name, axis in ((False, "joined", 1), (True, "output0", 2)):
        structure = describe_onnx_outputs(_yolo_graph(transpose))[name]
        assert structure["op"] == "concat" and structure["axis"] == axis and structure["node"] == "head_concat"
        assert [p["op"] for p in structure["parts"]] == ["values", "sigmoid"]
        kind = infer(name, _yolo_values(transpose), structure)
        assert kind.kind == "detections:yolo" and kind.axis == axis and kind.source == "graph"
        assert [(g.start, g.stop) for g in kind.groups] == [(0, 4), (4, 7)] and kind.groups_axis == axis
        assert kind.joined_by == "head_concat"
        assert "from Concat(axis=%d) of 4 box rows and 3 sigmoid rows" % axis in kind.evidence


def test_sigmoid_bins_softmax_classes_maps_and_embeddings():
    rng = np.random.default_rng(1)
    bins = _pitch_bins(rng, 30)
    assert infer("pitch", bins, {"op": "sigmoid"}).kind == "bins"
    probs = rng.dirichlet(np.ones(10), 30)
    assert infer("p", probs, {"op": "softmax", "axis": 1}).kind == "classes"
    assert infer("p", probs, None).kind == "classes"  # rows that sum to 1: the values say it
    mask = rng.uniform(0, 1, (5, 1, 16, 16))
    kind = infer("mask", mask, {"op": "sigmoid"})
    assert kind.kind == "segmentation" and kind.axis == 1 and not kind.groups
    seg = np.moveaxis(rng.dirichlet(np.ones(4), (5, 8, 8)), -1, 1)
    assert infer("seg", seg, {"op": "softmax", "axis": 1}).kind == "segmentation"
    vectors = rng.normal(size=(30, 64))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert infer("e", vectors, {"op": "l2norm", "axis": 1}).kind == "embedding"
    assert infer("e", vectors, None).kind == "embedding"  # unit-norm rows
    # landmarks: no softmax, no labels, no unit norm: plain values, never "top-1"
    assert infer("landmarks", rng.uniform(0, 96, (30, 10)), {"op": "values"}).kind == "values"
    assert infer("logits", rng.normal(size=(30, 5)), None, labelled=True).kind == "classes"
    assert infer("x", rng.normal(size=(30, 5)), None, given="embedding").kind == "embedding"


def test_parts_of_one_op_and_magnitude_are_one_group():
    """Three score heads joined on the class axis are one quantity; a pixel block next to them is not."""
    rng = np.random.default_rng(2)
    scores = rng.uniform(0, 1, (10, 9))
    parts = [{"size": 3, "op": "sigmoid"}] * 3
    kind = infer("s", scores, {"op": "concat", "axis": 1, "node": "c", "parts": parts})
    assert kind.groups == () and kind.kind == "bins" or kind.groups == ()
    mixed = np.concatenate([rng.uniform(0, 300, (10, 2)), scores], axis=1)
    kind = infer("m", mixed, {"op": "concat", "axis": 1, "node": "c",
                              "parts": [{"size": 2, "op": "values"}, *parts]})
    assert [(g.start, g.stop) for g in kind.groups] == [(0, 2), (2, 11)] and kind.kind == "values"
    # a part of unknown size is what is left of the axis
    kind = infer("m", mixed, {"op": "concat", "axis": 1, "node": "c",
                              "parts": [{"size": None, "op": "values"}, {"size": 9, "op": "sigmoid"}]})
    assert [(g.start, g.stop) for g in kind.groups] == [(0, 2), (2, 11)]


def test_a_softmax_before_a_flatten_still_makes_classes():
    """SqueezeNet-style: Softmax over [N, C, 1, 1], then Flatten to [N, C]."""
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["p"], axis=1, name="probs"),
         helper.make_node("Flatten", ["p"], ["scores"], axis=1, name="flat")],
        "squeeze", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 10, 1, 1])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)])
    structure = describe_onnx_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))["scores"]
    assert structure == {"op": "softmax", "axis": None, "node": "probs"}
    rng = np.random.default_rng(3)
    kind = infer("scores", rng.dirichlet(np.ones(10), 20), structure)
    assert kind.kind == "classes" and kind.axis == 1 and kind.source == "graph"


def _pitch_bins(rng, n, units=360):
    """A pitch head's output: one Gaussian peak per frame over ordered bins, four decades above the quietest."""
    centre = rng.uniform(20, units - 20, (n, 1))
    logits = -6 + 12 * np.exp(-0.5 * ((np.arange(units)[None, :] - centre) / 2.0) ** 2) + rng.normal(0, 0.3, (n, units))
    return 1 / (1 + np.exp(-logits))


def test_a_few_sigmoid_units_are_never_bins():
    """Three sigmoid outputs: the peak rule is vacuous (3 bins are always within one bin of each
    other). A regression squashed into 0..1 is values; decisive ones are independent labels."""
    rng = np.random.default_rng(3)
    regression = rng.uniform(0.1, 0.9, (80, 3))
    kind = infer("pose", regression, {"op": "sigmoid", "node": "head"})
    assert kind.kind == "values" and "3 units (bins need >= 16)" in kind.evidence
    labels = 1 / (1 + np.exp(-rng.normal(0, 6, (80, 6))))  # trained multi-label head: confident yes/no
    kind = infer("tags", labels, {"op": "sigmoid", "node": "head"})
    assert kind.kind == "multilabel" and kind.axis == 1 and "6 independent labels" in kind.evidence


def test_many_sigmoid_units_without_one_peak_are_labels_not_bins():
    rng = np.random.default_rng(4)
    tags = (rng.uniform(0, 1, (60, 40)) < 0.2) * 0.97 + 0.01  # several labels on at scattered positions
    assert infer("tags", tags, {"op": "sigmoid"}).kind == "multilabel"
    assert infer("pitch", _pitch_bins(rng, 60, 64), {"op": "sigmoid"}).kind == "bins"
