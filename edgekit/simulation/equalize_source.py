"""Cross-layer equalization carried to the source's own model, so that the formats that convert
the user's PyTorch program or Keras model (litert-torch, ExecuTorch, TFLite from a SavedModel,
Core ML) build the same equalized network as the formats that convert the simulated ONNX graph.

The simulation equalizes its float ONNX graph (``equalize.py``) and records each pair's scale per
channel, by ONNX node and initializer. Here each pair is placed on the source's parameters:

* **PyTorch**: an initializer is named after its parameter (``0.weight``) by the exporter; where a
  BatchNorm was folded into the convolution, the node's module is the BatchNorm, and its affine
  weight and bias take the division. The edits are written to a file, and the source's loader is
  wrapped (``load_equalized``) so every converter child loads the module with them applied.
* **Keras**: the layer of each node (``LayerNames.plan_layer``); a convolution read by a
  BatchNormalization alone has its division on the BatchNormalization's gamma and beta. The
  equalized model is saved (``.keras``) and exported as a SavedModel, the forms TFLite and Core ML read.

Either way the float function must be unchanged: both models run the calibration samples and
any difference beyond float rounding refuses the whole transfer (``why_not``), and those formats
build the model as given. Child side: imports torch or keras.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..conversion.messages import Message

TOLERANCE = 1e-3  # the largest difference allowed, relative to each output's largest value
CHECK_SAMPLES = 16  # calibration samples both models run for the check
EQUALIZED_LOADER = f"{__name__}:load_equalized"


@dataclass(frozen=True)
class SourceEqualizeRequest(Message):
    """The source's form ``form`` (a ``ModelForm`` as a dict) equalized by ``scales_json``."""

    form: dict[str, Any]
    scales_json: str
    samples_npy: str
    output_dir: str
    module_paths: dict[str, str]  # ONNX node -> its PyTorch module (``LayerNames.module_paths``)
    layer_names: tuple[str, ...]  # the Keras layers (``LayerNames.plan_layer``)


@dataclass(frozen=True)
class SourceEqualizeReport(Message):
    forms: dict[str, dict[str, Any]]  # form name -> the equalized form (``ModelForm.to_dict``)
    largest_difference: float = 0.0  # between the two models' outputs, relative to each output's range
    why_not: str = ""


class NotPlaceable(Exception):
    """A pair the source's parameters cannot take exactly."""


def equalize_source_model(request: SourceEqualizeRequest) -> SourceEqualizeReport:
    from ..conversion.forms import KERAS_MODEL, ModelForm

    form = ModelForm.from_dict(request.form)
    scales = json.loads(Path(request.scales_json).read_text())
    try:
        if form.form == KERAS_MODEL:
            return _keras(form, scales, request)
        return _torch(form, scales, request)
    except NotPlaceable as exc:
        return SourceEqualizeReport(forms={}, why_not=str(exc))


def source_forms(forms: Any, simulated_path: str) -> dict[str, list[Any]]:
    """The source's forms (``SourceDescription.forms``) the simulated graph is not, by framework:
    its PyTorch forms (one module behind them all) and its Keras model (the SavedModel exported
    from it comes with it)."""
    from ..conversion.forms import KERAS_MODEL, ONNX_REBUILD_LOADER, TORCH_MODULE, TORCH_PROGRAM

    found: dict[str, list[Any]] = {}
    for form in forms.values():
        if form.path == simulated_path:
            continue
        if form.form in (TORCH_PROGRAM, TORCH_MODULE) and form.loader and form.loader != ONNX_REBUILD_LOADER:
            found.setdefault("PyTorch", []).append(form)
        elif form.form == KERAS_MODEL:
            found.setdefault("Keras", []).append(form)
    return found


# --- PyTorch --------------------------------------------------------------------------------


def load_equalized(path: str, example: dict[str, Any] | None = None, loader: str = "",
                   arguments: dict[str, Any] | None = None, edits: str = "",
                   submodules: bool = False) -> tuple[Any, list[str]]:
    """The loader of an equalized PyTorch form: the source's own loader, then the edits."""
    from ..conversion.forms import ModelForm, TORCH_PROGRAM, load_module

    module, names = load_module(ModelForm(TORCH_PROGRAM, path, loader, arguments or {}), example, submodules)
    apply_torch_edits(module, json.loads(Path(edits).read_text()))
    return module, names


