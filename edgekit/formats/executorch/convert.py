"""ExecuTorch ``.pte`` from a PyTorch program (``edgekit.conversion.forms.TORCH_PROGRAM``), child side.

The module is exported with ``torch.export`` at batch 1 (positional inputs in the source's order,
outputs flattened), quantized by PT2E with ExecuTorch's XNNPACK quantizer (symmetric int8,
per-channel weights, static int8 activations calibrated on every calibration sample), lowered
with the XNNPACK partitioner and serialized; the float program is lowered the same way as the
fallback. Layers the precision plan keeps in float get no quantizer annotation (a node filter
on ``nn_module_stack``: ``set_module_name(name, None)`` asserts in ExecuTorch 1.5.1): XNNPACK
runs them in float, or the portable kernels do. What ran where is read back from the lowered
program (``placement``, ``precision_of``). A program carries no tensor names, so both programs
get a constant method (``IO_METHOD``) returning the source's input and output names as JSON:
the backend reads them there.

A module rebuilt from an ONNX graph (``edgekit.conversion.onnx_torch``) holds one submodule per ONNX
node: its layers are named by ONNX node (``layer_names``), in the plan and in what is read back.

The steps live beside this module, one job each: ``quantize`` (the quantizer's annotations),
``plan_placement`` (where the plan's layers are), ``lowering`` (XNNPACK partitions, the ``.pte``)
and ``program_report`` (what the lowered program computes, and the per-layer report).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import worker
from ...conversion.forms import ModelForm
from ...conversion.messages import Message
from ...conversion import histogram_search
from ...conversion.pt2e import qat_folding_only_where_it_can_match
from ...errors import ConversionError
from ..building import read_samples
from ..plan import PrecisionPlan
from .lowering import lower_and_write
from .plan_placement import module_paths_of, plan_names_of_form, refuse_unknown_ops
from .program_report import per_layer_report, weighted_layers
from .ops import op_name
from .quantize import xnnpack_quantizer_for

OTHER_ROUTES = "build the other formats (--format tflite, onnx or coreml) for this model"


@dataclass(frozen=True)
class ExecuTorchRequest(Message):
    """One ``.pte`` build: the ``plan`` names layers by module path, or by ONNX node on a module
    rebuilt from ONNX (``layer_names``, that graph's nodes); ``explain_npy``: samples for the
    per-layer report. ``float_output``: where the float program goes (``None``: built already, or
    not shipped); ``float_outputs``: with no float program to run, where the exported float
    program's outputs on ``eval_npy``'s samples go (the conversion's float reference)."""

    model: ModelForm
    calibration_npy: str
    output: str
    output_names: tuple[str, ...]
    float_output: str | None = None
    float_outputs: str | None = None
    eval_npy: str | None = None
    plan: PrecisionPlan = PrecisionPlan()  # its float layers (the route builds no int16)
    layer_names: tuple[str, ...] = ()
    explain_npy: str | None = None


@dataclass(frozen=True)
class ProgramPrecision(Message):
    """What precision the lowered program computes in, read back from it (``precision_of``)."""

    label: str
    float_ops: list[dict[str, Any]]
    record: Any  # the manifest's precision record, stored as read


@dataclass(frozen=True)
class LearnedRanges(Message):
    """A quantized source's pairs found in the program (``carried``) and those not found."""

    carried: dict[str, Any]
    not_found: list[str]
    quantize_ops: int


@dataclass(frozen=True)
class ExecuTorchReport(Message):
    """What was built and what runs where, for the manifest."""

    torch: str
    executorch: str
    seconds: float
    inputs: tuple[str, ...]
    placement: dict[str, Any]
    precision: ProgramPrecision
    float_placement: dict[str, Any] | None = None
    explain: Any = None  # the per-layer report, stored as made
    weighted_layers: tuple[str, ...] = ()  # the layers the search can keep in float, input to output
    learned_ranges: LearnedRanges | None = None
    float_left_out: str = ""  # why the float program asked for was not lowered


FLOAT_LEFT_OUT = ("its unrolled loops already run in float in the INT8 program; a float program would repeat "
                  "minutes of lowering for the few layers outside them")


def convert_executorch(request: ExecuTorchRequest) -> ExecuTorchReport:
    """INT8 ``.pte`` into ``request.output`` (and the float one into ``float_output``); what was
    done and what runs where."""
    model, calibration_npy, output = request.model.to_dict(), request.calibration_npy, request.output
    output_names, float_output, explain_npy = list(request.output_names), request.float_output, request.explain_npy
    layer_names = list(request.layer_names)
    import torch

    from ...conversion.forms import load_module

    samples = read_samples(calibration_npy)
    module, names = load_module(ModelForm.from_dict(model), example={k: np.asarray(v[:1]) for k, v in samples.items()},
                                submodules=True)
    if list(samples) == [""]:
        samples = {names[0]: samples[""]}
    named = plan_names_of_form(model, layer_names)  # module path -> the plan's name, where rebuilt from ONNX
    paths, ops = module_paths_of(module, list(request.plan.floats), named)
    paths += list(getattr(module, "loop_modules", ()))  # an unrolled loop's steps stay float (onnx_torch)
    # imported once the model is known to be convertible (ExecuTorch and torchao take ~8 s to import)
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    histogram_search.install()

    def sample(i: int) -> tuple[Any, ...]:
        return tuple(torch.from_numpy(_model_dtype(np.asarray(samples[n][i : i + 1]))) for n in names)

    started = time.perf_counter()
    wrapped = positional(module)
    with torch.no_grad():  # checked before any conversion work: every output keeps its name
        produced = len(wrapped(*sample(0)))
    if produced != len(output_names):
        raise ConversionError(f"ExecuTorch: the program returns {produced} outputs, the model {len(output_names)}",
                              hint=OTHER_ROUTES)
    exported = _export(wrapped, sample(0))
    refuse_unknown_ops(exported, ops)
    quantizer = xnnpack_quantizer_for(XNNPACKQuantizer, get_symmetric_quantization_config, exported, paths, ops)
    graph = prepare_pt2e(exported.module(), quantizer)
    total = len(next(iter(samples.values())))
    with torch.no_grad():
        for i in range(total):
            if i % 10 == 0:
                worker.report_progress(i, total)
            graph(*sample(i))
    worker.report_progress(total, total)
    reference = copy.deepcopy(graph) if explain_npy else None  # the prepared graph computes in float
    with qat_folding_only_where_it_can_match():
        converted = convert_pt2e(graph)
    explained = None
    if explain_npy and reference is not None:
        explained = per_layer_report(reference, converted, _samples(explain_npy, names), named)
    quantized = _export(converted, sample(0))
    io = json.dumps({"inputs": list(names), "outputs": list(output_names)})
    loops = [f"inner.{path}" for path in getattr(module, "loop_modules", ())]
    placement, precision = lower_and_write(quantized, output, io, named, loops)
    seconds = time.perf_counter() - started
    # an unrolled loop runs its steps in float in the INT8 program already: a float program would
    # repeat minutes of lowering for the few layers outside it (the other formats' fallbacks serve)
    lower_float = bool(float_output) and not loops
    float_placement = lower_and_write(exported, float_output, io, named)[0] if lower_float else None
    if request.float_outputs and request.eval_npy and not lower_float:
        _write_float_outputs(exported, _samples(request.eval_npy, names), output_names, request.float_outputs)
    return ExecuTorchReport(
        torch=torch.__version__, executorch=_version("executorch"), seconds=round(seconds, 3), inputs=tuple(names),
        placement=placement, float_placement=float_placement, precision=ProgramPrecision.from_json(precision),
        explain=explained, weighted_layers=tuple(weighted_layers(exported.graph_module, named)),
        float_left_out=FLOAT_LEFT_OUT if float_output and not lower_float else "")


def _write_float_outputs(exported: Any, samples: list[tuple[Any, ...]], output_names: list[str], path: str) -> None:
    """The exported float program run by PyTorch on each sample, saved by output name (temp name,
    then rename): the conversion's float reference where no float program is lowered (lowering one
    costs about as much as the INT8 program's own, for a file the package would not ship)."""
    import torch

    program = exported.module()
    with torch.no_grad():
        rows = [[np.asarray(o.detach().numpy()) for o in program(*sample)] for sample in samples]
    stacked = {name: np.concatenate([row[i] for row in rows]) for i, name in enumerate(output_names)}
    target = Path(path)
    partial = target.with_name(target.name + ".partial.npz")
    np.savez(partial, **stacked)
    partial.replace(target)


def positional(module: Any) -> Any:
    """``module`` with positional inputs in the source's order and a tuple of outputs, in eval mode:
    what ``torch.export`` exports for ExecuTorch."""
    import torch

    from ...conversion.forms import flatten_outputs

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def train(self, mode: bool = True) -> "Positional":
            # the source is already in eval mode, and a torch.export program's module refuses train()
            self.training = mode
            return self

        def forward(self, *inputs: Any) -> tuple[Any, ...]:
            return tuple(flatten_outputs(self.inner(*inputs)))

    return Positional().eval()


def _samples(path: str, names: list[str]) -> list[tuple[Any, ...]]:
    """Each sample of a ``save_samples`` file as the program's positional inputs (batch 1)."""
    import torch

    stored = read_samples(path)
    stored = {names[0]: stored[""]} if list(stored) == [""] else stored
    count = len(next(iter(stored.values())))
    return [tuple(torch.from_numpy(_model_dtype(np.asarray(stored[n][i : i + 1]))) for n in names)
            for i in range(count)]


def _export(module: Any, example: tuple[Any, ...]) -> Any:
    import torch

    try:
        return torch.export.export(module, example)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many types; all mean "cannot export"
        raise ConversionError(f"ExecuTorch: torch.export could not export this model: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}", hint=OTHER_ROUTES) from None


def _model_dtype(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) if x.dtype.kind == "i" else x.astype(np.float32)


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def convert_executorch_kept(request: ExecuTorchRequest) -> ExecuTorchReport:
    """A quantized source's QDQ graph as a ``.pte`` with its own pairs: the graph rebuilt with its
    QuantizeLinear / DequantizeLinear as PyTorch's quantize ops (the ops ``convert_pt2e`` writes,
    ``conversion.onnx_torch`` with ``keep_qdq``), exported and lowered to XNNPACK as a PT2E program
    is: no observer, no calibration, the learned scales and zero points as given. What runs where
    is read back as for any build; the quantize ops in the program are counted against the source."""
    model, calibration_npy, output = request.model.to_dict(), request.calibration_npy, request.output
    output_names, layer_names = list(request.output_names), list(request.layer_names)
    import torch

    from ...conversion.onnx_torch import input_names, load

    form = ModelForm.from_dict(model)
    _refuse_narrowed_ranges(form.path)
    samples = read_samples(calibration_npy)
    names = input_names(form.path)
    samples = {names[0]: samples[""]} if list(samples) == [""] else samples
    example = {n: np.asarray(samples[n][:1]) for n in names}
    started = time.perf_counter()
    module = load(form.path, example, keep_qdq=True).eval()

    exported = _export(positional(module), tuple(torch.from_numpy(_model_dtype(example[n])) for n in names))
    named = plan_names_of_form(model, layer_names)
    io = json.dumps({"inputs": list(names), "outputs": list(output_names)})
    pairs = [(float(node.args[1]), int(node.args[2])) for node in exported.graph_module.graph.nodes
             if node.op == "call_function" and op_name(node.target) == "quantize_per_tensor"]
    import onnx

    from ...conversion.quantized import matched_ranges, strip_qdq

    carried, missing = matched_ranges(strip_qdq(onnx.load(form.path)), pairs)
    placement, precision = lower_and_write(exported, output, io, named)
    worker.report_progress(1, 1)
    return ExecuTorchReport(
        torch=torch.__version__, executorch=_version("executorch"), seconds=round(time.perf_counter() - started, 3),
        inputs=tuple(names), placement=placement, precision=ProgramPrecision.from_json(precision),
        learned_ranges=LearnedRanges(carried=carried, not_found=list(missing), quantize_ops=len(pairs)))


def _refuse_narrowed_ranges(path: str) -> None:
    """A pair on a range narrower than its type (PyTorch's ``reduce_range``: a Clip between the
    pair) has no form XNNPACK lowers as given: the clamp that keeps the source's arithmetic splits
    its partitions and the lowered program computes garbage (constant outputs, measured), and
    without it values past the range are not clipped as the source clips them. Refused by name."""
    import onnx

    from ...conversion.quantized import fold_integer_clips

    narrowed = fold_integer_clips(onnx.load(path).graph)
    if narrowed:
        raise ConversionError(
            f"ExecuTorch: {len(narrowed)} of the source's activation ranges are narrower than their integer type "
            "(reduce_range: a Clip between the QuantizeLinear / DequantizeLinear pair), which XNNPACK cannot "
            "lower as the source computes it",
            hint="package it for tflite, onnx and coreml, or train with reduce_range=False (quant_min/max the "
                 "type's full range)")
