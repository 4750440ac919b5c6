"""Conversion steps: one form of the model into another (``edgekit.forms``), for a format that
does not convert from what the source provides. Each step is declared once here, with what it
cannot convert (ONNX op types, refused when the model is described, before any conversion);
``edgekit.routes`` joins sources, steps and formats into the route table.

- ``tf2onnx`` (``tf2onnx.py``): a TensorFlow graph to a float ONNX graph, tf2onnx in its own process;
- ``onnx-to-torch`` (``onnx_torch/``): a float ONNX graph rebuilt as a PyTorch module, for the
  formats whose converters take PyTorch (litert-torch, coremltools' PyTorch frontend).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .. import forms
from ..forms import ModelForm
from .tf2onnx import tf2onnx


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


def onnx_to_torch(produces: str) -> Callable[[ModelForm, StepContext], ModelForm]:
    """ONNX -> a PyTorch module rebuilt from the graph (``onnx_torch``), loaded by the converter
    that needs it: nothing runs until then."""

    def step(form: ModelForm, context: StepContext) -> ModelForm:
        return ModelForm(produces, form.path, loader="edgekit.steps.onnx_torch:load_module",
                         via="edgekit ONNX -> PyTorch module")

    return step


UNROLLED = ("LSTM", "GRU")
UNROLLED_CANNOT = tuple(op for op in forms.RECURRENT_OPS if op not in UNROLLED)

CONVERSIONS: tuple[Conversion, ...] = (
    Conversion("tf2onnx", forms.TF_GRAPH, forms.ONNX_GRAPH, tf2onnx),
    # edgekit's ONNX -> PyTorch converter unrolls GRU and LSTM into linear layers and gates
    # (onnx_torch/recurrent.py); it has no plain RNN
    Conversion("onnx-to-torch", forms.ONNX_GRAPH, forms.TORCH_PROGRAM, onnx_to_torch(forms.TORCH_PROGRAM),
               UNROLLED_CANNOT, UNROLLED),
    Conversion("onnx-to-torch", forms.ONNX_GRAPH, forms.TORCH_MODULE, onnx_to_torch(forms.TORCH_MODULE),
               UNROLLED_CANNOT, UNROLLED),
)

__all__ = ["CONVERSIONS", "Conversion", "StepContext"]
