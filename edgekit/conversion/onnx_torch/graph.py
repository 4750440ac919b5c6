"""The pieces an ONNX graph is made of here: nodes, the steps forward() runs, and ``Args``, how
an op function sees its inputs (tensors, or Python numbers for shape-like constants)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...conversion.forms import QUANTIZED_OPS
from ...errors import ConversionError, OTHER_ROUTES

ONNX_DOMAINS = ("", "ai.onnx")
_QUANTIZED = set(QUANTIZED_OPS)


class DataDependent(ConversionError):
    """A node needs, as a Python number, a value computed from the input data."""


@dataclass
class Node:
    """One ONNX node as the converter needs it (attributes decoded, the model's opset attached)."""

    op: str
    name: str
    inputs: list[str]  # "" for an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any]
    opset: int


@dataclass
class Step:
    """One node (or a fused MatMul+Add) that forward() runs."""

    node: Node
    run: Callable[["Args"], list[Any]]  # the node's outputs, in order
    consumes: list[str] = field(default_factory=list)


def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper, numpy_helper

    found: dict[str, Any] = {}
    for attribute in node.attribute:
        if attribute.type == attribute.GRAPH or attribute.type == attribute.GRAPHS:
            raise ConversionError(f"ONNX node {node.name or node.op_type} ({node.op_type}) has a subgraph",
                                  hint=f"control flow (If/Loop/Scan) has no PyTorch rebuild here: {OTHER_ROUTES}")
        if attribute.type == attribute.TENSOR:
            found[attribute.name] = numpy_helper.to_array(attribute.t)
        else:
            value = helper.get_attribute_value(attribute)
            found[attribute.name] = value.decode() if isinstance(value, bytes) else value
    return found


class Args:
    """A node's inputs and attributes as its op function wants them: tensors, or Python numbers
    for shape-like arguments (which must be constants)."""

    def __init__(self, node: Node, values: dict[str, Any], constants: dict[str, np.ndarray], module: Any,
                 derived: dict[str, np.ndarray] | None = None) -> None:
        self.node, self._values, self._constants, self._module = node, values, constants, module
        self._derived = derived

    def derived(self, tag: str, make: Callable[[], np.ndarray]) -> Any:
        """A constant tensor this node computes from static shapes (an index table, a divisor):
        made during the eager run, a module buffer in forward()."""
        import torch

        key = f"{self.node.name}/{tag}"
        if self._module is not None:
            return self._module.constant_tensor(key)
        array = np.ascontiguousarray(make())
        if self._derived is not None:
            self._derived[key] = array
        return torch.from_numpy(array)

    @property
    def opset(self) -> int:
        return self.node.opset

    def count(self) -> int:
        return len(self.node.inputs)

    def has(self, index: int) -> bool:
        return index < len(self.node.inputs) and self.node.inputs[index] != ""

    def t(self, index: int) -> Any:
        """Input ``index`` as a tensor."""
        import torch

        name = self.node.inputs[index]
        if name in self._values:
            return self._values[name]
        if self._module is not None:
            return self._module.constant_tensor(name)
        return torch.from_numpy(np.array(self._constants[name]))

    def const(self, index: int) -> np.ndarray | None:
        """Input ``index`` as a NumPy array when it does not depend on the data, else None."""
        return self._constants.get(self.node.inputs[index])

    def ints(self, index: int) -> list[int]:
        value = self.const(index)
        if value is None:
            raise DataDependent(
                f"ONNX node {self.node.name} ({self.node.op}) takes input {index} ({self.node.inputs[index]!r}) "
                "as a shape or index computed from the input data",
                hint="the PyTorch rebuild needs shapes that follow from the input shapes; export it with static "
                     f"shapes, or {OTHER_ROUTES}")
        return [int(v) for v in np.asarray(value).reshape(-1)]

    def number(self, index: int) -> float | None:
        value = self.const(index)
        return None if value is None else float(np.asarray(value).reshape(-1)[0])

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)
