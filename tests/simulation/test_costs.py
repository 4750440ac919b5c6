"""Each layer's cost is its compute (multiply-accumulates, or output elements for one-per-element
ops), read from the float graph and one pass's shapes: the search weighs float layers by it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.packaging.search.cost import LayerCosts
from edgekit.simulation.costs import layer_costs, layer_links, node_costs
from edgekit.conversion.layer_names import LayerNames


def _graph() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")
    depthwise = numpy_helper.from_array(np.zeros((8, 1, 3, 3), np.float32), "dw")
    dense = numpy_helper.from_array(np.zeros((2048, 10), np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="stem/conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="stem/relu"),
             helper.make_node("Conv", ["r", "dw"], ["d"], name="dw/conv", pads=[1, 1, 1, 1], group=8),
             helper.make_node("Flatten", ["d"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "fc"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [weight, depthwise, dense])
    return helper.make_model(graph)


SHAPES = {"x": (1, 3, 16, 16), "c": (1, 8, 16, 16), "r": (1, 8, 16, 16), "d": (1, 8, 16, 16), "f": (1, 2048),
          "y": (1, 10)}


def test_convolutions_and_matrix_products_cost_their_multiply_accumulates():
    costs = node_costs(_graph(), SHAPES)
    assert costs["stem/conv"] == 2048 * 27  # each of 8x16x16 outputs reads 3 channels x 3x3
    assert costs["dw/conv"] == 2048 * 9  # depthwise: one channel per group
    assert costs["head"] == 10 * 2048
    assert costs["stem/relu"] == 2048  # one per element


def test_a_layer_costs_the_sum_of_its_nodes_and_a_plan_its_share():

    by_layer = layer_costs(_graph(), SHAPES, LayerNames(("stem", "dw", "head")).plan_layer)
    assert by_layer["stem"] == 2048 * 27 + 2048 and "flatten" not in by_layer
    costs = LayerCosts(by_layer)
    total = sum(by_layer.values())
    assert costs.share(["stem"]) == pytest.approx(by_layer["stem"] / total)
    assert costs.of("head (MatMul)") == by_layer["head"]  # a route's name with the op it became
    assert costs.of("elsewhere") == sorted(by_layer.values())[1]  # unknown: the median, neither free nor heaviest
    assert "of the model's compute" in costs.describe(["stem"])
    assert LayerCosts().of("anything") == 1.0 and LayerCosts().share(["stem"]) is None  # no costs: a count


def test_a_float_island_costs_its_boundaries_and_a_float_tail_grows_at_its_compute_alone():
    """Each tensor between two layers is a link (its elements per sample); a plan that leaves a
    layer float between int8 ones pays a quantize/dequantize on both sides, so the search ranks
    a layer by what it adds on top of the plan, not by its compute alone."""
    names = ["stem", "dw", "flatten", "head"]
    links = layer_links(_graph(), SHAPES, LayerNames(tuple(names)).plan_layer)
    assert sorted(links) == [("dw", "flatten", 2048.0), ("flatten", "head", 2048.0), ("stem", "dw", 2048.0)]
    costs = LayerCosts({"stem": 55296.0, "dw": 18432.0, "flatten": 2048.0, "head": 20480.0}, tuple(links))
    assert costs.total(["flatten"]) == 2048 + 2 * (2048 + 2048)  # an island: converted in and out
    assert costs.total(["head"]) == 20480 + 2 * 2048  # the tail: converted in once
    assert costs.added("flatten", ["head"]) == pytest.approx(2048)  # growing the tail: its compute, no new boundary
    assert costs.saved("flatten", ["flatten", "head"]) == pytest.approx(2048)
    assert costs.share(["flatten"]) == pytest.approx(2048 / sum(costs.costs.values()))  # the share: compute only
    assert LayerCosts(costs.costs).total(["flatten"]) == 2048  # without links, compute alone as before
