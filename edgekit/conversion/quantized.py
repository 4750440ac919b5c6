"""What a quantized source is: a model that left training (QAT) or another tool already quantized.

A QDQ ONNX graph carries its learned ranges as the scale and zero point of each QuantizeLinear /
DequantizeLinear pair: those on weights (a DequantizeLinear of an integer initializer, or a
QuantizeLinear of a float one, as PyTorch's QAT export writes) and those on activations. This
module reads the scheme from the graph without running it: how many tensors of each kind are
quantized, per channel or per tensor, signed or not, symmetric or not, in which bit widths,
and which weighted layers the graph leaves in float. The manifest records it as
``source.quantized``. The ONNX format ships the graph itself (``formats/onnx/kept.py``); TFLite
rebuilds it as the float graph it simulates with the learned ranges beside it (``strip_qdq``)
and carries them into its quantizer; the formats that cannot carry them yet refuse quantized ops
(``forms.QUANTIZED_OPS`` in their ``Accepts``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from .forms import QUANTIZED_OPS

_QDQ = ("QuantizeLinear", "DequantizeLinear")


def constants(graph: Any) -> dict[str, Any]:
    """The graph's initializers by name, and each again under the name of an Identity passing it
    on (PyTorch's export shares a scale or zero point that way)."""
    found = {i.name: i for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Identity" and node.input and node.input[0] in found and node.output:
            found.setdefault(node.output[0], found[node.input[0]])
    return found


def is_quantized_graph(path: str) -> bool:
    """Whether the ONNX graph at ``path`` is already quantized (read without its weights)."""
    file = Path(path)
    try:
        stamp = file.stat().st_mtime_ns
    except OSError:
        return False
    return _quantized(str(file), stamp)


@lru_cache(maxsize=16)
def _quantized(path: str, stamp: int) -> bool:
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - an unreadable graph is the converter's to report
        return False
    return any(node.op_type in QUANTIZED_OPS for node in model.graph.node)

_BITS = {2: ("uint", 8), 3: ("int", 8), 4: ("uint", 16), 5: ("int", 16), 21: ("uint", 4), 22: ("int", 4)}


def quantization_scheme(model: Any) -> dict[str, Any] | None:
    """The quantization an ONNX ``model`` (``onnx.ModelProto``, external data not needed) carries,
    or None for a float graph."""
    graph = model.graph
    ops = [n.op_type for n in graph.node]
    found = sorted({op for op in ops if op in QUANTIZED_OPS})
    if not found:
        return None
    initializers = constants(graph)
    check_scales(graph, initializers)
    weights, activations = _Tally(), _Tally()
    for node in graph.node:
        if node.op_type not in _QDQ or len(node.input) < 2:
            continue
        if node.op_type == "DequantizeLinear":  # of an integer weight; an activation's is its Quantize's pair
            if node.input[0] in initializers:
                weights.add(node, initializers)
        else:  # of a float weight (PyTorch's QAT export) or of an activation
            (weights if node.input[0] in initializers else activations).add(node, initializers)
    return {
        "format": "QDQ" if set(found) <= set(_QDQ) else "QOperator",
        "ops": {op: ops.count(op) for op in found},
        "weights": weights.summary(),
        "activations": activations.summary(),
        "producer": f"{model.producer_name or ''} {model.producer_version or ''}".strip(),
    }


def check_scales(graph: Any, initializers: dict[str, Any]) -> None:
    """Refuse, by node, a QuantizeLinear / DequantizeLinear scale that is zero, negative or not
    finite: ONNX defines neither (a zero scale divides by zero, a negative one flips every value),
    and a graph carrying one computes nothing its training meant."""
    import numpy as np
    from onnx import numpy_helper

    from ..errors import ModelSourceError

    bad = []
    for node in graph.node:
        if node.op_type not in _QDQ or len(node.input) < 2 or node.input[1] not in initializers:
            continue
        try:
            scale = numpy_helper.to_array(initializers[node.input[1]]).astype(np.float64).reshape(-1)
        except Exception:  # noqa: BLE001 - external data not loaded: checked where the weights are read
            continue
        wrong = scale[~np.isfinite(scale) | (scale <= 0)]
        if wrong.size:
            bad.append(f"{node.op_type} {node.name or node.output[0]!r} (scale {node.input[1]!r}: "
                       f"{', '.join(f'{v:g}' for v in wrong[:3])}{' ...' if wrong.size > 3 else ''})")
    if bad:
        raise ModelSourceError(
            f"the quantized source has {len(bad)} quantize/dequantize pair(s) with a zero, negative or non-finite "
            f"scale, which ONNX does not define: {'; '.join(bad[:4])}{' ...' if len(bad) > 4 else ''}",
            hint="re-export the quantized model (a scale must be a positive finite number), or package the float model "
                 "it came from")


class _Tally:
    """The scheme of one kind of tensor (weights or activations), pair by pair."""

    def __init__(self) -> None:
        self.count = 0
        self.per_channel = 0
        self.types: set[str] = set()
        self.symmetric = True

    def add(self, node: Any, initializers: dict[str, Any]) -> None:
        from onnx import numpy_helper

        self.count += 1
        scale = initializers.get(node.input[1])
        if scale is not None and len(scale.dims) and int(scale.dims[0]) > 1:
            self.per_channel += 1
        point = initializers.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if point is None:
            self.types.add("uint8")  # ONNX's default zero point type
            self.symmetric = False
            return
        kind, bits = _BITS.get(int(point.data_type), ("int", 8))
        self.types.add(f"{kind}{bits}")
        try:
            values = numpy_helper.to_array(point)
        except Exception:  # noqa: BLE001 - external data not loaded: the type is still known
            return
        middle = 0 if kind == "int" else 2 ** (bits - 1)
        if values.size and (values != middle).any():
            self.symmetric = False

    def summary(self) -> dict[str, Any] | None:
        if not self.count:
            return None
        bits = sorted({int("".join(c for c in t if c.isdigit())) for t in self.types})
        return {"tensors": self.count, "per_channel": self.per_channel == self.count and self.count > 0,
                "per_channel_tensors": self.per_channel, "types": sorted(self.types),
                "signed": all(t.startswith("int") for t in self.types), "bits": bits, "symmetric": self.symmetric}


def describe_scheme(scheme: dict[str, Any]) -> str:
    """One line: ``QDQ, weights int8 per-channel symmetric (3), activations uint8 per-tensor (7)``."""
    parts = [scheme["format"]]
    if scheme["format"] == "fake-quant":  # TensorFlow's ops: counted by kind, with their bit widths
        parts += [f"{count} {op}" for op, count in scheme["ops"].items()]
        parts.append(f"{'/'.join(str(b) for b in scheme['bits'])} bits")
    for what in ("weights", "activations"):
        tally = scheme.get(what)
        if tally:
            mixed = tally.get("per_channel_tensors", 0)
            layout = ("per-channel" if tally["per_channel"] else
                      f"per-tensor, {mixed} per-channel" if mixed else "per-tensor")
            parts.append(f"{what} {'/'.join(tally['types'])} {layout}{' symmetric' if tally['symmetric'] else ''} "
                         f"({tally['tensors']})")
    return ", ".join(parts)


# --- a quantized graph as a float graph plus its learned ranges ---------------------------------


_RANGES = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767), 21: (0, 15), 22: (-8, 7)}