def apply_torch_edits(module: Any, edits: list[dict[str, Any]]) -> None:
    """Each edit divides or multiplies one parameter along one axis by its scale per channel."""
    import torch

    tensors = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(dict(module.named_buffers(remove_duplicate=False)))
    with torch.no_grad():
        for edit in edits:
            tensor = tensors[edit["name"]]
            scale = torch.tensor(edit["scale"], dtype=tensor.dtype)
            shape = [1] * tensor.dim()
            shape[edit["axis"]] = -1
            scale = scale.reshape(shape)
            tensor.copy_(tensor / scale if edit["divide"] else tensor * scale)


def torch_edits(parameters: dict[str, Any], scales: list[dict[str, Any]],
                module_paths: dict[str, str]) -> list[dict[str, Any]]:
    """Each pair's rescale as edits of named parameters (``parameters``: name -> shape)."""
    edits: list[dict[str, Any]] = []
    for pair in scales:
        scale = np.asarray(pair["scale"], dtype=np.float64)
        channels = len(scale)
        owner = module_paths.get(pair["first"], "")
        weight = _parameter(pair["weight"], f"{owner}.weight", parameters)
        affine = f"{owner}.weight" if owner else ""
        if affine and affine != weight and len(parameters.get(affine, ())) == 1 \
                and parameters[affine][0] == channels:  # a BatchNorm folded into the convolution
            edits += [{"name": affine, "axis": 0, "scale": list(scale), "divide": True}]
            if f"{owner}.bias" in parameters:
                edits.append({"name": f"{owner}.bias", "axis": 0, "scale": list(scale), "divide": True})
        else:
            if weight is None or parameters[weight][0] != channels:
                raise NotPlaceable(f"the weights of {pair['first']} are not a parameter of the PyTorch program")
            edits.append({"name": weight, "axis": 0, "scale": list(scale), "divide": True})
            if pair["bias"]:
                bias = _parameter(pair["bias"], f"{owner}.bias", parameters)
                if bias is None:
                    raise NotPlaceable(f"the bias of {pair['first']} is not a parameter of the PyTorch program")
                edits.append({"name": bias, "axis": 0, "scale": list(scale), "divide": True})
        reader = _parameter(pair["reader_weight"], f"{module_paths.get(pair['second'], '')}.weight", parameters)
        if reader is None:
            raise NotPlaceable(f"the weights of {pair['second']} are not a parameter of the PyTorch program")
        shape = parameters[reader]
        if pair["depthwise_reader"]:
            if shape[0] % channels:
                raise NotPlaceable(f"{pair['second']}'s weights do not match {pair['first']}'s channels")
            edits.append({"name": reader, "axis": 0, "scale": list(np.repeat(scale, shape[0] // channels)),
                          "divide": False})
        else:
            if len(shape) < 2 or shape[1] != channels:
                raise NotPlaceable(f"{pair['second']}'s weights do not match {pair['first']}'s channels")
            edits.append({"name": reader, "axis": 1, "scale": list(scale), "divide": False})
    return edits


def _parameter(initializer: str, by_module: str, parameters: dict[str, Any]) -> str | None:
    """The parameter an initializer holds: named after it by the exporter, else by its node's module."""
    if initializer in parameters:
        return initializer
    return by_module if by_module in parameters and not by_module.startswith(".") else None


def _torch(form: Any, scales: list[dict[str, Any]], request: SourceEqualizeRequest) -> SourceEqualizeReport:
    import torch

    from ..conversion.forms import flatten_outputs, load_module
    from ..formats.building import read_samples

    module, names = load_module(form)
    parameters = {name: tuple(t.shape) for name, t in
                  [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]}
    edits = torch_edits(parameters, scales, request.module_paths)
    samples = read_samples(request.samples_npy)
    feeds = [torch.from_numpy(np.array((samples[""] if "" in samples else samples[n])[:CHECK_SAMPLES]))
             for n in names]
    with torch.no_grad():
        before = [np.asarray(v.detach().float()) for v in flatten_outputs(module(*feeds))]
        apply_torch_edits(module, edits)
        after = [np.asarray(v.detach().float()) for v in flatten_outputs(module(*feeds))]
    largest = _largest_difference(before, after)
    if largest > TOLERANCE:
        raise NotPlaceable(f"the equalized PyTorch program's outputs differ from its own by {largest:.1e} "
                           "of their range")
    path = Path(request.output_dir) / "torch-equalization.json"
    path.write_text(json.dumps(edits))
    arguments = {"loader": form.loader, "arguments": dict(form.arguments), "edits": str(path)}
    return SourceEqualizeReport(forms={form.form: {**form.to_dict(), "loader": EQUALIZED_LOADER,
                                                   "arguments": arguments}}, largest_difference=largest)


def _largest_difference(before: list[np.ndarray], after: list[np.ndarray]) -> float:
    if len(before) != len(after):
        return float("inf")
    return max((float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), 1e-6) if b.size else 0.0
                for a, b in zip(after, before)), default=0.0)


