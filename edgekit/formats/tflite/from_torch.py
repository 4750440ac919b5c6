"""TFLite from a PyTorch module (``edgekit.conversion.forms.TORCH_PROGRAM``): litert-torch with PT2E static INT8 quantization (child side).

Runs in litert-torch's own environment (``edgekit.conversion.toolenv.LITERT_TORCH``): the model is wrapped
so that the LiteRT signature carries the source's input and output names, exported with
``torch.export`` on one calibration sample (batch 1), prepared with litert-torch's symmetric
per-channel PT2E quantizer, calibrated on every calibration sample, converted, and written
(an int8 sigmoid/softmax given the output scale LiteRT's kernels need: ``requantize``).
The result takes int8 inputs in the source's layout (NCHW for images: litert-torch inserts the
transposes) and returns float outputs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...conversion import worker
from ...conversion.forms import ModelForm
from ...conversion.messages import Message
from ...conversion.pt2e import pattern_programs_exported_once, qat_folding_only_where_it_can_match
from ..building import read_samples


@dataclass(frozen=True)
class TorchRequest(Message):
    """litert-torch on a PyTorch form: PT2E static INT8 into ``output`` and the float conversion
    into ``float_output``; ``pt2e=False``: the float conversion only (for LiteRT Quantizer)."""

    model: ModelForm
    calibration_npy: str
    output: str
    output_names: tuple[str, ...]
    float_output: str | None = None
    pt2e: bool = True


@dataclass(frozen=True)
class TorchReport(Message):
    torch: str
    litert_torch: str
    seconds: float
    fixed_output_scales: list[str]


def convert_torch(request: TorchRequest) -> TorchReport:
    """PT2E static INT8 into ``output`` and the float conversion into ``float_output``;
    ``pt2e=False``: the float conversion only (quantized afterwards by LiteRT Quantizer)."""
    import litert_torch
    import torch
    from litert_torch.quantize import pt2e_quantizer_utils
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from ...conversion import histogram_search
    from . import signature_names
    from ...conversion.forms import flatten_outputs, load_module
    from .requantize import fix_int8_output_scales

    output, output_names, float_output = request.output, list(request.output_names), request.float_output
    samples = read_samples(request.calibration_npy)
    module, names = load_module(request.model, example={k: np.asarray(v[:1]) for k, v in samples.items()},
                                submodules=True)
    if list(samples) == [""]:
        samples = {names[0]: samples[""]}

    class Named(torch.nn.Module):
        """The source model with keyword inputs and a dict of outputs: LiteRT's signature names."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def train(self, mode: bool = True) -> "Named":
            # the source is already in eval mode, and a torch.export program's module refuses train()
            self.training = mode
            return self

        def forward(self, **inputs: Any) -> dict[str, Any]:
            produced = flatten_outputs(self.inner(*[inputs[keywords[n]] for n in names]))
            return dict(zip(output_names, produced))

    keywords = signature_names.identifiers(names)  # forward's keywords: the signature, back to names below

    def sample(i: int) -> dict[str, Any]:
        return {keywords[n]: torch.from_numpy(_model_dtype(np.asarray(samples[n][i : i + 1]))) for n in names}

    started = time.perf_counter()
    if not request.pt2e:
        litert_torch.convert(Named().eval(), (), sample_kwargs=sample(0)).export(float_output)
        signature_names.restore(float_output, keywords)
        return TorchReport(torch=torch.__version__, litert_torch=_version("litert-torch"),
                           seconds=round(time.perf_counter() - started, 3), fixed_output_scales=[])
    total = len(next(iter(samples.values())))
    loops = [f"inner.{path}" for path in getattr(module, "loop_modules", ())]  # an unrolled loop's steps: float
    quantizer = (_outside(PT2EQuantizer, loops) if loops else PT2EQuantizer)().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    graph = torch.export.export(Named().eval(), (), sample(0)).module()
    pattern_programs_exported_once(pt2e_quantizer_utils)  # conv + batch-norm patterns: once per child
    histogram_search.install()  # the same ranges, milliseconds per observed tensor instead of 75
    graph = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for i in range(total):
            if i % 10 == 0:
                worker.report_progress(i, total)
            graph(**sample(i))
    worker.report_progress(total, total)
    with qat_folding_only_where_it_can_match():
        graph = convert_pt2e(graph, fold_quantize=False)
    edge = litert_torch.convert(graph, (), sample_kwargs=sample(0), quant_config=QuantConfig(pt2e_quantizer=quantizer))
    edge.export(output)
    signature_names.restore(output, keywords)
    fixed_scales = fix_int8_output_scales(output)  # a sigmoid sharing a concat's scale, as LiteRT's kernels need it
    seconds = time.perf_counter() - started
    if float_output:  # the float conversion, to tell conversion error from quantization error
        litert_torch.convert(Named().eval(), (), sample_kwargs=sample(0)).export(float_output)
        signature_names.restore(float_output, keywords)
    return TorchReport(torch=torch.__version__, litert_torch=_version("litert-torch"), seconds=round(seconds, 3),
                       fixed_output_scales=list(fixed_scales))


