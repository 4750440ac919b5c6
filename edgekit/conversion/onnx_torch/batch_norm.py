"""BatchNormalization after a Conv with constant weights, folded into that Conv.

Exporters such as paddle2onnx write inference-time batch norm as its own node. Rebuilt as
``F.batch_norm`` after a convolution whose weight is a buffer of the rebuilt module, PT2E's
conv+BN fusion (ExecuTorch, litert-torch) re-registers the fused weight as a parameter under the
buffer's name and fails ("attribute 'const_6' already exists"). Folded here, the convolution
carries the normalization in its weight and bias, as ONNX Runtime's own optimizer does it; the
function is the same, one op fewer, and no converter has a batch norm left to fuse.
"""

from __future__ import annotations

import numpy as np

from .graph import Node


def fold_batch_norms(nodes: list[Node], constants: dict[str, np.ndarray], graph_outputs: set[str]) -> list[Node]:
    """``nodes`` with every inference BatchNormalization that follows a foldable Conv or
    ConvTranspose (its only consumer, constant float weights) merged into that convolution."""
    consumers: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            consumers[name] = consumers.get(name, 0) + 1
    producer = {o: index for index, node in enumerate(nodes) for o in node.outputs if o}
    folded: dict[int, Node] = {}
    dropped: set[int] = set()
    for index, norm in enumerate(nodes):
        if norm.op != "BatchNormalization" or len([o for o in norm.outputs if o]) != 1:
            continue
        source = producer.get(norm.inputs[0])
        if source is None or source in folded or consumers.get(norm.inputs[0]) != 1 \
                or norm.inputs[0] in graph_outputs:
            continue
        merged = _merged(nodes[source], norm, constants)
        if merged is not None:
            folded[source] = merged
            dropped.add(index)
    return [folded.get(i, node) for i, node in enumerate(nodes) if i not in dropped]


def _merged(conv: Node, norm: Node, constants: dict[str, np.ndarray]) -> Node | None:
    """The convolution with ``norm`` folded in (new constants added), or None when it cannot be."""
    if conv.op not in ("Conv", "ConvTranspose") or len(conv.inputs) < 2:
        return None
    weight = constants.get(conv.inputs[1])
    params = [constants.get(name) for name in norm.inputs[1:5]]
    if weight is None or weight.dtype != np.float32 or any(p is None for p in params):
        return None
    scale, shift, mean, variance = (np.asarray(p, np.float64).reshape(-1) for p in params)  # type: ignore[union-attr]
    transposed = conv.op == "ConvTranspose"
    groups = int(conv.attrs.get("group", 1))
    channels = weight.shape[1] if transposed else weight.shape[0]
    if transposed and groups != 1 or any(p.size != channels for p in (scale, shift, mean, variance)):
        return None
    bias_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else ""
    bias = constants.get(bias_name) if bias_name else np.zeros(channels, np.float32)
    if bias is None or bias.size != channels:
        return None
    factor = scale / np.sqrt(variance + float(norm.attrs.get("epsilon", 1e-5)))
    shape = [1] * weight.ndim
    shape[1 if transposed else 0] = channels
    weight_name, bias_name = f"{conv.name}/folded_weight", f"{conv.name}/folded_bias"
    constants[weight_name] = (weight.astype(np.float64) * factor.reshape(shape)).astype(np.float32)
    constants[bias_name] = ((bias.astype(np.float64).reshape(-1) - mean) * factor + shift).astype(np.float32)
    return Node(conv.op, conv.name, [conv.inputs[0], weight_name, bias_name], list(norm.outputs), conv.attrs,
                conv.opset)
