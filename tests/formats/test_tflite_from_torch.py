"""TFLite from a PyTorch module (litert-torch): an op it leaves in float is named by the user's
layer, never by edgekit's wrapper module."""

from __future__ import annotations

import pytest

from edgekit.formats.tflite.from_torch import torch_layer

WRAPPER = "edgekit.formats.tflite.from_torch.convert_torch.<locals>.Named"


@pytest.mark.parametrize("tensor, layer", [
    # as litert-torch 0.x names them: the wrapper, the user's model, then its submodules
    (f"{WRAPPER}/edgekit_model_m.Net_inner;3", "Net.forward"),
    (f"{WRAPPER}/edgekit_model_m.Net_inner/torch.nn.modules.linear.Linear_head;1", "head (Linear)"),
    (f"{WRAPPER}/m.Net_inner/m.Block_blocks_0/torch.nn.modules.conv.Conv1d_conv_1;2", "blocks_0.conv_1 (Conv1d)"),
    (f"{WRAPPER}/edgekit_model_m.Net_inner;;{WRAPPER}/edgekit_model_m.Net_inner/torch.nn.modules.conv.Conv1d_conv;",
     "Net.forward"),
    ("serving_default_output_output", "serving_default_output_output"),  # not below the wrapper: as named
])
def test_a_litert_torch_tensor_is_named_by_the_users_layer(tensor, layer):
    assert torch_layer(tensor) == layer
    assert "<locals>" not in torch_layer(tensor)

