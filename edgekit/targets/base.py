"""Build-side output formats (not device profiles: those are data in the top-level ``targets/``).

A Target turns the exported float SavedModel plus the preprocessed calibration samples into
one INT8 artifact inside the package being staged, and says which runtime backend can run it
so the packager can validate it against the float model.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..manifest import Artifact


@dataclass
class BuildContext:
    """Everything a target needs; shared by all targets of one packaging run."""

    saved_model: str | None  # float SavedModel exported from the source (None for an ONNX source)
    calibration_npy: str  # preprocessed float32 calibration inputs, shape (N, ...)
    package_dir: Path  # the package being staged; artifacts go below it
    workdir: Path  # scratch space for intermediates (float ONNX, ...), removed afterwards
    source_path: str = ""
    source_format: str = ""  # keras, h5, saved_model, onnx
    allow_float_ops: bool = False
    layer_names: list[str] = field(default_factory=list)  # to name layers in op errors
    keep_float: list[str] = field(default_factory=list)  # layers to leave in float
    calibration_method: str = "minmax"  # minmax | entropy | percentile (ONNX)
    onnx_activations: str = "s8"  # s8 (S8S8) | u8 (U8S8)
    reduce_range: bool = False
    max_intermediate_outputs: int | None = None  # bounds ONNX calibration memory
    timeout_s: float | None = None
    on_progress: Callable[[int, int], None] | None = None  # calibration samples done, total
    float_onnx: str | None = None  # set once exported (or the ONNX source itself)
    tf2onnx_version: str = ""
    explain_npy: str | None = None  # samples for the per-layer error report (--explain); None = no report
    eval_npy: str | None = None  # validation inputs (for targets that validate without a runtime)
    coreml_activations: str = "int8"  # int8 (W8A8) | float16 (weights-only INT8)
    evaluated_outputs: dict[str, str] = field(default_factory=dict)  # target -> .npy of outputs on eval_npy


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
    return parts[1] if len(parts) > 2 else tensor_name


def in_layer(node_name: str, layer: str) -> bool:
    """Whether a converted node (``model/LAYER_1/op``, fused names joined by ';') comes from ``layer``."""
    pattern = re.compile(rf"(^|/){re.escape(layer)}(_\d+)?(/|$)")
    return node_name == layer or any(pattern.search(part) for part in node_name.split(";"))


def worst_layers(rows: list[dict], limit: int = 20) -> list[dict]:
    """Per-layer error rows sorted worst first (lowest SQNR), non-finite SQNR (exact) last."""
    finite = [r for r in rows if r.get("sqnr_db") is not None and r["sqnr_db"] == r["sqnr_db"] and abs(r["sqnr_db"]) != float("inf")]
    exact = [r for r in rows if r not in finite]
    return (sorted(finite, key=lambda r: r["sqnr_db"]) + exact)[:limit]


class Target(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    backend: ClassVar[str]  # name in edgekit.backends that runs (and validates) the artifact

    @abstractmethod
    def build(self, context: BuildContext) -> Artifact:
        """Convert, calibrate and write the artifact; return its manifest entry."""
