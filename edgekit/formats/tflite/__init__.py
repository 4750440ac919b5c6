"""TFLite (LiteRT): full-integer INT8 ``.tflite`` for Android, Raspberry Pi, Linux, microcontrollers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...conversion import forms
from ..base import Accepts, EXPLAIN, Format
from ..plan import FLOAT, INT16
from .backend import LiteRTBackend
from .notes import build_notes

if TYPE_CHECKING:
    from ..building import Builder


def _builder() -> Builder:
    from .builder import TFLiteBuilder

    return TFLiteBuilder()


FORMAT = Format(
    name="tflite",
    description="full-integer INT8 TFLite (LiteRT): Android, Raspberry Pi, Linux, microcontrollers",
    builder=_builder,
    backends=(LiteRTBackend,),
    extra="edgekit[tflite]",
    serving_platform="tflite",
    bare_suffixes=(".tflite",),
    notes=build_notes,
    keeps_learned_ranges=("QDQ", "fake-quant"),
    # TFLiteConverter / litert-torch (PT2E) by default; a layer's float or int16 precision through
    # LiteRT Quantizer on the float conversion (tflite/quantizer.py), on every route
    accepts=(Accepts(forms.TF_GRAPH, honours=(FLOAT, INT16, EXPLAIN)),
             # litert-torch has no conversion for recurrent layers; a PyTorch QAT module it would
             # quantize a second time (PT2E): it goes through its QDQ export, whose ranges are carried
             Accepts(forms.TORCH_PROGRAM, honours=(FLOAT, INT16, EXPLAIN),
                     cannot=forms.RECURRENT_OPS + forms.QUANTIZED_OPS)),
)
