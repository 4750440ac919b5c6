"""Attention masks stay float in ONNX QDQ builds.

A text encoder turns its integer ``attention_mask`` into an additive bias, ``(1 - mask) * -1e4``,
and adds it to the attention scores before the Softmax. Quantized, that sum gets one int8 scale
spanning -10000..10: a step of about 40, so every real score rounds to the same value and the
attention is lost (a BERT-style encoder measured 6.9 dB). The nodes that mix a mask-derived value
into real activations, and the Softmax they feed, are left in float: the scores keep their
resolution and every weight stays int8.

A value is mask-derived when it follows from integer graph inputs through elementwise and shape
ops only (an embedding lookup's Gather is not: its output is learned features).
"""

from __future__ import annotations

from typing import Any

MASK_OPS = {"Cast", "Sub", "Mul", "Add", "Div", "Neg", "Not", "Equal", "Less", "Greater", "Where", "Unsqueeze",
            "Squeeze", "Reshape", "Expand", "Slice", "Identity", "Tile", "Concat", "ConstantOfShape", "Shape",
            "Min", "Max", "Clip", "And", "Or", "Transpose"}
MIXING_OPS = {"Add", "Sub", "Mul", "Where"}
PASS_THROUGH = {"Reshape", "Transpose", "Cast", "Identity", "Squeeze", "Unsqueeze"}
INTEGER_TYPES = {2, 3, 4, 5, 6, 7, 9, 12, 13}  # ONNX uint8 .. uint64 and bool


def mask_nodes(model: Any) -> list[tuple[str, str, str]]:
    """(node, op, why) of the nodes adding a mask-derived value to activations, and the Softmax
    each feeds (through reshapes), for ``nodes_to_exclude``."""
    graph = model.graph
    constants = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant"
                                                          for o in n.output}
    derived = {v.name for v in graph.input if v.type.tensor_type.elem_type in INTEGER_TYPES
               and v.name not in constants}
    if not derived:
        return []
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    mixing = []
    for node in graph.node:  # graph order is topological
        live = [i for i in node.input if i and i not in constants]
        if not live:
            continue
        from_mask = [i for i in live if i in derived]
        if len(from_mask) == len(live) and node.op_type in MASK_OPS:
            derived.update(o for o in node.output if o)
        elif from_mask and node.op_type in MIXING_OPS:
            mixing.append(node)
    found: list[tuple[str, str, str]] = []
    for node in mixing:
        found.append((node.name, node.op_type, "attention mask"))
        frontier, steps = list(node.output), 0
        while frontier and steps < 4:
            following = [n for name in frontier for n in consumers.get(name, [])]
            softmax = [n for n in following if n.op_type == "Softmax"]
            found += [(n.name, n.op_type, "attention mask") for n in softmax]
            frontier = [o for n in following if n.op_type in PASS_THROUGH for o in n.output]
            steps += 1
    unique: dict[str, tuple[str, str, str]] = {}
    for entry in found:
        if entry[0]:
            unique.setdefault(entry[0], entry)
    return list(unique.values())
