"""Build-side output formats (not device profiles: those are data in the top-level ``targets/``).

A Target turns the exported float SavedModel plus the preprocessed calibration samples into
one INT8 artifact inside the package being staged, and says which runtime backend can run it
so the packager can validate it against the float model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..manifest import Artifact


@dataclass
class BuildContext:
    saved_model: str  # float SavedModel exported from the source
    calibration_npy: str  # preprocessed float32 calibration inputs, shape (N, ...)
    package_dir: Path  # the package being staged; artifacts go below it
    allow_float_ops: bool = False
    layer_names: list[str] = field(default_factory=list)  # to name layers in op errors
    timeout_s: float | None = None
    on_progress: Callable[[int, int], None] | None = None  # calibration samples done, total


class Target(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    backend: ClassVar[str]  # name in edgekit.backends that runs (and validates) the artifact

    @abstractmethod
    def build(self, context: BuildContext) -> Artifact:
        """Convert, calibrate and write the artifact; return its manifest entry."""