def is_qdq_graph(model: Any) -> bool:
    """Quantized with QuantizeLinear / DequantizeLinear pairs only (what ``strip_qdq`` rewrites)."""
    found = {n.op_type for n in model.graph.node if n.op_type in QUANTIZED_OPS}
    return bool(found) and found <= set(_QDQ)


def strip_qdq(model: Any) -> dict[str, dict[str, Any]]:
    """Rewrite the QDQ ONNX ``model`` in place as the float graph it simulates, and return the
    learned range of every activation it quantized, by tensor name: ``{"min", "max", "scale",
    "zero_point", "type", "producer"}`` (``producer``: the node computing it, "" for a graph input).

    A weight becomes its dequantized values (the grid training learned, so a quantizer that
    derives a symmetric per-channel scale from them finds the same one); an activation's pair
    becomes an Identity (output names stay) and its range is returned, for a converter to use
    instead of calibrating one. A QOperator graph (QLinearConv...) is not rewritten: ValueError."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    others = sorted({n.op_type for n in graph.node if n.op_type in QUANTIZED_OPS and n.op_type not in _QDQ})
    if others:
        raise ValueError(f"QOperator ops ({', '.join(others)}) are not a QDQ graph")
    narrowed = fold_integer_clips(graph)
    initializers = constants(graph)
    produced_by = {out: node for node in graph.node for out in node.output}
    value = {name: numpy_helper.to_array(t) for name, t in initializers.items()}
    ranges: dict[str, dict[str, Any]] = {}
    keep, added = [], []
    for node in graph.node:
        if node.op_type not in _QDQ:
            keep.append(node)
            continue
        data, scale = node.input[0], value[node.input[1]].astype(np.float64)
        point_name = node.input[2] if len(node.input) > 2 else ""
        point = value[point_name] if point_name else np.zeros((), np.uint8)
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        if node.op_type == "DequantizeLinear" and data in value:  # an integer weight (or bias)
            added.append(numpy_helper.from_array(_dequantized(value[data], scale, point, axis), node.output[0]))
            continue
        if node.op_type == "QuantizeLinear":
            readers = [n for n in graph.node if data != "" and node.output[0] in n.input]
            if data in value:  # a float weight fake-quantized (PyTorch's QAT export): its pair becomes the grid
                low, high = _narrow(_RANGES.get(_onnx_type(point_name, initializers), (-128, 127)),
                                    narrowed.get(node.output[0]))
                shaped = _broadcast(scale, value[data].ndim, axis)
                zero = _broadcast(point.astype(np.float64), value[data].ndim, axis)
                grid = (np.clip(np.round(value[data] / shaped) + zero, low, high) - zero) * shaped
                for reader in readers:  # its DequantizeLinear: replaced by the grid's initializer
                    added.append(numpy_helper.from_array(grid.astype(np.float32), reader.output[0]))
                continue
            low, high = _narrow(_RANGES.get(_onnx_type(point_name, initializers), (0, 255)),
                                narrowed.get(node.output[0]))
            step, zero = float(scale.reshape(-1)[0]), float(point.reshape(-1)[0]) if point.size else 0.0
            source = produced_by.get(data)
            outputs = {o.name for o in graph.output}
            if scale.size > 1:  # never left to calibration: that would replace a learned range without a word
                from ..errors import ConversionError

                raise ConversionError(
                    f"ONNX node {node.name or node.output[0]!r} quantizes the activation {data!r} per channel "
                    f"({scale.size} scales on axis {axis}); this route's converters take per-tensor activation "
                    "ranges only, so its learned ranges cannot be carried",
                    hint="package it with --format onnx, which ships the graph with its learned ranges as they are")
            if scale.size == 1:  # a per-tensor activation range
                ranges[data] = {"min": (low - zero) * step, "max": (high - zero) * step, "scale": step,
                                "zero_point": int(zero), "type": f"{'u' if low == 0 else ''}int{(high - low).bit_length()}",
                                "producer": source.name if source is not None else "",
                                # the model output its DequantizeLinear writes: converters name that op after it
                                "output": next((r.output[0] for r in readers if r.output[0] in outputs), None)}
            for reader in readers:  # its DequantizeLinear: an Identity of the float value
                if reader.op_type == "DequantizeLinear":
                    keep.append(helper.make_node("Identity", [data], [reader.output[0]], name=reader.name or ""))
            continue
        # a DequantizeLinear of a QuantizeLinear: handled with its QuantizeLinear above
    graph.ClearField("node")
    graph.node.extend(keep)
    graph.initializer.extend(added)
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    unused = [t for t in graph.initializer if t.name not in used]
    for tensor in unused:  # the integer weights, scales and zero points the float graph no longer reads
        graph.initializer.remove(tensor)
    return ranges


def fold_integer_clips(graph: Any) -> dict[str, tuple[float, float]]:
    """Remove each Clip between a QuantizeLinear and its DequantizeLinear (PyTorch exports a range
    narrower than its integer type that way: ``reduce_range`` activations in [0, 127], weights in
    [-127, 127]); return the integer bounds it applied, by the QuantizeLinear's output, so that the
    range read from the pair is the narrower one."""
    from onnx import numpy_helper

    initializers = constants(graph)
    known = {name: numpy_helper.to_array(t) for name, t in initializers.items()}
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.attribute and node.attribute[0].name == "value":
            known[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    quantized = {n.output[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    narrowed: dict[str, tuple[float, float]] = {}
    removed = []
    for node in graph.node:
        if node.op_type != "Clip" or node.input[0] not in quantized:
            continue
        after = readers.get(node.output[0], [])
        bounds = [node.input[i] if len(node.input) > i else "" for i in (1, 2)]
        if not after or any(r.op_type != "DequantizeLinear" for r in after) or any(b and b not in known for b in bounds):
            continue
        low, high = (float(known[b].reshape(-1)[0]) if b else None for b in bounds)
        narrowed[node.input[0]] = (low if low is not None else float("-inf"), high if high is not None else float("inf"))
        for reader in after:
            reader.input[0] = node.input[0]
        removed.append(node)
    for node in removed:
        graph.node.remove(node)
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    for node in [n for n in graph.node if n.op_type == "Constant" and n.output[0] not in used]:
        graph.node.remove(node)
    return narrowed


def _narrow(full: tuple[int, int], clip: tuple[float, float] | None) -> tuple[int, int]:
    """An integer type's range, narrowed by the Clip PyTorch put between its pair."""
    if clip is None:
        return full
    return max(full[0], int(round(clip[0]))) if clip[0] != float("-inf") else full[0], \
        min(full[1], int(round(clip[1]))) if clip[1] != float("inf") else full[1]


