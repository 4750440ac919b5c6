"""Model forms: what a format converts from, and what a source (or a conversion step) provides.

A form is a model in one framework's terms, independent of the file the user passed: a
TensorFlow graph (a SavedModel directory), a float ONNX graph, a PyTorch module that
``torch.export`` can export, one ``torch.jit`` can trace (TorchScript included), or a Keras
model file. Sources say which forms each of their kinds provides (``Source.provides``), formats
which they accept (``Format.accepts``), and ``edgekit.routing.routes`` joins the two, with conversion
steps (tf2onnx, ONNX -> PyTorch) in between. So a format never asks what the user's file was,
and a new source reaches every format that accepts a form it provides.
"""

import importlib
import inspect
from types import MappingProxyType
from collections.abc import Mapping
from typing import Any, NamedTuple

from .layer_names import MODULE, ONNX_NODE, SCOPE

TF_GRAPH = "tf-graph"  # a SavedModel directory with a serving_default signature
ONNX_GRAPH = "onnx-graph"  # a float ONNX file
TORCH_PROGRAM = "torch-program"  # a PyTorch module torch.export can export (litert-torch needs one)
# what loads a PyTorch module rebuilt from an ONNX graph (``conversion/onnx_torch``): a form with this
# loader is the ONNX graph at its path, read by the formats that convert PyTorch
ONNX_REBUILD_LOADER = "edgekit.conversion.onnx_torch:load_module"
TORCH_MODULE = "torch-module"  # a PyTorch module torch.jit can trace, or a ScriptModule
KERAS_MODEL = "keras-model"  # a Keras .keras/.h5 file
# a TF_GRAPH form's argument: the same graph traced at batch 1 with its variables folded (a SavedModel),
# made where TensorFlow's converter lowers the graph's TensorList ops (recurrent layers) only at a static shape
STATIC_BATCH_GRAPH = "static_batch_graph"

RECURRENT_OPS = ("LSTM", "GRU", "RNN")  # ONNX's recurrent op types: what some route steps cannot convert
# ONNX ops of a quantized graph (QDQ pairs, QOperator kernels): its learned ranges, which a step
# that rebuilds a float model would lose (and a quantizer would then choose again)
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")  # a QDQ graph's ops: the float graph it simulates, with its ranges
QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                 "ConvInteger", "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul", "QGemm",
                 "QLinearGlobalAveragePool", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearSoftmax")

FORMS = (TF_GRAPH, ONNX_GRAPH, TORCH_PROGRAM, TORCH_MODULE, KERAS_MODEL)
# the layer names a converter of each form takes by default (``layer_names``: SCOPE, ONNX_NODE, MODULE)
NAME_KIND = {TF_GRAPH: SCOPE, KERAS_MODEL: SCOPE, ONNX_GRAPH: ONNX_NODE, TORCH_PROGRAM: MODULE, TORCH_MODULE: MODULE}


class ModelForm(NamedTuple):
    """One form of the model, as a format's converter reads it.

    ``path`` is the file or directory; a PyTorch form also names the function that loads it
    (``loader``, ``module:function``, called with ``(path, example=..., **arguments)`` and
    returning ``(module, input_names)``), since only its source knows how. ``via`` says which
    conversion steps made it from what the user passed ("" when the source provided it), for the
    manifest's converter record."""

    form: str
    path: str
    loader: str = ""
    arguments: Mapping[str, Any] = MappingProxyType({})  # a shared default: read-only
    via: str = ""
    # (no ``from __future__ import annotations`` here: docs/architecture.md, cold start)

    def to_dict(self) -> dict[str, Any]:
        return {"form": self.form, "path": self.path, "loader": self.loader, "arguments": dict(self.arguments),
                "via": self.via}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelForm":
        return cls(str(data["form"]), str(data["path"]), str(data.get("loader", "")),
                   dict(data.get("arguments") or {}), str(data.get("via", "")))


def load_module(form: ModelForm, example: Mapping[str, Any] | None = None,
                submodules: bool = False) -> tuple[Any, list[str]]:
    """A PyTorch form's module (in eval mode) and its input names, by the form's own loader.
    ``example``: arrays by input name (``""`` for a one-input model), for loaders that
    specialise the module to a shape. ``submodules``: keep the model's submodules where the
    loader can (a ``torch.export`` program unflattened), for converters that name ops by them."""
    if form.form not in (TORCH_PROGRAM, TORCH_MODULE) or not form.loader:
        raise ValueError(f"{form.form} at {form.path} is not a loadable PyTorch form")
    from .torch_provenance import share_provenance

    share_provenance()  # the converters' FX passes that follow share node histories (torch_provenance.py)
    module_name, _, function = form.loader.partition(":")
    load = getattr(importlib.import_module(module_name), function)
    extra = {"submodules": True} if submodules and "submodules" in inspect.signature(load).parameters else {}
    return load(form.path, example=example, **dict(form.arguments), **extra)


def flatten_outputs(produced: Any) -> list[Any]:
    """A PyTorch module's outputs as a flat list, in order (a dict's values, nested tuples and lists)."""
    if isinstance(produced, dict):
        return list(produced.values())
    if isinstance(produced, (list, tuple)):
        return [t for item in produced for t in flatten_outputs(item)]
    return [produced]
