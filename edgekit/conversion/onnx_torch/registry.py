"""The op table: ONNX op name -> a function of ``Args`` returning the op's output(s), and the
helpers every op module shares. Op modules register with ``@op("Name")``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...errors import ConversionError, OTHER_ROUTES
from .graph import Args, Node

OPS: dict[str, Callable[[Args], Any]] = {}


def op(*names: str) -> Callable[[Callable[[Args], Any]], Callable[[Args], Any]]:
    def register(function: Callable[[Args], Any]) -> Callable[[Args], Any]:
        for name in names:
            OPS[name] = function
        return function

    return register


def _torch() -> Any:
    import torch

    return torch


def _F() -> Any:
    import torch.nn.functional as F

    return F


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
           10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def _dtype(onnx_type: int) -> Any:
    if onnx_type not in _DTYPES:
        raise ConversionError(f"ONNX tensor type {onnx_type} has no PyTorch equivalent here",
                              hint=OTHER_ROUTES)
    return getattr(_torch(), _DTYPES[onnx_type])


def _run_node(node: Node, args: Args) -> list[Any]:
    produced = OPS[node.op](args)
    return list(produced) if isinstance(produced, (list, tuple)) else [produced]


def _torch_pad(begins: Sequence[int], ends: Sequence[int]) -> list[int]:
    """F.pad's order: last dimension first, (begin, end) pairs."""
    order: list[int] = []
    for begin, end in zip(reversed(begins), reversed(ends)):
        order += [begin, end]
    return order
