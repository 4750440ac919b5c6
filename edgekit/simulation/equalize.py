"""Cross-layer equalization: a repair that keeps every layer in int8 (Nagel et al., 2019; AIMET's
and NNCF's CLE), tried before the search takes layers out of int8.

Where one convolution's output feeds the next convolution alone, through nothing or a positively
homogeneous activation (Relu, PRelu, LeakyRelu: f(s x) = s f(x) for s > 0), channel c of the
first can be divided by s_c and the second's input channel c multiplied by s_c: the float function
is the same. Choosing s_c = sqrt(r1_c / r2_c), where r1_c is the range of the first's weights for
output channel c and r2_c the range of the second's for input channel c, equalizes both: a channel
a network writes 30x larger than its neighbours (an outlier channel, which one int8 scale per
tensor cannot hold beside the others) is written at their size, and the reader takes the factor.

Child side: reads and writes ONNX with ``onnx``; only initializer values change, so every node,
tensor and layer name stays as it was (a precision plan names the same layers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

HOMOGENEOUS = {"Relu", "PRelu", "LeakyRelu"}  # f(s x) = s f(x) for s > 0 (PRelu's slope is per channel)
INLINE_BYTES = 1800 * 2**20  # under protobuf's 2 GiB: the equalized graph is written in one file
MIN_GAIN = 2.0  # a pair is rescaled only where its channels' ranges differ this much (else nothing to gain)


def equalize(float_onnx: str, output: str, rounds: int = 4) -> dict[str, Any]:
    """Write ``float_onnx`` with every equalizable pair of convolutions rescaled to ``output``;
    the pairs rescaled (first, second) and the largest factor applied, ``rounds`` passes over
    the model (a rescale changes the ranges of the pairs beside it)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(float_onnx, load_external_data=False)
    if any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer):
        if model.ByteSize() + sum(Path(float_onnx).parent.joinpath(e.value).stat().st_size
                                  for init in model.graph.initializer for e in init.external_data
                                  if e.key == "location") > INLINE_BYTES:
            return {"pairs": [], "largest_factor": 1.0, "why_not": "its weights are over 1.8 GB, stored outside the file"}
        model = onnx.load(float_onnx)  # the weights read in: the equalized graph is written as one file
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    uses = {name: len(found) for name, found in consumers.items()}
    outputs = {o.name for o in graph.output}
    pairs = [pair for node in graph.node if (pair := _pair(node, consumers, weights, uses, outputs))]
    values = {name: numpy_helper.to_array(weights[name]).astype(np.float64) for first, second, *_ in pairs
              for name in (*first.input[1:3], second.input[1]) if name in weights}
    largest, rescaled, scales = 1.0, set(), {}
    for _ in range(rounds):
        for first, second, _ in pairs:
            scale = _equalize(first, second, values)
            if scale is not None:
                largest = max(largest, float(scale.max() / max(scale.min(), 1e-12)))
                key = (first.name or first.output[0], second.name or second.output[0])
                rescaled.add(key)
                scales[key] = scales.get(key, 1.0) * scale
    for name, array in values.items():
        weights[name].CopyFrom(numpy_helper.from_array(array.astype(numpy_helper.to_array(weights[name]).dtype), name))
    onnx.save(model, output)
    by_key = {(first.name or first.output[0], second.name or second.output[0]): (first, second) for first, second, _
              in pairs}
    return {"pairs": sorted([list(p) for p in rescaled]), "largest_factor": round(float(largest), 3),
            "scales": [_rescale_record(*by_key[key], scale) for key, scale in sorted(scales.items())]}


def _rescale_record(first: Any, second: Any, scale: np.ndarray) -> dict[str, Any]:
    """One pair's whole rescale, for the source's own model (``equalize_source``): channel c of
    ``first`` (its weights, ``weight``, and bias, ``bias``) divided by ``scale[c]``, input channel
    c of ``second`` (``reader_weight``; a depthwise reader's channel) multiplied by it."""
    return {"first": first.name or first.output[0], "second": second.name or second.output[0],
            "weight": first.input[1], "bias": first.input[2] if len(first.input) > 2 else "",
            "depthwise_first": _group(first) != 1,
            "reader_weight": second.input[1], "depthwise_reader": _group(second) != 1,
            "scale": [float(v) for v in scale]}


def _pair(node: Any, consumers: dict[str, list[Any]], weights: dict[str, Any], uses: dict[str, int],
          outputs: set[str]) -> tuple[Any, Any, Any] | None:
    """(first conv, second conv, the activation between or None) where ``node`` is the first."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in weights or uses.get(node.input[1]) != 1:
        return None
    if len(node.input) > 2 and node.input[2] and (node.input[2] not in weights or uses.get(node.input[2]) != 1):
        return None
    tensor, between = node.output[0], None
    readers = consumers.get(tensor, [])
    if tensor in outputs or len(readers) != 1:
        return None
    if readers[0].op_type in HOMOGENEOUS:
        between = readers[0]
        if between.op_type == "PRelu" and (len(between.input) < 2 or between.input[1] not in weights):
            return None
        tensor = between.output[0]
        readers = consumers.get(tensor, [])
        if tensor in outputs or len(readers) != 1:
            return None
    second = readers[0]
    if second.op_type != "Conv" or second.input[0] != tensor or len(second.input) < 2 \
            or second.input[1] not in weights or uses.get(second.input[1]) != 1:
        return None
    if _group(node) != 1 and _group(node) != _out_channels(node, weights):  # grouped, not depthwise: skip
        return None
    return node, second, between


def _group(node: Any) -> int:
    return next((int(a.i) for a in node.attribute if a.name == "group"), 1)


def _out_channels(node: Any, weights: dict[str, Any]) -> int:
    return int(weights[node.input[1]].dims[0])


def _equalize(first: Any, second: Any, values: dict[str, np.ndarray]) -> np.ndarray | None:
    """Rescale one pair in ``values``; the scale applied per channel, or None where nothing changed."""
    w1, w2 = values[first.input[1]], values[second.input[1]]
    channels = w1.shape[0]
    group = _group(second)
    if group == 1:
        if w2.shape[1] != channels:
            return None
        r2 = np.abs(w2).max(axis=tuple(i for i in range(w2.ndim) if i != 1))
    elif group == channels and w2.shape[0] % channels == 0 and w2.shape[1] == 1:  # depthwise reader
        r2 = np.abs(w2.reshape(channels, -1)).max(axis=1)
    else:
        return None
    r1 = np.abs(w1.reshape(channels, -1)).max(axis=1)
    live = (r1 > 0) & (r2 > 0)
    if not live.any():
        return None
    ratio = np.where(live, r1 / np.where(live, r2, 1.0), 1.0)
    spread = ratio[live].max() / ratio[live].min()
    if spread < MIN_GAIN:
        return None
    scale = np.where(live, np.sqrt(ratio), 1.0)  # channel c of the first divided by scale[c]
    shape1 = (channels,) + (1,) * (w1.ndim - 1)
    values[first.input[1]] = w1 / scale.reshape(shape1)
    if len(first.input) > 2 and first.input[2] in values:
        values[first.input[2]] = values[first.input[2]] / scale
    if group == 1:
        values[second.input[1]] = w2 * scale.reshape((1, channels) + (1,) * (w2.ndim - 2))
    else:
        per = w2.shape[0] // channels
        values[second.input[1]] = w2 * np.repeat(scale, per).reshape((w2.shape[0],) + (1,) * (w2.ndim - 1))
    return scale
