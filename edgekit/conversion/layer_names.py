"""Which layer of the source a converted tensor or node came from, by its name: converters name
what they emit after the source's scopes (``model/conv2_1/Conv2D``, fused names joined by ``;``).
Below the steps and the formats, which all name layers this way."""

from __future__ import annotations

import re

_WRAPPER = re.compile(r"(Stateful)?PartitionedCall(_\d+)?|Func|input|_\d+")


def layer_of(tensor_name: str, layer_names: list[str]) -> str:
    """The Keras layer a converted tensor came from (TF adds ``_1`` suffixes to layer scopes)."""
    known = set(layer_names)
    parts = tensor_name.split(";")[0].split("/")
    for part in parts[1:] + parts[:1]:
        if part in known:
            return part
        base = re.sub(r"_\d+$", "", part)
        if base in known:
            return base
    # no layer list (a SavedModel): the scope just above the op, below the call wrappers
    scopes = [p for p in parts[:-1] if not _WRAPPER.fullmatch(p)]
    return scopes[-1] if len(scopes) >= 2 else (scopes[0] if scopes else tensor_name)


def in_layer(node_name: str, layer: str) -> bool:
    """Whether a converted node (``model/LAYER_1/op``, fused names joined by ';') comes from ``layer``."""
    pattern = re.compile(rf"(^|/){re.escape(layer)}(_\d+)?(/|$)")
    return node_name == layer or any(pattern.search(part) for part in node_name.split(";"))
