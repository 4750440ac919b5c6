"""What a quantized source is: a model that left training (QAT) or another tool already quantized.

A QDQ ONNX graph carries its learned ranges as the scale and zero point of each QuantizeLinear /
DequantizeLinear pair: those on weights (a DequantizeLinear of an integer initializer, or a
QuantizeLinear of a float one, as PyTorch's QAT export writes) and those on activations. This
module reads the scheme from the graph without running it: how many tensors of each kind are
quantized, per channel or per tensor, signed or not, symmetric or not, in which bit widths,
and which compute layers the graph leaves in float. The manifest records it as
``source.quantized``; the ONNX format ships the graph itself (``formats/onnx/kept.py``) and the
routes that would rebuild a float model refuse it (``forms.QUANTIZED_OPS``).
"""

from __future__ import annotations

from typing import Any

from .forms import QUANTIZED_OPS

_QDQ = ("QuantizeLinear", "DequantizeLinear")
_BITS = {2: ("uint", 8), 3: ("int", 8), 4: ("uint", 16), 5: ("int", 16), 21: ("uint", 4), 22: ("int", 4)}


def quantization_scheme(model: Any) -> dict[str, Any] | None:
    """The quantization an ONNX ``model`` (``onnx.ModelProto``, external data not needed) carries,
    or None for a float graph."""
    graph = model.graph
    ops = [n.op_type for n in graph.node]
    found = sorted({op for op in ops if op in QUANTIZED_OPS})
    if not found:
        return None
    initializers = {i.name: i for i in graph.initializer}
    for node in graph.node:  # a scale or zero point passed on by an Identity node (PyTorch's export shares them)
        if node.op_type == "Identity" and node.input and node.input[0] in initializers and node.output:
            initializers.setdefault(node.output[0], initializers[node.input[0]])
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
    for what in ("weights", "activations"):
        tally = scheme.get(what)
        if tally:
            layout = "per-channel" if tally["per_channel"] else "per-tensor"
            parts.append(f"{what} {'/'.join(tally['types'])} {layout}{' symmetric' if tally['symmetric'] else ''} "
                         f"({tally['tensors']})")
    return ", ".join(parts)
