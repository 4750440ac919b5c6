"""The name each ONNX node's step has as a submodule of the rebuilt module, and back.

The converters that read the rebuilt module (litert-torch, coremltools' PyTorch frontend) name
the ops they emit by module path. With every step a submodule named after its ONNX node, a
TFLite op of the ONNX -> PyTorch route says which ONNX node it came from, so ``--explain``,
``--keep-float`` and the search name real layers rather than ``_OnnxModule.forward``. Light on
purpose: the TFLite builder's layer matching imports it without torch."""

from __future__ import annotations

import re
from collections.abc import Iterable

_RESERVED = {"forward", "steps", "constants", "input_names", "output_names", "example_outputs", "training",
             "step_modules", "loop_modules"}


def attribute_name(node_name: str) -> str:
    """An ONNX node name as a Python attribute (``/conv/Conv`` -> ``conv_Conv``)."""
    name = re.sub(r"\W+", "_", node_name).strip("_") or "node"
    if name[0].isdigit():
        name = f"n{name}"
    return f"{name}_" if name in _RESERVED or name.startswith(("const_", "derived_")) else name


def original_names(node_names: Iterable[str]) -> dict[str, str]:
    """Attribute name -> ONNX node name, for every node (the first where two share one)."""
    found: dict[str, str] = {}
    for name in node_names:
        found.setdefault(attribute_name(name), name)
    return found

