"""What a ``.tflite`` really computes in: ops and weights counted by precision, read from the
artifact itself (converters leave ops in float silently: a "INT8" LSTM can be all float).

An op computes in float when any of its operands or results is a float tensor (QUANTIZE and
DEQUANTIZE only convert). A *float tail* is a float op whose results reach the model's outputs
through float (or converting) ops only, and that is cheap next to the network: a final softmax,
sigmoid or normalisation, as other tools ship classifiers (and as ONNX Runtime and CoreML run
them). A tail is accepted by default and named in the precision label; float ops inside the
network are refused unless ``--allow-float-ops`` or ``--keep-float`` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...conversion.layer_names import layer_of
from ...conversion.messages import Message, PathRequest
from ...manifest import QuantParams
from ..precision import Precision

CONVERTING_OPS = {"QUANTIZE", "DEQUANTIZE"}
_NOT_COMPUTE = CONVERTING_OPS | {"DELEGATE"}
_FLOAT_TYPES = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)}
# Ops that compute with weights: an artifact with none of them in integers is the float model
WEIGHTED_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL", "CONV_3D",
                "CONV_3D_TRANSPOSE", "UNIDIRECTIONAL_SEQUENCE_LSTM", "EMBEDDING_LOOKUP"}
# Ops a float tail may hold: activations, normalisations and shape ops, never a layer with weights.
TAIL_OPS = {"SOFTMAX", "LOG_SOFTMAX", "LOGISTIC", "TANH", "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU", "HARD_SWISH",
            "ABS", "L2_NORMALIZATION", "RESHAPE", "SQUEEZE", "EXPAND_DIMS",
            "TRANSPOSE", "CONCATENATION", "MUL", "DIV", "ADD", "SUB", "SQRT", "RSQRT", "SQUARE", "EXP", "SUM",
            "MEAN", "MAXIMUM", "MINIMUM", "CAST", "SLICE", "STRIDED_SLICE", "PACK", "UNPACK", "SPLIT", "GATHER"}


# Under --full-integer only a final activation (and the shape ops around it) may stay float after
# the last INT8 op: a float RELU, ADD, SUM or DIV there is network arithmetic left in float.
FULL_INTEGER_TAIL_OPS = {"SOFTMAX", "LOG_SOFTMAX", "LOGISTIC", "TANH", "L2_NORMALIZATION", "RESHAPE", "SQUEEZE",
                         "EXPAND_DIMS", "TRANSPOSE", "CAST"}


def full_integer_float_ops(precision: Precision) -> list[dict[str, Any]]:
    """The float ops ``--full-integer`` refuses: every one inside the network, and a tail op that is
    not a final activation."""
    return precision.inner + [op for op in precision.tail if op["op"] not in FULL_INTEGER_TAIL_OPS]


@dataclass(frozen=True)
class OpRead(Message):
    """One op as LiteRT lists it: tensor indices and the element types it reads and writes."""

    op_name: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    operand_types: tuple[str, ...] = ()
    result_types: tuple[str, ...] = ()

    def types(self) -> list[np.dtype]:
        return [np.dtype(t) for t in self.operand_types + self.result_types]


@dataclass(frozen=True)
class TensorRead(Message):
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class SignatureTensor(Message):
    """A signature input or output with its quantization (scale 0: not quantized)."""

    name: str
    dtype: str
    scale: float
    zero_point: int

    def params(self) -> QuantParams:
        return QuantParams(self.name, self.dtype, self.scale, self.zero_point)


@dataclass(frozen=True)
class ArtifactGraph(Message):
    """A ``.tflite`` as LiteRT reads it: its ops in order, its tensors, the graph's inputs and
    outputs by index, the signature's tensors, and the tensor behind each signature output."""

    ops: tuple[OpRead, ...]
    tensors: tuple[TensorRead, ...]
    output_tensors: dict[str, str]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    signature_inputs: tuple[SignatureTensor, ...]
    signature_outputs: tuple[SignatureTensor, ...]


