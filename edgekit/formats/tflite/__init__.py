"""TFLite (LiteRT): full-integer INT8 ``.tflite`` for Android, Raspberry Pi, Linux, microcontrollers."""

from __future__ import annotations

from ..base import Builder, Format
from .litert import LiteRTBackend


def _builder() -> Builder:
    from .build import TFLiteBuilder

    return TFLiteBuilder()


FORMAT = Format(
    name="tflite",
    description="full-integer INT8 TFLite (LiteRT): Android, Raspberry Pi, Linux, microcontrollers",
    builder=_builder,
    backends=(LiteRTBackend,),
    extra="edgekit[tflite]",
    serving_platform="tflite",
    bare_suffixes=(".tflite",),
)
