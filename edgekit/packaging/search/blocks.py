"""Whole blocks of layers, raised together before single layers.

Raising one layer inside a block that fails as a whole rarely helps: a softmax inside an
attention block keeps its numerics only with its neighbours (TensorRT Model Optimizer excludes
whole transformer blocks for that reason), a recurrent cell's state path is quantized once per
step and needs every gate of it, a detection head after the backbone's last stage shares its
scales. So the search first raises blocks, then narrows a block that passes back to int8 layer
by layer. Blocks come from the model's own structure, read from what every route has: layer
names (module paths ``/model.22/cv2.0/conv``, Keras scopes ``block_3/conv``, ONNX node names),
their order from input to output, and the per-layer report's worst layers:

- ``worst``: the report's worst layers together (what a plan needs most, one try);
- ``scope NAME``: the layers under one path prefix (a residual or attention block, a head);
- ``output end`` / ``input end``: the layers nearest the outputs (a head after the last stage)
  or the inputs (an embedding, one-hot or normalising front), a quarter and a half of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..search_settings import DEFAULT_SETTINGS, SearchSettings

_SEPARATORS = re.compile(r"[/.:]")


@dataclass(frozen=True)
class Block:
    """Layers raised together, and what they are."""

    name: str
    layers: tuple[str, ...]


def blocks(worst: Sequence[str], ordered: Sequence[str], cheap: bool = False,
           settings: SearchSettings = DEFAULT_SETTINGS) -> list[Block]:
    """The blocks to try, most promising first, at most the settings' count. ``worst``: the
    layers by how much they cost (worst first); ``ordered``: every layer the route can raise, from
    input to output. ``cheap``: tries cost a forward pass (the simulation), so the neighbours of
    the worst layers are tried too: a tensor between two layers stays float only with its writer
    and its reader."""
    ordered = list(dict.fromkeys(ordered))
    if len(ordered) < 2:
        return []
    found: list[Block] = []
    if len(worst) > 1:
        found.append(Block(f"the {len(worst)} worst layers", tuple(worst)))
    if cheap:
        found += _neighbours(worst, ordered)
    found += _scopes(worst, ordered)
    for share, end in ((4, "output"), (2, "output"), (4, "input")):
        count = max(2, len(ordered) // share)
        if count < len(ordered):
            layers = ordered[-count:] if end == "output" else ordered[:count]
            found.append(Block(f"the {count} layers nearest the {end}s", tuple(layers)))
    unique: list[Block] = []
    for block in found:
        if all(set(block.layers) != set(other.layers) for other in unique):
            unique.append(block)
    return unique[:settings.max_cheap_blocks if cheap else settings.max_blocks]


def _neighbours(worst: Sequence[str], ordered: Sequence[str], around: int = 4) -> list[Block]:
    """Each of the ``around`` worst layers with the layer before it and with the one after it."""
    position = {layer: i for i, layer in enumerate(ordered)}
    found = []
    for layer in worst[:around]:
        at = position.get(layer)
        if at is None:
            continue
        for other in (at - 1, at + 1):
            if 0 <= other < len(ordered):
                pair = tuple(sorted((layer, ordered[other]), key=position.__getitem__))
                found.append(Block(f"{pair[0]} and {pair[1]} (a tensor's writer and reader)", pair))
    return found


def _scopes(worst: Sequence[str], ordered: Sequence[str]) -> list[Block]:
    """The path prefixes that hold at least two layers and at most half of them, ranked by how
    many of the worst layers they hold (then smaller first): attention and residual blocks,
    heads, recurrent cells with their gates."""
    members: dict[str, list[str]] = {}
    for layer in ordered:
        parts = [p for p in _SEPARATORS.split(layer) if p]
        for depth in range(1, len(parts)):
            members.setdefault("/".join(parts[:depth]), []).append(layer)
    limit = max(2, len(ordered) // 2)
    worst_set = set(worst)
    ranked = []
    for prefix, layers in members.items():
        if 2 <= len(layers) <= limit:
            hits = sum(1 for layer in layers if layer in worst_set)
            if hits:
                ranked.append((-hits, len(layers), prefix, tuple(layers)))
    ranked.sort()
    chosen: list[Block] = []
    for _, _, prefix, layers in ranked:
        if any(set(layers) == set(b.layers) for b in chosen):
            continue  # a prefix with one child prefix holds the same layers: one try
        chosen.append(Block(f"scope {prefix}", layers))
    return chosen[:4]