def _onnx_type(name: str, initializers: dict[str, Any]) -> int:
    return int(initializers[name].data_type) if name in initializers else 2  # ONNX's default: uint8


def _broadcast(values: Any, ndim: int, axis: int) -> Any:
    """A per-channel scale or zero point shaped to broadcast along ``axis`` of an ``ndim`` tensor."""
    if values.size <= 1:
        return values.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = values.size
    return values.reshape(shape)


def _dequantized(quantized: Any, scale: Any, point: Any, axis: int) -> Any:
    import numpy as np

    zero = _broadcast(point.astype(np.float64), quantized.ndim, axis)
    return ((quantized.astype(np.float64) - zero) * _broadcast(scale, quantized.ndim, axis)).astype(np.float32)


WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def float_weighted_nodes(model: Any) -> list[str]:
    """The layers a QDQ graph leaves in float: weighted ops whose weight is a float initializer
    read directly, not through a QuantizeLinear / DequantizeLinear pair (QAT's excluded layers,
    ``nodes_to_exclude``)."""
    initializers = {i.name for i in model.graph.initializer}
    return [n.name for n in model.graph.node
            if n.op_type in WEIGHTED_OPS and len(n.input) > 1 and n.input[1] in initializers]


def weight_scales(model: Any) -> dict[str, list[float]]:
    """Each weighted node's learned weight scales (per channel, or one), read from the
    DequantizeLinear its weight comes through: what a format's own weight quantization is
    checked against."""
    from onnx import numpy_helper

    graph = model.graph
    initializers = constants(graph)
    produced_by = {out: node for node in graph.node for out in node.output}
    found = {}
    for node in graph.node:
        if node.op_type not in WEIGHTED_OPS or len(node.input) < 2:
            continue
        source = produced_by.get(node.input[1])
        if source is not None and source.op_type == "DequantizeLinear" and source.input[1:2] \
                and source.input[1] in initializers:
            found[node.name] = [float(v) for v in numpy_helper.to_array(initializers[source.input[1]]).reshape(-1)]
    return found


def matched_ranges(learned: dict[str, dict[str, Any]], pairs: list[tuple[float, int]],
                   rtol: float = 1e-6) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Which of a source's learned activation ranges (``strip_qdq``) a converted model holds:
    ``pairs`` are its quantize ops' (scale, zero point) as int8 (a uint8 pair is the same values
    with its zero point moved by 128); a scale within ``rtol`` (a format storing scales in float16
    rounds them). Returns (carried, by source tensor; the tensors not found)."""
    carried, missing = {}, []
    for tensor, found in learned.items():
        point = found["zero_point"] - (128 if found["type"].startswith("uint") else 0)
        match = next((p for p in pairs if abs(p[0] - found["scale"]) <= rtol * found["scale"] and p[1] == point), None)
        if match is None:
            missing.append(tensor)
        else:
            carried[tensor] = {"scale": found["scale"], "zero_point": found["zero_point"], "stored_scale": match[0]}
    return carried, missing