def _outside(base: type, modules: list[str]) -> type:
    """litert-torch's PT2E quantizer annotating only the nodes outside ``modules`` (its own module
    filters take no None config, and read module names with their underscores as dots)."""
    from ...conversion.pt2e import outside_of

    class Outside(base):  # type: ignore[misc, valid-type]
        def _annotate_for_static_quantization_config(self, model: Any) -> Any:
            self._annotate_all_static_patterns(model, self.global_config, outside_of(modules))
            return model

    return Outside


def _model_dtype(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) if x.dtype.kind == "i" else x.astype(np.float32)


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


UNTYPED_MODULES = {"InterpreterModule", "UnflattenedModule"}


def torch_layer(tensor: str, layer_names: list[str] | None = None) -> str:
    """The user's layer a litert-torch tensor came from, for messages.

    litert-torch names a tensor by the module path that computed it, one ``Type_attribute``
    part per module: ``...convert_torch.<locals>.Named/pkg.Net_inner/torch.nn.modules.conv.Conv1d_conv;2``
    (below edgekit's wrapper: the user's model, then its submodules). The layer is the attribute
    path below the model, with the innermost module's type (``conv (Conv1d)``), or the model's
    own ``forward`` for an op written there (``Net.forward``). A module edgekit rebuilt from an
    ONNX graph holds one submodule per ONNX node (``conversion.layer_names.attribute_name``): its layer is that
    node, by its ONNX name where ``layer_names`` holds it (``/conv/Conv (Conv)``)."""
    parts = tensor.split(";")[0].split("/")
    wrapper = next((i for i, part in enumerate(parts) if part.endswith(f"{convert_torch.__name__}.<locals>.Named")), None)
    if wrapper is None or wrapper + 1 >= len(parts):
        return tensor.split(";")[0] or tensor
    below = [_type_and_attribute(part) for part in parts[wrapper + 1 :]]
    model_type = below[0][0]
    if len(below) == 1:
        return f"{model_type}.forward"
    attributes = ".".join(attribute for _, attribute in below[1:])
    if len(below) == 2 and layer_names:
        from ...conversion.layer_names import LayerNames

        attributes = LayerNames(tuple(layer_names)).original(attributes)
    kind = below[-1][0]
    # torch.export.unflatten's modules are all InterpreterModule: the attribute path names the layer
    return attributes if kind in UNTYPED_MODULES else f"{attributes} ({kind})"


def _type_and_attribute(part: str) -> tuple[str, str]:
    """``torch.nn.modules.conv.Conv1d_conv`` -> (``Conv1d``, ``conv``): the class name ends at the
    first underscore after the last dot (attribute names may hold underscores)."""
    qualified, _, _ = part.rpartition(".")
    rest = part[len(qualified) + 1 :] if qualified else part
    class_name, _, attribute = rest.partition("_")
    return class_name, attribute or rest