def read_artifact(request: PathRequest) -> ArtifactGraph:
    """Child side of ``artifact_graph``: the ops, tensors and signature of the ``.tflite`` at
    ``path`` as LiteRT reads them (its own kernels, no delegate)."""
    from .backend import _info, _signature_details, open_interpreter
    from .backend import output_tensor_names as output_tensors

    interpreter = open_interpreter(request.path, with_delegates=False)

    def types(values: Any) -> tuple[str, ...]:
        return tuple(np.dtype(t).name for t in list(values))

    ops = tuple(OpRead(op["op_name"], tuple(int(t) for t in op["inputs"]), tuple(int(t) for t in op["outputs"]),
                       types(op.get("operand_types", [])), types(op.get("result_types", [])))
                for op in interpreter._get_ops_details())  # the public API has no op list
    tensors = tuple(TensorRead(int(d["index"]), d["name"], tuple(int(v) for v in d["shape"]), np.dtype(d["dtype"]).name)
                    for d in interpreter.get_tensor_details())
    inputs, outputs = _signature_details(interpreter)

    def io(details: list[dict[str, Any]]) -> tuple[SignatureTensor, ...]:
        return tuple(SignatureTensor(t.name, str(t.dtype), float(t.scale), int(t.zero_point))
                     for t in map(_info, details))

    return ArtifactGraph(ops=ops, tensors=tensors, output_tensors=output_tensors(interpreter),
                         inputs=tuple(int(d["index"]) for d in interpreter.get_input_details()),
                         outputs=tuple(int(d["index"]) for d in interpreter.get_output_details()),
                         signature_inputs=io(inputs), signature_outputs=io(outputs))


def artifact_graph(path: str) -> ArtifactGraph:
    """``read_artifact`` in a child, like every step that loads an artifact: LiteRT dying on what
    a converter wrote (a signal, not an exception) is this build's named failure, never the end
    of the packager."""
    from ...conversion import worker

    return worker.convert(read_artifact, PathRequest(path), what="LiteRT reading the TFLite artifact")


def analyse(artifact: str | ArtifactGraph, layer_names: list[str], named: dict[str, str] | None = None,
            layer_namer: Callable[[str, list[str]], str] = layer_of) -> Precision:
    """Every compute op of the model by precision, float tails marked, weights sized (``artifact``:
    its path, or what ``artifact_graph`` read of it; ``named``: layers of tensors whose names do not
    say it, such as the model's outputs; ``layer_namer``: the layer a tensor name belongs to, as the
    converter that wrote it names them)."""
    graph = artifact_graph(artifact) if isinstance(artifact, str) else artifact
    details = {d.index: d for d in graph.tensors}
    ops = graph.ops
    outputs, inputs = set(graph.outputs), set(graph.inputs)
    consumers: dict[int, list[int]] = {}
    produced: set[int] = set()
    for position, op in enumerate(ops):
        for tensor in op.inputs:
            consumers.setdefault(int(tensor), []).append(position)
        produced.update(int(t) for t in op.outputs)

    def is_float(op: OpRead) -> bool:
        return op.op_name not in _NOT_COMPUTE and any(t in _FLOAT_TYPES for t in op.types())

    # ops run in order: walking backwards, an op is in the tail when everything it feeds is
    tail = [False] * len(ops)
    for position in range(len(ops) - 1, -1, -1):
        op = ops[position]
        eligible = op.op_name in CONVERTING_OPS or (is_float(op) and op.op_name in TAIL_OPS)
        results = [int(t) for t in op.outputs]
        tail[position] = eligible and bool(results) and all(
            all(tail[c] for c in consumers.get(t, [])) and (consumers.get(t) or t in outputs) for t in results)
    found = Precision()
    for position, op in enumerate(ops):
        if op.op_name in _NOT_COMPUTE:
            continue
        written = details.get(int(op.outputs[0])) if op.outputs else None
        tensor = written.name if written is not None else ""
        layer = (named or {}).get(tensor) or layer_namer(tensor, layer_names)
        if not is_float(op):
            found.int8_ops += 1
            found.int8_weighted_ops += op.op_name in WEIGHTED_OPS
            if any(t == np.int16 for t in op.types()):
                found.int16_ops.append({"op": op.op_name, "layer": layer, "tensor": tensor})
            continue
        found.float_ops.append({"op": op.op_name, "layer": layer, "tensor": tensor, "tail": tail[position]})
    for index, detail in details.items():
        if index in produced or index in inputs or index not in consumers or not len(detail.shape):
            continue  # weights are what ops read and no op computes (scratch buffers are read by none)
        size = int(np.prod(detail.shape)) * np.dtype(detail.dtype).itemsize
        if np.dtype(detail.dtype) in _FLOAT_TYPES:
            found.float_weight_bytes += size
        elif np.dtype(detail.dtype).kind in "iu":
            found.int8_weight_bytes += size
    return found
