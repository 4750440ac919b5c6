"""ONNX: QDQ INT8 ``.onnx`` (+ ``.ort``) for ONNX Runtime on phones, Jetson and servers, and for
OpenVINO on x86 CPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...conversion import forms
from ..base import Accepts, EXPLAIN, Format, Option
from ..plan import FLOAT, INT16
from .device_rules import RULES
from .notes import build_notes
from .backend import OnnxRuntimeBackend
from .openvino import OpenVINOBackend

if TYPE_CHECKING:
    from ..building import Builder


def _builder() -> Builder:
    from .builder import ONNXBuilder

    return ONNXBuilder()


FORMAT = Format(
    name="onnx",
    description="ONNX QDQ INT8 (+ .ort): ONNX Runtime on phones, Jetson, servers",
    builder=_builder,
    backends=(OnnxRuntimeBackend, OpenVINOBackend),
    extra="edgekit[onnx]",
    serving_platform="onnxruntime_onnx",
    bare_suffixes=(".onnx",),
    options=(
        Option("calibration_method", "--calibration-method", "minmax", choices=("minmax", "entropy", "percentile"),
               help="ONNX activation calibration (TFLite always uses min/max)."),
        Option("onnx_activations", "--onnx-activations", "s8", choices=("s8", "u8"),
               help="ONNX activation type: s8 (S8S8, ONNX Runtime's first choice) or u8 (U8S8)."),
        Option("reduce_range", "--reduce-range", False, kind=bool,
               help="ONNX: 7-bit weights (can help U8S8 accuracy on CPUs without VNNI)."),
        Option("max_intermediate_outputs", "--calibration-batch", None, kind=int, minimum=1, metavar="N",
               help="ONNX: merge calibration ranges every N samples to bound memory on large models."),
    ),
    # quantize_static: nodes_to_exclude (float), TensorQuantOverrides (16-bit activations)
    accepts=(Accepts(forms.ONNX_GRAPH, honours=(FLOAT, INT16, EXPLAIN)),),
    device_rules=RULES,  # one INT8 build per CPU scheme (schemes.py): which one a device runs
    notes=build_notes,
    keeps_learned_ranges=("QDQ", "QOperator", "fake-quant"),
)
