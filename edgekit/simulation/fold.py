"""BatchNormalization folded into the convolution before it, in the simulation's float graph.

ONNX Runtime's quantizer folds it before quantizing (``quant_pre_process``), and the TFLite and
PyTorch converters fold it too, so no INT8 artifact quantizes a convolution's output and then
its normalized copy: a simulation that did would add a quantization no format has (and
predict worse than the formats do), and cross-layer equalization would find no convolution
pair through it. The folded graph computes the same function; every other node keeps its name,
and the convolution keeps its own, so a precision plan names the same layers.

Child side: reads and writes ONNX with ``onnx``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

INLINE_BYTES = 1800 * 2**20  # under protobuf's 2 GiB: the folded graph is written in one file


def fold_batchnorm(float_onnx: str, output: str) -> dict[str, Any]:
    """Write ``float_onnx`` with each Conv -> BatchNormalization pair folded into the Conv to
    ``output``; the BatchNormalization nodes folded (none: nothing written)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(float_onnx, load_external_data=False)
    if any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer):
        if model.ByteSize() + sum(Path(float_onnx).parent.joinpath(e.value).stat().st_size
                                  for init in model.graph.initializer for e in init.external_data
                                  if e.key == "location") > INLINE_BYTES:
            return {"folded": [], "why_not": "its weights are over 1.8 GB, stored outside the file"}
        model = onnx.load(float_onnx)
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    writers = {out: node for node in graph.node for out in node.output}
    outputs = {o.name for o in graph.output}
    folded, removed = [], []
    for bn in graph.node:
        conv = writers.get(bn.input[0]) if bn.op_type == "BatchNormalization" and bn.input else None
        if conv is None or not _foldable(conv, bn, weights, uses, outputs):
            continue
        scale, shift, mean, var = (numpy_helper.to_array(weights[n]).astype(np.float64) for n in bn.input[1:5])
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        factor = scale / np.sqrt(var + eps)
        w = numpy_helper.to_array(weights[conv.input[1]])
        b = numpy_helper.to_array(weights[conv.input[2]]).astype(np.float64) if len(conv.input) > 2 and conv.input[2] \
            else np.zeros(w.shape[0])
        new_w = (w.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        new_b = ((b - mean) * factor + shift).astype(w.dtype)
        weights[conv.input[1]].CopyFrom(numpy_helper.from_array(new_w, conv.input[1]))
        bias_name = conv.input[2] if len(conv.input) > 2 and conv.input[2] else f"{conv.input[1]}__folded_bias"
        if bias_name in weights:
            weights[bias_name].CopyFrom(numpy_helper.from_array(new_b, bias_name))
        else:
            graph.initializer.append(numpy_helper.from_array(new_b, bias_name))
            if len(conv.input) > 2:
                conv.input[2] = bias_name
            else:
                conv.input.append(bias_name)
        conv.output[0] = bn.output[0]  # the Conv writes what its readers read
        folded.append(bn.name or bn.output[0])
        removed.append(bn)
    if not folded:
        return {"folded": []}
    for bn in removed:
        graph.node.remove(bn)
    onnx.save(model, output)
    return {"folded": folded}


def _foldable(conv: Any, bn: Any, weights: dict[str, Any], uses: dict[str, int], outputs: set[str]) -> bool:
    """A Conv whose output only this inference-mode BatchNormalization reads, its weights (and
    bias) its own initializers, the BatchNormalization's four parameters initializers."""
    if conv.op_type != "Conv" or len(bn.output) != 1 or len(bn.input) < 5:
        return False
    if conv.output[0] in outputs or uses.get(conv.output[0]) != 1 or any(n not in weights for n in bn.input[1:5]):
        return False
    if len(conv.input) < 2 or conv.input[1] not in weights or uses.get(conv.input[1]) != 1:
        return False
    if len(conv.input) > 2 and conv.input[2] and (conv.input[2] not in weights or uses.get(conv.input[2]) != 1):
        return False
    channels = int(weights[conv.input[1]].dims[0])
    return all(list(weights[n].dims) == [channels] for n in bn.input[1:5]) and \
        weights[conv.input[1]].data_type in (1, 11)  # float, double
