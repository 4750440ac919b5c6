"""Fixed output scales for int8 activations (build side, any environment with ``ai-edge-litert``).

TFLite's reference kernels accept an int8 LOGISTIC or SOFTMAX only with output scale 1/256 and
zero point -128 (TANH: 1/128 and 0; LOG_SOFTMAX: 16/256 and 127); TensorFlow's converter gives
them those, but litert-torch's PT2E flow shares one scale over a concatenation, so the sigmoid
rows of a YOLO head come out with the box rows' scale. XNNPACK runs such a model; LiteRT without
it (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``, GPU/NNAPI/Edge TPU delegates' CPU fallback) refuses
to prepare it. The fix is what TensorFlow's converter does: the op writes its fixed scale and a
QUANTIZE (int8 -> int8 requantize) takes the value to the scale its consumers were calibrated
with. Numerics are unchanged up to one rounding step.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

# op name -> (output scale, output zero point) TFLite's int8 kernels require
FIXED_INT8_OUTPUT = {
    "LOGISTIC": (1.0 / 256, -128),
    "SOFTMAX": (1.0 / 256, -128),
    "TANH": (1.0 / 128, 0),
    "LOG_SOFTMAX": (16.0 / 256, 127),
}


def fix_int8_output_scales(path: str) -> list[str]:
    """Rewrite the model at ``path`` in place so every op above writes its required scale; the
    names of the ops fixed (none: the file is left untouched)."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(path)
    if any(getattr(b, "offset", 0) for b in model.buffers or []):
        return []  # a >2 GiB model keeps its weights outside the flatbuffer: written as it is
    by_code = {getattr(schema.BuiltinOperator, name): name for name in FIXED_INT8_OUTPUT}
    fixed: list[str] = []
    quantize_index: int | None = None
    for subgraph in model.subgraphs:
        operators = []
        for op in subgraph.operators:
            operators.append(op)
            name = by_code.get(_builtin_code(model.operatorCodes[op.opcodeIndex]))
            if name is None or not op.outputs:
                continue
            tensor = subgraph.tensors[op.outputs[0]]
            scale, zero_point = FIXED_INT8_OUTPUT[name]
            if not _needs_fix(tensor, schema.TensorType.INT8, scale, zero_point):
                continue
            if quantize_index is None:
                quantize_index = _opcode_index(model, schema, schema.BuiltinOperator.QUANTIZE)
            operators.append(_requantize_after(op, subgraph, schema, quantize_index, scale, zero_point))
            fixed.append(name)
        subgraph.operators = operators
    if fixed:
        staged = Path(f"{path}.requantized")
        flatbuffer_utils.write_model(model, str(staged))
        os.replace(staged, path)
    return fixed


def _builtin_code(code: Any) -> int:
    return max(int(code.builtinCode), int(code.deprecatedBuiltinCode))


def _needs_fix(tensor: Any, int8: int, scale: float, zero_point: int) -> bool:
    quantization = tensor.quantization
    if tensor.type != int8 or quantization is None or quantization.scale is None or len(quantization.scale) != 1:
        return False
    return abs(float(quantization.scale[0]) - scale) > 1e-6 * scale or int(quantization.zeroPoint[0]) != zero_point


def _opcode_index(model: Any, schema: Any, builtin: int) -> int:
    for index, code in enumerate(model.operatorCodes):
        if _builtin_code(code) == builtin:
            return index
    code = schema.OperatorCodeT()
    code.builtinCode = builtin
    code.deprecatedBuiltinCode = min(builtin, schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
    code.version = 2  # int8 -> int8 requantization
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def _requantize_after(op: Any, subgraph: Any, schema: Any, quantize_index: int, scale: float,
                      zero_point: int) -> Any:
    """The op now writes a new tensor at its fixed scale; a QUANTIZE writes the old tensor from it."""
    original = op.outputs[0]
    fixed = copy.deepcopy(subgraph.tensors[original])
    fixed.name = _text(fixed.name).encode() + b"/fixed_scale"
    fixed.quantization.scale = [scale]
    fixed.quantization.zeroPoint = [zero_point]
    fixed.quantization.min = fixed.quantization.max = None
    subgraph.tensors.append(fixed)
    op.outputs[0] = len(subgraph.tensors) - 1
    requantize = schema.OperatorT()
    requantize.opcodeIndex = quantize_index
    requantize.inputs = [op.outputs[0]]
    requantize.outputs = [original]
    requantize.builtinOptionsType = schema.BuiltinOptions.QuantizeOptions
    requantize.builtinOptions = schema.QuantizeOptionsT()
    return requantize


def _text(name: Any) -> str:
    return name.decode() if isinstance(name, bytes) else str(name or "")
