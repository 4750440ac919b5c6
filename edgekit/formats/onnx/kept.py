"""A quantized ONNX source (QAT, or another tool's QDQ graph) shipped as the ONNX artifact.

Its scales and zero points are what training (or the user's tool) chose: quantizing the graph
again would re-choose them from the calibration data, and ONNX Runtime's quantizer on a QDQ
graph writes duplicate node names that ONNX Runtime then refuses to load. So the graph is kept
as given: checked, written into the package (external weights inlined) and validated against
the source run as given. A layer the source left in float stays float and is labelled so
(``precision.py`` reads the graph). Nothing here re-chooses a range: no calibration, no scheme
variant, no per-layer move.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ...conversion.messages import Message
from ...errors import ConversionError
from ..plan import PrecisionPlan
from .convert import QuantizeReport

KEPT_TOOL = "the source's quantized graph, kept as given (its learned scales and zero points)"


def refuse_requantizing(plan: PrecisionPlan) -> None:
    """A per-layer move on a kept graph would re-quantize it: said, never done."""
    if plan:
        raise ConversionError(
            f"the source is already quantized and its learned ranges are kept as given: {plan.describe()} would "
            "quantize it again",
            hint="leave those layers out of quantization when training (they then stay float in the graph), or "
                 "package the float model and let edgekit quantize it")


@dataclass(frozen=True)
class KeepRequest(Message):
    source: str
    output: str


def keep(request: KeepRequest) -> QuantizeReport:
    """Child side: the quantized graph at ``source`` checked and written to ``output`` unchanged
    but for external weights inlined; what ``quantize`` reports of its own builds."""
    import onnx
    import onnxruntime

    from ...conversion.quantized import quantization_scheme

    source, output = request.source, request.output
    started = time.perf_counter()
    model = onnx.load(source)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - onnx's checker raises several types
        raise ConversionError(f"the quantized source graph does not pass ONNX's checker: {exc}",
                              hint="re-export it from the training framework") from None
    scheme = quantization_scheme(model)  # the source's, before its float biases are written as int32
    on_grid = quantize_weights_on_grid(model)
    biases = quantize_float_biases(model)
    onnx.save(model, output)
    initializers = {i.name for i in model.graph.initializer}
    return QuantizeReport(
        inputs=tuple(v.name for v in model.graph.input if v.name not in initializers),
        outputs=tuple(v.name for v in model.graph.output),
        opset=next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0),
        onnxruntime=onnxruntime.__version__,
        seconds=round(time.perf_counter() - started, 3),
        prepared=source,
        scheme=scheme,
        # float biases of int8 layers written as int32 at scale input x weight (ONNX's QDQ rule, no
        # range chosen): ONNX Runtime fuses such a layer into an int8 kernel only with its bias quantized
        quantized_biases=tuple(biases),
        # float weights already on a symmetric int8 grid (a fake-quant export folds them so): written as
        # the int8 values and scale they are, the grid recovered, not chosen
        weights_on_grid=tuple(on_grid),
    )


GRID_TOLERANCE = 1e-3  # |w / scale - round(w / scale)|: a weight on the grid, up to float32 rounding


def quantize_weights_on_grid(model: Any) -> list[str]:
    """Each weighted node reading a quantized activation whose float weight lies on a symmetric
    per-output-channel int8 grid (max |w| at 127 or -128 steps of one scale per channel) gets
    that grid as an int8 initializer behind a DequantizeLinear. A weight off any such grid (a layer
    the source left float) stays float. Returns the nodes changed."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    produced_by = {out: node for node in graph.node for out in node.output}
    changed, added = [], []
    for node in graph.node:
        axis = _channel_axis(node)
        weight = initializers.get(node.input[1]) if axis is not None and len(node.input) > 1 else None
        source = _producer(node.input[0], produced_by) if node.input else None
        if weight is None or weight.data_type != 1 or source is None or source.op_type != "DequantizeLinear":
            continue
        values = numpy_helper.to_array(weight).astype(np.float64)
        grid = _symmetric_grid(values, axis % values.ndim)
        if grid is None:
            continue
        quantized, scale = grid
        name = f"{node.input[1]}_on_grid"
        graph.initializer.extend([numpy_helper.from_array(quantized, name),
                                  numpy_helper.from_array(scale.astype(np.float32), name + "_scale"),
                                  numpy_helper.from_array(np.zeros(scale.shape, np.int8), name + "_zero_point")])
        added.append(helper.make_node("DequantizeLinear", [name, name + "_scale", name + "_zero_point"],
                                      [name + "_dequantized"], name=f"{node.name}/weight/DequantizeLinear",
                                      axis=axis % values.ndim))
        node.input[1] = name + "_dequantized"
        changed.append(node.name)
    for node in added:
        consumer = next(i for i, n in enumerate(graph.node) if node.output[0] in n.input)
        graph.node.insert(consumer, node)
    return changed


