"""What a conversion step is: one form of the model into another (``edgekit.conversion.forms``), and what it reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ..conversion.forms import ModelForm


class StepContext(NamedTuple):
    """What a conversion step reads: scratch space, the time it may take, layer names for errors."""

    workdir: Path
    timeout_s: float | None = None
    layer_names: tuple[str, ...] = ()


class Conversion(NamedTuple):
    """One step from a form to another (run in a child process or as a tool, never in the parent)."""

    name: str
    consumes: str
    produces: str
    run: Callable[[ModelForm, "StepContext"], ModelForm]
    cannot: tuple[str, ...] = ()  # ONNX op types it has no conversion for (refused before it runs)
    rewrites: tuple[str, ...] = ()  # ONNX op types it turns into plain ops: the next converter never sees them
    # the layer name kind its product answers to where it renames layers (``conversion.layer_names``): the
    # ONNX -> PyTorch rebuild names each submodule after its ONNX node, so a plan reaches it by node
    names: str = ""

    @property
    def key(self) -> str:
        """Its name in the registry: one step may produce several forms (``onnx-to-torch -> torch-module``)."""
        return f"{self.name} -> {self.produces}"
