"""Child side of the ONNX builder's graph work after quantization: what the QDQ build computes in
(``precision.analyse``), the float model written in its place where no weighted op is left in
integers, and a float model written whole (its external data folded in) for the float fallback.
One child round trip each; the parent never loads an ONNX graph."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...conversion.messages import Message
from ..precision import Precision
from .precision import analyse


@dataclass(frozen=True)
class InspectRequest(Message):
    """Read the build at ``output``; ``kept``: a quantized source's own pairs (never replaced)."""

    output: str
    float_onnx: str
    layer_names: tuple[str, ...]
    kept: bool


@dataclass(frozen=True)
class Inspection(Message):
    """The build's precision (``Precision``'s fields) and whether the float model replaced it."""

    precision: dict[str, Any]
    wrote_float: bool

    def read(self) -> Precision:
        return Precision(**self.precision)


def inspect_build(request: InspectRequest) -> Inspection:
    """What the QDQ build computes in, from its graph (ORT leaves ops it cannot quantize in float).
    Q/DQ pairs around layers that all compute in float (a Gemm whose bias is an activation) are
    quantization noise without an integer kernel: the float model ships instead, labelled so."""
    precision = analyse(request.output, request.layer_names)
    wrote_float = False
    if not request.kept and not precision.int8_weighted_ops and precision.label != "float":
        _write_whole(request.float_onnx, request.output)
        precision, wrote_float = analyse(request.output, request.layer_names), True
    return Inspection(dataclasses.asdict(precision), wrote_float)


@dataclass(frozen=True)
class WholeModelRequest(Message):
    """Write the ONNX graph at ``source`` to ``target`` as one file."""

    source: str
    target: str


@dataclass(frozen=True)
class Written(Message):
    target: str


def write_whole_model(request: WholeModelRequest) -> Written:
    """The float model with its weights inside: an exported model may keep them in a ``.onnx.data``
    file beside it, which a copy of the ``.onnx`` alone would lose."""
    _write_whole(request.source, request.target)
    return Written(request.target)


def _write_whole(source: str, target: str) -> None:
    """``source`` written at ``target`` (one file, its external data folded in), by a temporary file and a rename."""
    import onnx

    from ...fsutil import write_bytes_atomic

    write_bytes_atomic(target, onnx.load(source).SerializeToString())
