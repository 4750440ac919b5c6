"""What each layer costs to compute, read from the float ONNX graph and the tensor shapes of one
forward pass: the search's objective is speed kept, not layers counted.

A precision plan that leaves a model's first convolution in float keeps a large share of its
compute in float, while one that leaves its classifier's softmax in float keeps almost none; a
count of float layers cannot tell them apart. Each node's cost is its multiply-accumulates
(convolutions, matrix products, recurrent cells) or, for ops that do one thing per element
(activations, pooling, adds), its output's element count; a layer's cost is the sum over the
nodes it became. The costs are relative (the shapes of the first calibration batch): what the
search compares is one layer against another and a plan's float share of the model's compute
(``packaging/search/cost.py``), which an INT8 artifact's speed-up over float shrinks with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

# ops whose cost is their multiply-accumulates; every other op costs one unit per output element
_MATRIX_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN", "Einsum"}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def node_costs(model: Any, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, float]:
    """Each node's cost (multiply-accumulates, or output elements), by node name; ``shapes``:
    every tensor's shape in one forward pass (initializers are read from the graph)."""
    known = dict(shapes)
    known.update({init.name: tuple(int(d) for d in init.dims) for init in model.graph.initializer})
    found: dict[str, float] = {}
    for index, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        found[name] = float(_cost(node, known))
    return found


def _cost(node: Any, shapes: Mapping[str, tuple[int, ...]]) -> float:
    def shape(position: int, of_output: bool = False) -> tuple[int, ...] | None:
        names = node.output if of_output else node.input
        return shapes.get(names[position]) if position < len(names) and names[position] else None

    out = shape(0, of_output=True)
    elements = float(math.prod(out)) if out else 0.0
    op = node.op_type
    if op not in _MATRIX_OPS:
        return elements
    if op == "Conv":  # weight [C_out, C_in / groups, k...]: each output element reads C_in / groups x k...
        weight = shape(1)
        return elements * math.prod(weight[1:]) if weight else elements
    if op == "ConvTranspose":  # weight [C_in, C_out / groups, k...]: each input element writes that many
        weight, data = shape(1), shape(0)
        return float(math.prod(data)) * math.prod(weight[1:]) if weight and data else elements
    if op in ("Gemm", "MatMul"):
        data = shape(0)
        if not data:
            return elements
        transposed = op == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute)
        inner = data[0] if transposed and len(data) == 2 else data[-1]
        return elements * inner
    if op in _GATES:  # X [seq, batch, input], W [dirs, gates x hidden, input], R [dirs, gates x hidden, hidden]
        data, weight, recurrent = shape(0), shape(1), shape(2)
        if not (data and weight and recurrent) or len(data) < 3:
            return elements
        return float(data[0] * data[1] * weight[0] * weight[1] * (weight[2] + recurrent[2]))
    return elements  # Einsum: its equation decides; its output's size is the floor


def layer_costs(model: Any, shapes: Mapping[str, tuple[int, ...]],
                layer_of: Callable[[str], str]) -> dict[str, float]:
    """Each plan layer's cost: the sum over the nodes ``layer_of`` puts in it (``graph.layer_of_node``);
    nodes of no layer ("") are left out (no plan can name them)."""
    found: dict[str, float] = {}
    for name, cost in node_costs(model, shapes).items():
        layer = layer_of(name)
        if layer:
            found[layer] = found.get(layer, 0.0) + cost
    return found


def layer_links(model: Any, shapes: Mapping[str, tuple[int, ...]],
                layer_of: Callable[[str], str]) -> list[tuple[str, str, float]]:
    """(writer layer, reader layer, elements) for each pair of plan layers a tensor joins: where a
    plan leaves one of them float and the other int8, the artifact quantizes or dequantizes that
    tensor on every call (``LayerCosts.boundary``), a cost a count of layers never saw."""
    writer: dict[str, str] = {}
    for index, node in enumerate(model.graph.node):
        layer = layer_of(node.name or f"{node.op_type}_{index}")
        for out in node.output:
            if out and layer:
                writer[out] = layer
    found: dict[tuple[str, str], float] = {}
    seen: set[tuple[str, str]] = set()  # (tensor, reader layer): a tensor read twice by one layer counts once
    for index, node in enumerate(model.graph.node):
        reader = layer_of(node.name or f"{node.op_type}_{index}")
        for name in node.input:
            source = writer.get(name)
            if not reader or not source or source == reader or (name, reader) in seen or name not in shapes:
                continue
            seen.add((name, reader))
            found[(source, reader)] = found.get((source, reader), 0.0) + float(math.prod(shapes[name]))
    return [(a, b, e) for (a, b), e in found.items()]
