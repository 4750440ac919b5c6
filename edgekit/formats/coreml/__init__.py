"""CoreML: ML program ``.mlpackage`` (W8A8, or int8 weights) for iPhone, iPad and Mac."""

from __future__ import annotations

from ..base import Builder, Format
from .backend import CoreMLBackend


def _builder() -> Builder:
    from .build import CoreMLBuilder

    return CoreMLBuilder()


FORMAT = Format(
    name="coreml",
    description="CoreML ML program (.mlpackage) with int8 weights: iPhone, iPad, Mac",
    builder=_builder,
    backends=(CoreMLBackend,),
    extra="coremltools (macOS)",
    serving_platform="coreml",
)
