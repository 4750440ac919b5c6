"""ONNX: QDQ INT8 ``.onnx`` (+ ``.ort``) for ONNX Runtime on phones, Jetson and servers."""

from __future__ import annotations

from ..base import Builder, Format
from .onnxruntime import OnnxRuntimeBackend


def _builder() -> Builder:
    from .build import ONNXBuilder

    return ONNXBuilder()


FORMAT = Format(
    name="onnx",
    description="ONNX QDQ INT8 (+ .ort): ONNX Runtime on phones, Jetson, servers",
    builder=_builder,
    backends=(OnnxRuntimeBackend,),
    extra="edgekit[onnx]",
    serving_platform="onnxruntime_onnx",
    bare_suffixes=(".onnx",),
)
