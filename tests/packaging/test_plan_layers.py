"""A user's plan is checked against the model's layers once it is described, before any format runs."""

from __future__ import annotations

import pytest

from edgekit.conversion import forms
from edgekit.errors import OptionError
from edgekit.formats.plan import FLOAT, INT16, PrecisionPlan
from edgekit.packaging.plan_layers import check_plan_layers
from edgekit.sources.description import SourceDescription, TensorDescription

ONNX_NODES = ("/model.0/conv/Conv", "/model.0/act/Sigmoid", "/model.22/Concat")


def _described(layers: tuple[str, ...], **extra) -> SourceDescription:
    return SourceDescription(inputs=(TensorDescription("images", (1, 3, 8, 8), "float32"),),
                             outputs=(TensorDescription("output0", (1, 5), "float32"),), layers=layers, **extra)


@pytest.mark.parametrize("name", ["/model.0/conv/Conv", "/model.0", "model.22", "output0",
                                  "/model.0/conv/Conv/weights_quant"])
def test_a_node_a_scope_a_converted_node_or_an_output_passes(name):
    check_plan_layers(PrecisionPlan({name: FLOAT}), _described(ONNX_NODES))


def test_an_unknown_layer_is_refused_with_the_nearest_names():
    with pytest.raises(OptionError, match=r"--int16-activations / --keep-float: the model has no layer "
                                          r"'/model.0/conv/Conv2', 'nope'") as caught:
        check_plan_layers(PrecisionPlan({"/model.0/conv/Conv2": INT16, "nope": FLOAT}), _described(ONNX_NODES))
    assert "/model.0/conv/Conv" in caught.value.hint and caught.value.exit_code == 2


@pytest.mark.parametrize("described", [_described(("", "/model.0/conv/Conv")),  # an unnamed node
                                       _described(()),  # a SavedModel: no layer list
                                       _described(ONNX_NODES, forms={forms.TORCH_PROGRAM: None})])
def test_sources_whose_routes_name_layers_otherwise_are_left_to_the_routes(described):
    check_plan_layers(PrecisionPlan({"head": FLOAT}), described)