# --- Keras ----------------------------------------------------------------------------------


def _keras(form: Any, scales: list[dict[str, Any]], request: SourceEqualizeRequest) -> SourceEqualizeReport:
    import keras

    from ..conversion.forms import KERAS_MODEL, TF_GRAPH
    from ..formats.building import read_samples
    from ..conversion.layer_names import LayerNames

    model = keras.models.load_model(form.path, compile=False, safe_mode=True)
    layers = {layer.name: layer for layer in _keras_layers(model)}
    names = LayerNames(tuple(request.layer_names))
    updates: dict[str, list[np.ndarray]] = {}

    def weights(layer: Any) -> list[np.ndarray]:
        return updates.setdefault(layer.name, [np.asarray(w, dtype=np.float64) for w in layer.get_weights()])

    for pair in scales:
        scale = np.asarray(pair["scale"], dtype=np.float64)
        first = layers.get(names.plan_layer(pair["first"]))
        second = layers.get(names.plan_layer(pair["second"]))
        if first is None or second is None:
            raise NotPlaceable(f"{pair['first']} and {pair['second']} are not layers of the Keras model")
        if type(second).__name__ == "BatchNormalization":  # the reader folded its BatchNormalization, named after it
            second = _keras_writer(second)
        if first is second:  # a separable convolution's depthwise part, read by its pointwise part
            _within_separable(first, weights(first), scale, pair)
            continue
        readers = _keras_readers(first)
        if type(first).__name__ == "BatchNormalization":  # the node named after the BatchNormalization folded into it
            _divide_batchnorm(first, weights(first), scale)
        elif len(readers) == 1 and type(readers[0]).__name__ == "BatchNormalization" and readers[0] is not second:
            _divide_batchnorm(readers[0], weights(readers[0]), scale)
        else:
            _divide_keras_conv(first, weights(first), scale)
        _multiply_keras_reader(second, weights(second), scale, pair)
    samples = read_samples(request.samples_npy)
    inputs = [np.asarray(next(iter(samples.values())) if len(samples) == 1 else samples[t.name.split(":")[0]])
              [:CHECK_SAMPLES] for t in model.inputs]
    before = [np.asarray(v) for v in _as_list(model(inputs if len(inputs) > 1 else inputs[0], training=False))]
    for name, values in updates.items():
        layer = layers[name]
        layer.set_weights([v.astype(w.dtype) for v, w in zip(values, layer.get_weights())])
    after = [np.asarray(v) for v in _as_list(model(inputs if len(inputs) > 1 else inputs[0], training=False))]
    largest = _largest_difference(before, after)
    if largest > TOLERANCE:
        raise NotPlaceable(f"the equalized Keras model's outputs differ from its own by {largest:.1e} of their range")
    folder = Path(request.output_dir)
    keras_path, saved_model = folder / "equalized.keras", folder / "equalized-savedmodel"
    model.save(keras_path)
    model.export(str(saved_model), format="tf_saved_model", verbose=False)
    return SourceEqualizeReport(forms={KERAS_MODEL: {**form.to_dict(), "path": str(keras_path)},
                                       TF_GRAPH: {**form.to_dict(), "form": TF_GRAPH, "path": str(saved_model)}},
                                largest_difference=largest)


def _keras_layers(model: Any) -> list[Any]:
    found, stack = [], [model]
    while stack:
        layer = stack.pop()
        found.append(layer)
        stack.extend(getattr(layer, "layers", []) or [])
    return found


def _keras_writer(layer: Any) -> Any:
    """The layer whose output ``layer`` reads (its one input)."""
    nodes = getattr(layer, "_inbound_nodes", [])
    tensors = list(getattr(nodes[0], "input_tensors", [])) if len(nodes) == 1 else []
    if len(tensors) != 1 or not hasattr(tensors[0], "_keras_history"):
        raise NotPlaceable(f"Keras layer {layer.name} has no single layer before it")
    return tensors[0]._keras_history[0]


