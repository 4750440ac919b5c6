"""What a QDQ ``.onnx`` really computes in, read from its graph (``quantize_static`` leaves ops it
has no INT8 kernel for, such as LSTM, in float without a word: a model can be labelled INT8 and
keep nearly all its weights in float).

In a QDQ graph ONNX Runtime runs an op in INT8 when its inputs come from DequantizeLinear; a
compute op with a float input that does not (an activation, or a float weight initializer)
computes in float. Ops that only move or reshape data are neither. A *float tail* is a float op
whose results reach the graph outputs through float or data-movement ops only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...conversion.layer_names import layer_of
from ..precision import Precision

CONVERTING_OPS = {"QuantizeLinear", "DequantizeLinear"}
# data movement and shape bookkeeping: runs on whatever it is given, computes nothing
NEUTRAL_OPS = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Constant", "Cast",
               "Gather", "Slice", "Concat", "Split", "Expand", "Tile", "Pad", "Size", "ConstantOfShape", "Range",
               "DepthToSpace", "SpaceToDepth", "MaxPool", "GlobalMaxPool", "Resize", "Dropout", "OneHot",
               "Equal", "Less", "Greater", "Where", "Not", "And", "Or"}
TAIL_OPS = {"Softmax", "LogSoftmax", "Sigmoid", "Tanh", "LpNormalization", "Div", "Mul", "Add", "Sub", "Sqrt",
            "Pow", "ReduceSum", "ReduceL2", "ReduceMean", "Exp", "Max", "Min", "Clip"}
# an activation between an int8 op and its QuantizeLinear, which ONNX Runtime's QDQ fusions fold
# into the quantized output's range (a PyTorch QAT export writes Conv -> Relu -> QuantizeLinear)
FUSED_ACTIVATIONS = {"Relu", "Clip"}
_FLOAT = {1, 10, 11, 16}  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


# Ops that compute with weights: an artifact with none of them in integers is the float model
WEIGHTED_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "QLinearConv",
                "QLinearMatMul", "LSTM", "GRU", "RNN", "Gather"}


def analyse(path: str, layer_names: list[str] | tuple[str, ...] = ()) -> Precision:
    """Every compute node of the QDQ model at ``path`` by precision, float tails marked, and the
    initializers sized by type (their external data is not read: sizes come from the shapes)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    try:  # value types of intermediate tensors: integer index/shape arithmetic is not float compute
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - unknown types then count as float, never as int8
        pass
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    value_types = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}
    produced_by = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[int]] = {}
    for position, node in enumerate(graph.node):
        for name in node.input:
            consumers.setdefault(name, []).append(position)
    outputs = {o.name for o in graph.output}

    def float_input(name: str) -> bool:
        """A float value reaching the op other than through DequantizeLinear."""
        if not name:
            return False
        if name in initializers:
            return initializers[name].data_type in _FLOAT and len(initializers[name].dims) > 0
        source = produced_by.get(name)
        if source is not None and source.op_type in CONVERTING_OPS:
            return False
        if source is not None and source.op_type in NEUTRAL_OPS:
            return any(float_input(i) for i in source.input[:1])  # the data input, not shapes/indices
        return value_types.get(name, 1) in _FLOAT

    kinds = _kinds(graph, float_input, consumers)
    tail = [False] * len(graph.node)
    for position in range(len(graph.node) - 1, -1, -1):  # nodes are stored in topological order
        node = graph.node[position]
        eligible = kinds[position] == "" or (kinds[position] == "float" and node.op_type in TAIL_OPS)
        results = [o for o in node.output if o]
        tail[position] = eligible and bool(results) and all(
            all(tail[c] for c in consumers.get(o, [])) and (bool(consumers.get(o)) or o in outputs) for o in results)
    sixteen = (onnx.TensorProto.INT16, onnx.TensorProto.UINT16)
    # a node computes in 16 bits when it reads a 16-bit activation and either has weights (int16
    # activations x int8 weights: the layers given --int16-activations, whose input is 16-bit
    # whatever their fused output is) or writes 16 bits itself. The softmax after such a layer
    # reads its 16-bit output but has no weights and writes int8: an int8 op, never a 16-bit
    # layer nobody asked for.
    wide = {node.output[0] for node in graph.node if node.op_type == "DequantizeLinear" and node.output
            and _zero_point_type(node, initializers) in sixteen}
    written_wide = {node.input[0] for node in graph.node if node.op_type == "QuantizeLinear" and node.input
                    and _zero_point_type(node, initializers) in sixteen}
    found = Precision()
    for position, node in enumerate(graph.node):
        if kinds[position] == "int8":
            found.int8_ops += 1
            found.int8_weighted_ops += node.op_type in WEIGHTED_OPS
            if any(name in wide for name in node.input) and (
                    node.op_type in WEIGHTED_OPS or any(o in written_wide for o in node.output)):
                layer = (layer_of(node.name, list(layer_names)) if layer_names else _layer(node.name)) or node.op_type
                found.int16_ops.append({"op": node.op_type, "layer": layer, "tensor": node.name})
        elif kinds[position] == "float":
            layer = (layer_of(node.name, list(layer_names)) if layer_names else _layer(node.name)) or node.op_type
            found.float_ops.append({"op": node.op_type, "layer": layer, "tensor": node.name,
                                    "tail": tail[position]})
    quant_params = {name for node in graph.node if node.op_type in CONVERTING_OPS for name in node.input[1:]}
    for tensor in graph.initializer:
        if tensor.name in quant_params:
            continue  # scales and zero points describe the weights; they are not weights
        size = int(np.prod(tensor.dims)) * _itemsize(tensor.data_type) if len(tensor.dims) else 0
        if tensor.data_type in _FLOAT:
            found.float_weight_bytes += size
        else:
            found.int8_weight_bytes += size
    return found


def _kinds(graph: Any, float_input: Any, consumers: dict[str, list[int]]) -> list[str]:
    """Each node's precision: "int8", "float" or "" (converting, data movement, a fused activation)."""
    kinds: list[str] = []  # "int8", "float" or "" (converting / neutral)
    kind_of: dict[str, str] = {}  # output name -> its node's kind
    for node in graph.node:
        if node.op_type in CONVERTING_OPS or node.op_type in NEUTRAL_OPS:
            kinds.append("")
        elif node.op_type in FUSED_ACTIVATIONS and node.input and kind_of.get(node.input[0]) == "int8" and (
                readers := consumers.get(node.output[0])) and all(graph.node[c].op_type == "QuantizeLinear" for c in readers):
            kinds.append("")  # int8 op -> Relu/Clip -> QuantizeLinear: ONNX Runtime folds it into the op's output range
        else:
            kinds.append("float" if any(float_input(i) for i in node.input) else "int8")
        for out in node.output:
            kind_of[out] = kinds[-1]
    return kinds


def _zero_point_type(node: object, initializers: dict) -> int | None:
    """The element type of a Q/DQ node's zero point: the integer type it converts to or from."""
    inputs = list(node.input)  # type: ignore[attr-defined]
    if len(inputs) < 3 or inputs[2] not in initializers:
        return None
    return int(initializers[inputs[2]].data_type)


def _layer(node_name: str) -> str:
    """The layer a node belongs to, as exporters name nodes (``/layer/op``, ``model/layer/op``)."""
    parts = [p for p in node_name.split("/") if p]
    return parts[-2] if len(parts) >= 2 else node_name


def _itemsize(data_type: int) -> int:
    from onnx import helper

    try:
        return int(np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize)
    except (KeyError, TypeError, ValueError):
        return 1