def _channel_axis(node: Any) -> int | None:
    """The output-channel axis of a weighted node's weight, or None for other nodes."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "MatMul":
        return -1
    if node.op_type == "Gemm":
        return 0 if any(a.name == "transB" and a.i for a in node.attribute) else 1
    return None


def _symmetric_grid(values: Any, axis: int) -> tuple[Any, Any] | None:
    """(int8 values, per-channel scale) when ``values`` lie on a symmetric int8 grid, else None."""
    import numpy as np

    moved = np.moveaxis(values, axis, 0).reshape(values.shape[axis], -1)
    peak = np.max(np.abs(moved), axis=1)
    if not np.all(peak > 0):
        return None
    for steps in (127.0, 128.0):
        scale = peak / steps
        ratio = moved / scale[:, None]
        if np.all(np.abs(ratio - np.round(ratio)) < GRID_TOLERANCE) and ratio.min() >= -128.5 and ratio.max() <= 127.5:
            quantized = np.moveaxis(np.round(ratio).reshape(np.moveaxis(values, axis, 0).shape), 0, axis)
            return quantized.astype(np.int8), scale
    return None


def quantize_float_biases(model: Any) -> list[str]:
    """Each Conv / Gemm whose input and weight come from DequantizeLinear but whose bias is a float
    initializer (PyTorch's QAT export) gets its bias as int32 at scale ``s_input * s_weight`` with
    zero point 0, behind a DequantizeLinear: the bias every QDQ quantizer writes, determined by
    the learned scales. Returns the nodes changed."""
    import numpy as np
    from onnx import helper, numpy_helper

    from ...conversion.quantized import constants

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    known = constants(graph)
    produced_by = {out: node for node in graph.node for out in node.output}
    changed, added_nodes = [], []
    for node in graph.node:
        if node.op_type not in ("Conv", "Gemm", "ConvTranspose") or len(node.input) < 3 or not node.input[2]:
            continue
        bias = initializers.get(node.input[2])
        scales = [_dq_scale(_producer(name, produced_by), known) for name in node.input[:2]]
        if bias is None or bias.data_type != 1 or any(s is None for s in scales) or scales[0].size != 1:
            # (an input quantized per channel has no one input scale: its bias stays float)
            continue
        values = numpy_helper.to_array(bias).astype(np.float64)
        scale = (scales[0].astype(np.float64) * scales[1].astype(np.float64)).reshape(-1)
        if scale.size not in (1, values.size) or not np.all(scale > 0):
            continue
        quantized = np.clip(np.round(values / scale), -2**31, 2**31 - 1).astype(np.int32)
        name = f"{node.input[2]}_quantized"
        graph.initializer.extend([
            numpy_helper.from_array(quantized, name),
            numpy_helper.from_array(scale.astype(np.float32), name + "_scale"),
            numpy_helper.from_array(np.zeros(scale.shape, np.int32), name + "_zero_point")])
        added_nodes.append(helper.make_node("DequantizeLinear", [name, name + "_scale", name + "_zero_point"],
                                            [name + "_dequantized"], name=f"{node.name}/bias/DequantizeLinear",
                                            **({"axis": 0} if scale.size > 1 else {})))
        node.input[2] = name + "_dequantized"
        changed.append(node.name)
    for added in added_nodes:  # before their consumers: nodes stay in topological order
        consumer = next(i for i, n in enumerate(graph.node) if added.output[0] in n.input)
        graph.node.insert(consumer, added)
    return changed


MOVEMENT = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"}


def _producer(name: str, produced_by: dict[str, Any]) -> Any:
    """The node computing ``name``, looked through data movement (tf2onnx reshapes an NHWC input
    between its DequantizeLinear and the Conv): what a quantized input really comes from."""
    node = produced_by.get(name)
    while node is not None and node.op_type in MOVEMENT and node.input:
        node = produced_by.get(node.input[0])
    return node


def _dq_scale(node: Any, initializers: dict[str, Any]) -> Any:
    """The scale of the DequantizeLinear ``node`` (``initializers``: ``constants``), or None."""
    from onnx import numpy_helper

    if node is None or node.op_type != "DequantizeLinear" or len(node.input) < 2:
        return None
    return numpy_helper.to_array(initializers[node.input[1]]) if node.input[1] in initializers else None