def _keras_readers(layer: Any) -> list[Any]:
    return [node.operation for node in getattr(layer, "_outbound_nodes", [])]


SEPARABLE = ("SeparableConv1D", "SeparableConv2D")  # weights: depthwise kernel, pointwise kernel, bias
CONVOLUTIONS = ("Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2D", "DepthwiseConv1D")


def _divide_keras_conv(layer: Any, values: list[np.ndarray], scale: np.ndarray) -> None:
    """Output channel c divided by ``scale[c]``: the kernel's and the bias's (a separable
    convolution's pointwise kernel: its output is the layer's)."""
    kind = type(layer).__name__
    if kind in SEPARABLE and len(values) >= 2:
        if values[1].shape[-1] != len(scale):
            raise NotPlaceable(f"Keras layer {layer.name} writes {values[1].shape[-1]} channels, not {len(scale)}")
        values[1] = values[1] / scale
        if len(values) > 2:
            values[2] = values[2] / scale
        return
    if kind not in CONVOLUTIONS or not values:
        raise NotPlaceable(f"Keras layer {layer.name} ({kind}) cannot take a rescale of its output channels")
    values[0] = _divide_depthwise(layer, values[0], scale) if kind.startswith("Depthwise") else \
        _checked(layer, values[0], scale) / scale
    if len(values) > 1:
        values[1] = values[1] / scale


def _divide_depthwise(layer: Any, kernel: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """A depthwise kernel (..., in, multiplier) divided per output channel c * multiplier + m."""
    shape = kernel.shape
    flat = kernel.reshape(shape[:-2] + (shape[-2] * shape[-1],))
    return (_checked(layer, flat, scale) / scale).reshape(shape)


def _checked(layer: Any, kernel: np.ndarray, scale: np.ndarray) -> np.ndarray:
    if kernel.shape[-1] != len(scale):
        raise NotPlaceable(f"Keras layer {layer.name} writes {kernel.shape[-1]} channels, not {len(scale)}")
    return kernel


def _within_separable(layer: Any, values: list[np.ndarray], scale: np.ndarray, pair: dict[str, Any]) -> None:
    """A separable convolution's depthwise output channels divided, its pointwise kernel's input
    channels multiplied: the two halves of one Keras layer, the pair the ONNX graph shows."""
    if type(layer).__name__ not in SEPARABLE or not pair.get("depthwise_first") or len(values) < 2:
        raise NotPlaceable(f"{pair['first']} and {pair['second']} both belong to Keras layer {layer.name}, which is "
                           "not a separable convolution")
    values[0] = _divide_depthwise(layer, values[0], scale)
    if values[1].shape[-2] != len(scale):
        raise NotPlaceable(f"Keras layer {layer.name}'s pointwise kernel does not read {len(scale)} channels")
    values[1] = values[1] * scale.reshape((len(scale), 1))


def _divide_batchnorm(layer: Any, values: list[np.ndarray], scale: np.ndarray) -> None:
    if not getattr(layer, "scale", False):
        raise NotPlaceable(f"Keras layer {layer.name} (BatchNormalization without gamma) cannot take a rescale")
    values[0] = values[0] / scale  # gamma
    if getattr(layer, "center", False):
        values[1] = values[1] / scale  # beta


def _multiply_keras_reader(layer: Any, values: list[np.ndarray], scale: np.ndarray, pair: dict[str, Any]) -> None:
    """Input channel c multiplied by ``scale[c]`` (a separable convolution's depthwise kernel)."""
    kind = type(layer).__name__
    index = 0
    if kind in SEPARABLE and not pair.get("depthwise_reader"):
        raise NotPlaceable(f"Keras layer {layer.name} is read through its pointwise half, not its depthwise one")
    if (kind not in CONVOLUTIONS and kind not in SEPARABLE) or not values or values[index].shape[-2] != len(scale):
        raise NotPlaceable(f"Keras layer {layer.name} ({kind}) cannot take a rescale of its input channels")
    values[index] = values[index] * scale.reshape((len(scale), 1))  # (..., in, out or multiplier)


def _as_list(produced: Any) -> list[Any]:
    if isinstance(produced, dict):
        return list(produced.values())
    return list(produced) if isinstance(produced, (list, tuple)) else [produced]
