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
"""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import worker
from ...conversion.forms import ModelForm
from ...conversion.messages import Message
from ...conversion import histogram_search
from ...conversion.pt2e import inside, module_paths, qat_folding_only_where_it_can_match
from ...errors import ConversionError
from ..building import read_samples
from ..plan import PrecisionPlan
from .backend import IO_METHOD
from .ops import NOT_COMPUTE, QDQ, TAIL_OPS, WEIGHTED

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
    named = _plan_names(model, layer_names)  # module path -> the plan's name, where rebuilt from ONNX
    paths, ops = _module_paths_of(module, list(request.plan.floats), named)
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
    _refuse_unknown_ops(exported, ops)
    quantizer = _quantizer(XNNPACKQuantizer, get_symmetric_quantization_config, exported, paths, ops)
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
    placement, precision = _lower_and_write(quantized, output, io, named, loops)
    seconds = time.perf_counter() - started
    # an unrolled loop runs its steps in float in the INT8 program already: a float program would
    # repeat minutes of lowering for the few layers outside it (the other formats' fallbacks serve)
    lower_float = bool(float_output) and not loops
    float_placement = _lower_and_write(exported, float_output, io, named)[0] if lower_float else None
    if request.float_outputs and request.eval_npy and not lower_float:
        _write_float_outputs(exported, _samples(request.eval_npy, names), output_names, request.float_outputs)
    return ExecuTorchReport(
        torch=torch.__version__, executorch=_version("executorch"), seconds=round(seconds, 3), inputs=tuple(names),
        placement=placement, float_placement=float_placement, precision=ProgramPrecision.from_json(precision),
        explain=explained, weighted_layers=tuple(_weighted_layers(exported.graph_module, named)),
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


def _plan_names(model: dict[str, Any], layer_names: list[str] | None) -> dict[str, str]:
    """Module path -> the plan's layer name on a module rebuilt from ONNX (``naming.plan_names``);
    empty on a PyTorch program, whose module paths are its layer names."""
    from ...conversion.forms import ONNX_REBUILD_LOADER, ModelForm

    form = ModelForm.from_dict(model)
    return plan_names(form.path, layer_names or ()) if form.loader == ONNX_REBUILD_LOADER else {}


def plan_names(onnx_path: str, layer_names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Attribute name -> the precision plan's name for it: the ONNX node itself where the source
    names its nodes (an ONNX source), else the source layer the node came from (a Keras layer:
    ``model/conv2/Conv2D`` -> ``conv2``), so a plan searched in the source's vocabulary (the
    simulation's) reaches every submodule of that layer on the rebuilt module."""
    import onnx

    from ...conversion.onnx_torch.naming import attribute_name
    from ...conversion.layer_names import layer_of

    known = list(layer_names)
    names = set(known)
    found: dict[str, str] = {}
    for node in onnx.load(onnx_path, load_external_data=False).graph.node:
        layer = node.name if not known or node.name in names else layer_of(node.name, known)
        found.setdefault(attribute_name(node.name), layer if layer in names else node.name)
    return found


def _module_paths_of(module: Any, layers: list[str], named: dict[str, str]) -> tuple[list[str], list[str]]:
    """The module paths of each layer to keep in float: the module itself, or on a module rebuilt
    from ONNX every submodule whose node belongs to it (``named``: path -> the plan's name; a Keras
    layer is several nodes); then the names that are no module, taken as traced ops of a
    ``forward`` (``cat``: torch.export's node name), checked once the program is exported."""
    from ...conversion.onnx_torch.naming import attribute_name

    modules = dict(module.named_modules()) if hasattr(module, "named_modules") else {}
    paths, ops = [], []
    for name in layers:
        found = [name] if name in modules else [path for path, layer in named.items()
                                                if layer == name and path in modules]
        if not found and attribute_name(name) in modules:
            found = [attribute_name(name)]
        paths += found
        if not found:
            ops.append(name)
    return paths, ops


def _refuse_unknown_ops(exported: Any, ops: list[str]) -> None:
    """A name kept in float that is neither a module nor a traced op of the program, by name."""
    traced = {node.name for node in exported.graph_module.graph.nodes if node.op == "call_function"}
    unknown = [name for name in ops if name not in traced]
    if unknown:
        raise ConversionError(f"ExecuTorch: no module or traced op named {', '.join(unknown)} in this PyTorch model",
                              hint="name layers by their module path (as --explain lists them), or an op of a "
                                   "forward by its torch.export name (cat, linear_1)")


def _samples(path: str, names: list[str]) -> list[tuple[Any, ...]]:
    """Each sample of a ``save_samples`` file as the program's positional inputs (batch 1)."""
    import torch

    stored = read_samples(path)
    stored = {names[0]: stored[""]} if list(stored) == [""] else stored
    count = len(next(iter(stored.values())))
    return [tuple(torch.from_numpy(_model_dtype(np.asarray(stored[n][i : i + 1]))) for n in names)
            for i in range(count)]


def _quantizer(xnnpack_quantizer: type, config: Any, exported: Any, kept_paths: list[str],
               kept_ops: tuple[str, ...] | list[str] = ()) -> Any:
    """ExecuTorch's XNNPACK quantizer, static int8 with per-channel weights, annotating every node
    but those of a layer kept in float, those reading integers (an embedding's token ids, a
    gather's indices: quantized, the op would get float ids) and an attention mask's mix into the
    scores with the softmax after it (``mask_nodes``)."""
    kept = frozenset(f"inner.{path}" for path in kept_paths)
    masked = mask_nodes(exported.graph_module.graph, set(exported.graph_signature.user_inputs))
    ops = set(kept_ops)

    def quantized(node: Any) -> bool:
        return (not _reads_integers(node) and node.name not in masked and node.name not in ops
                and not any(inside(path, kept) for path in module_paths(node)))

    base = _integer_scalars_kept(xnnpack_quantizer)
    quantizer = _filter_honoured_by_cat(base, quantized)().set_global(config(is_per_channel=True, is_dynamic=False))
    quantizer.set_filter_function(quantized)
    if not any("batch_norm" in str(node.target) for node in exported.graph_module.graph.nodes):
        quantizer.SUPPORTED_PATTERNS = [p for p in quantizer.SUPPORTED_PATTERNS if not _batch_norm_pattern(p)]
    return quantizer


def _batch_norm_pattern(pattern: Any) -> bool:
    """One of the XNNPACK quantizer's convolution + batch-norm patterns (made for QAT). It tries
    them on every graph, and each try exports small pattern programs first: about 2 s of every
    quantization, most of a small model's. A graph holding no batch norm cannot match them, so
    ``_quantizer`` leaves them out there (the annotation is the same)."""
    return pattern.name.endswith(("_bn", "_bn_relu"))


def _filter_honoured_by_cat(base: type, quantized: Any) -> type:
    """The XNNPACK quantizer annotates every ``cat`` with one scale shared by its inputs and its
    output, without asking the filter: a concatenation kept in float (a detector's box rows beside
    its score rows) still had its quantities forced onto one int8 grid. A cat the filter leaves out
    is marked annotated with nothing first, so each input keeps the scale its producer gives it and
    the cat runs in float."""
    import torch
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation
    from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

    class FilterHonouredByCat(base):  # type: ignore[misc, valid-type]
        def annotate(self, model: Any) -> Any:
            for node in model.graph.nodes:
                if node.op == "call_function" and node.target == torch.ops.aten.cat.default and not quantized(node):
                    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(_annotated=True)
            return super().annotate(model)

    return FilterHonouredByCat


def _integer_scalars_kept(base: type) -> type:
    """ExecuTorch's XNNPACK quantizer before annotating turns every scalar of an ``add``/``mul``
    into a float tensor constant, on integer tensors too: token ids plus a vocabulary offset then
    become float and an embedding refuses them. Such integer ops are given their ``.Scalar``
    overload (same arguments) first, which that transform leaves alone."""
    import torch

    scalar = {torch.ops.aten.add.Tensor: torch.ops.aten.add.Scalar, torch.ops.aten.mul.Tensor: torch.ops.aten.mul.Scalar}

    class IntegerScalarsKept(base):  # type: ignore[misc, valid-type]
        def transform_for_annotation(self, model: Any) -> Any:
            for node in model.graph.nodes:
                value = node.meta.get("val") if node.op == "call_function" else None
                if (node.target in scalar and value is not None and not value.dtype.is_floating_point
                        and len(node.args) == 2 and isinstance(node.args[0], torch.fx.Node)
                        and not isinstance(node.args[1], torch.fx.Node)):
                    node.target = scalar[node.target]
            model.recompile()
            return super().transform_for_annotation(model)

    return IntegerScalarsKept


# as edgekit/formats/onnx/masks.py on ONNX graphs: ops a mask-derived value passes through, ops that
# mix it into activations, and the shape ops between such a mix and its softmax
MASK_OPS = {"to", "_to_copy", "sub", "rsub", "mul", "add", "div", "neg", "eq", "ne", "lt", "le", "gt", "ge", "where",
            "unsqueeze", "squeeze", "view", "reshape", "expand", "slice", "clone", "cat", "clamp", "logical_not",
            "logical_and", "logical_or", "bitwise_not", "permute", "transpose", "repeat", "masked_fill", "full_like",
            "type_as", "minimum", "maximum"}
MIXING_OPS = {"add", "sub", "mul", "where", "masked_fill"}
PASS_THROUGH = {"view", "reshape", "permute", "transpose", "_to_copy", "to", "squeeze", "unsqueeze", "clone"}


def mask_nodes(graph: Any, user_inputs: set[str]) -> set[str]:
    """The nodes adding an attention mask to activations, and the softmax each feeds: a text
    encoder's ``(1 - mask) * -1e4`` added to the scores gets one int8 scale spanning -10000..10,
    every score rounds to one value and the attention is lost. A value is mask-derived when it
    follows from integer inputs through elementwise and shape ops only (an embedding's output is
    learned features, not a mask). ``user_inputs``: the placeholders that are the model's inputs
    (the others are its lifted weights and constants)."""
    derived = {node for node in graph.nodes if node.op == "placeholder" and node.name in user_inputs
               and getattr(node.meta.get("val"), "dtype", None) is not None
               and not node.meta["val"].dtype.is_floating_point}
    constants = {node for node in graph.nodes if node.op == "get_attr"
                 or node.op == "placeholder" and node.name not in user_inputs}
    if not derived:
        return set()
    found: set[str] = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        live = [a for a in node.all_input_nodes if a not in constants]
        from_mask = [a for a in live if a in derived]
        name = _op_name(node.target)
        if live and len(from_mask) == len(live) and name in MASK_OPS:
            derived.add(node)
        elif from_mask and name in MIXING_OPS:
            found.add(node.name)
            frontier, steps = [node], 0
            while frontier and steps < 4:
                following = [user for n in frontier for user in n.users]
                found.update(user.name for user in following if "softmax" in _op_name(user.target))
                frontier = [user for user in following if _op_name(user.target) in PASS_THROUGH]
                steps += 1
    return found


def _reads_integers(node: Any) -> bool:
    """Whether a graph node takes an integer tensor (token ids, indices)."""
    for arg in node.all_input_nodes:
        value = arg.meta.get("val")
        dtype = getattr(value, "dtype", None)
        if dtype is not None and not dtype.is_floating_point and not dtype.is_complex and str(dtype) != "torch.bool":
            return True
    return False


def _export(module: Any, example: tuple[Any, ...]) -> Any:
    import torch

    try:
        return torch.export.export(module, example)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many types; all mean "cannot export"
        raise ConversionError(f"ExecuTorch: torch.export could not export this model: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}", hint=OTHER_ROUTES) from None


def _lower_and_write(exported: Any, path: str, io: str, named: dict[str, str],
                     loops: list[str] | None = None) -> tuple[dict, dict]:
    """Lower ``exported`` with the XNNPACK partitioner, write the ``.pte`` (temp name, then
    rename) with the names in ``IO_METHOD``; what runs where and in what precision, read from
    the lowered graph before ``to_executorch`` adds its memory planning to it. ``loops``: the
    module paths of unrolled loop steps, left to ExecuTorch's own kernels (``_partitioner``)."""
    import executorch.kernels.quantized  # noqa: F401 - the quantized ops' out variants, for what XNNPACK leaves
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    _pattern_passes_only_where_they_can_match()
    edge = to_edge_transform_and_lower(exported, partitioner=[_partitioner(XnnpackPartitioner, loops or [])],
                                       constant_methods={IO_METHOD: io})
    lowered = edge.exported_program()
    read = placement_of(lowered.graph_module, named), precision_of(lowered, named)
    program = edge.to_executorch()
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(program.buffer)
    partial.replace(target)
    return read


def _partitioner(xnnpack_partitioner: type, loops: list[str]) -> Any:
    """XNNPACK's partitioner, taking no node traced inside ``loops`` (module paths). An unrolled
    loop's steps mix ops XNNPACK runs with ops it does not (a mask's select, a step's gather), so
    each step split into partitions of a few ops, each lowered on its own: a 40-step
    bidirectional GRU pair's lowering ran for minutes. Its steps run on ExecuTorch's kernels."""
    if not loops:
        return xnnpack_partitioner()
    from ...conversion.pt2e import outside_of

    outside = outside_of(loops)

    class OutsideLoops(xnnpack_partitioner):  # type: ignore[misc, valid-type]
        def get_matched_nodes_from_configs(self, ep: Any) -> list[list[Any]]:
            return [group for group in super().get_matched_nodes_from_configs(ep) if all(outside(n) for n in group)]

        def ops_to_not_decompose(self, ep: Any) -> tuple[list[Any], Any]:
            # an op XNNPACK would have taken whole (linear) is decomposed for ExecuTorch's kernels there
            ops, keeps = super().ops_to_not_decompose(ep)
            return ops, (lambda node: outside(node) and (keeps is None or keeps(node)))

    return OutsideLoops()


# XNNPACK's pattern passes and an op every one of their patterns holds: a graph without that op
# cannot match them (module, class, op name)
PATTERN_PASSES = (
    ("executorch.backends.xnnpack._passes.convert_to_upsample_bilinear2d", "ConvertToUpsampleBilinear2d",
     "upsample_bilinear2d"),
    ("executorch.backends.xnnpack._passes.convert_to_sdpa", "ConvertToSDPAPass", "aten.bmm"),
)


def _pattern_passes_only_where_they_can_match() -> None:
    """XNNPACK's lowering runs passes that match bilinear upsampling and attention (SDPA) against
    pattern programs they build first by exporting and lowering small models: about 2.7 s and
    1.8 s of every lowering process, most of a small model's. Every bilinear pattern is one
    ``upsample_bilinear2d`` node and every attention pattern holds a ``bmm``, so a graph without
    such a node cannot match them: there the pass is skipped (the graph is left as it is, which is
    what the pass would return). Installed once per process."""
    import importlib

    from torch.fx.passes.infra.pass_base import PassResult

    for module_name, class_name, needed in PATTERN_PASSES:
        cls = getattr(importlib.import_module(module_name), class_name)
        original = cls.call
        if getattr(original, "edgekit_guarded", False):
            continue

        def call(self: Any, graph_module: Any, original: Any = original, needed: str = needed) -> Any:
            if not any(node.op == "call_function" and needed in str(node.target) for node in graph_module.graph.nodes):
                return PassResult(graph_module, False)
            return original(self, graph_module)

        call.edgekit_guarded = True  # type: ignore[attr-defined]
        cls.call = call


def _layer(node: Any, named: dict[str, str], ops_by_name: bool = False) -> str | None:
    """The user's layer a node was traced inside: its innermost module path below the wrapper,
    by ONNX node name on a module rebuilt from ONNX; None for an op of the model's own forward,
    or with ``ops_by_name`` (a graph before lowering, whose names ``--keep-float`` takes) its
    traced name (``cat``, ``tanh_1``)."""
    paths = [p[len("inner."):] for p in module_paths(node) if p.startswith("inner.")]
    if paths:
        return named.get(paths[-1], paths[-1])
    return node.name if ops_by_name and any(p == "inner" for p in module_paths(node)) else None


def _weighted_layers(graph_module: Any, named: dict[str, str]) -> list[str]:
    """Layers with weights (convolutions, linear layers, matmuls), in graph order."""
    found = [_layer(node, named, ops_by_name=True) for node in graph_module.graph.nodes
             if node.op == "call_function" and _op_name(node.target) in WEIGHTED | {"conv2d", "conv1d", "matmul"}]
    return list(dict.fromkeys(layer for layer in found if layer))


def placement_of(graph_module: Any, named: dict[str, str] | None = None) -> dict[str, Any]:
    """The ops inside XNNPACK delegate calls (counted from each lowered module's original graph),
    the ops left outside them (portable kernels), by op name, and each weighted layer's precision
    as lowered: ``int8`` where its weight comes out of a dequantize op, else ``float``."""
    delegated: Counter[str] = Counter()
    portable: Counter[str] = Counter()
    layers: dict[str, str] = {}
    partitions = 0

    def weighted(node: Any, where: str) -> None:
        layer = _layer(node, named or {})
        if layer is not None and len(node.args) > 1:
            layers[layer] = ("int8" if _weight_quantized(node) else "float") + where

    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = _op_name(node.target)
        if name == "executorch_call_delegate":
            partitions += 1
            lowered = getattr(graph_module, node.args[0].target)
            for inner in lowered.original_module.graph.nodes:
                if inner.op == "call_function":
                    delegated[_op_name(inner.target)] += 1
                    if _op_name(inner.target) in WEIGHTED:
                        weighted(inner, "")
        elif name != "getitem":
            portable[name] += 1
            if name in WEIGHTED:
                weighted(node, " (portable)")
    return {"partitions": partitions, "delegated": dict(sorted(delegated.items())),
            "portable": dict(sorted(portable.items())), "delegated_ops": sum(delegated.values()),
            "portable_ops": sum(portable.values()), "layers": dict(sorted(layers.items()))}


def _weight_quantized(node: Any) -> bool:
    """Whether a weighted op's weight comes out of a dequantize op (int8 weights)."""
    weight = node.args[1] if len(node.args) > 1 else None
    return "dequantize" in str(getattr(weight, "target", ""))


def precision_of(program: Any, named: dict[str, str] | None = None) -> dict[str, Any]:
    """What the lowered program (an edge ``ExportedProgram``) computes in, as ``Precision`` counts it (``details.precision``).

    Inside an XNNPACK partition an op is integer when its weight is int8 (weighted ops) or when it
    reads dequantized values and its result is quantized again, directly or through the ops
    fused after it (conv -> relu -> quantize); every other op there runs in float. Ops left
    outside the delegate run on ExecuTorch's portable kernels in float; those after the last
    integer op that only lead to the outputs (a final softmax) are the float tail. Data movement
    (``NEUTRAL_OPS``) is neither."""
    from ..precision import Precision

    named = named or {}
    graph_module = program.graph_module
    precision = Precision()
    float_ops: list[tuple[Any, dict[str, Any]]] = []  # portable ops
    at_end: list[tuple[Any, dict[str, Any]]] = []  # float ops inside a delegate that only lead to its outputs
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = _op_name(node.target)
        if name == "executorch_call_delegate":
            inner = getattr(graph_module, node.args[0].target).original_module
            constants = _constants(inner)
            for op in inner.graph.nodes:
                op_name = _op_name(op.target) if op.op == "call_function" else ""
                if not op_name or op_name in NOT_COMPUTE:
                    continue
                weighted = op_name in WEIGHTED
                if (_weight_quantized(op) if weighted else _reads_and_writes_quantized(op)):
                    precision.int8_ops += 1
                    precision.int8_weighted_ops += weighted
                    precision.int8_weight_bytes += _weight_bytes(op, constants) if weighted else 0
                else:
                    precision.float_weight_bytes += _weight_bytes(op, constants) if weighted else 0
                    entry = {"op": op_name, "layer": _layer(op, named) or op_name, "tensor": op.name, "tail": False}
                    precision.float_ops.append(entry)
                    if op_name in TAIL_OPS and _only_reaches_outputs(op):  # at the delegate's end: the tail if the
                        at_end.append((node, entry))  # delegate's results only reach the outputs
        elif name not in NOT_COMPUTE:
            precision.float_weight_bytes += _weight_bytes(node, _constants(program)) if name in WEIGHTED else 0
            entry = {"op": name, "layer": _layer(node, named) or name, "tensor": node.name, "tail": False}
            precision.float_ops.append(entry)
            float_ops.append((node, entry))
    tail: set[Any] = set()
    portable = {node for node, _ in float_ops}
    for node in reversed(list(graph_module.graph.nodes)):  # a portable op whose results only reach outputs
        if node.op == "call_function" and (node in portable and _op_name(node.target) in TAIL_OPS
                                           or _op_name(node.target) in NOT_COMPUTE):
            if all(user.op == "output" or user in tail for user in node.users):
                tail.add(node)
    for node, entry in float_ops:
        entry["tail"] = node in tail
    for delegate_call, entry in at_end:
        entry["tail"] = all(user in tail for user in delegate_call.users)
    if not precision.int8_ops:  # a float program: no tail to tell apart
        for entry in precision.float_ops:
            entry["tail"] = False
    return {"label": precision.label, "record": precision.record(), "float_ops": precision.float_ops}


def per_layer_report(reference: Any, quantized: Any, samples: list[tuple[Any, ...]],
                     named: dict[str, str]) -> list[dict[str, Any]]:
    """Each op's SQNR in the quantized graph against the float one, worst first (``--explain``,
    and where the search looks first). The float side is the prepared graph (batch norms folded
    as in the quantized one, observers passing values through), so both hold the same ops by
    the same node names; the quantized side's value is what the next op reads: after the
    quantize and dequantize that follow an op, where they do."""
    import torch

    from ..building import worst_layers

    order = {node.name: i for i, node in enumerate(quantized.graph.nodes)}
    ops = {node.name: node for node in quantized.graph.nodes if node.op == "call_function"
           and _op_name(node.target) not in NOT_COMPUTE and _layer(node, named, ops_by_name=True)}
    seen_as: dict[str, str] = {}  # quantized graph node -> the op whose value it holds
    for name, node in ops.items():
        seen_as[name] = name
        users = list(node.users)
        if len(users) == 1 and _op_name(users[0].target).startswith("quantize"):
            after = [u for u in users[0].users if _op_name(u.target).startswith("dequantize")]
            if len(after) == 1:
                seen_as = {k: v for k, v in seen_as.items() if k != name}
                seen_as[after[0].name] = name
    float_names = {node.name for node in reference.graph.nodes} & set(ops)
    signal: dict[str, float] = dict.fromkeys(float_names, 0.0)
    noise: dict[str, float] = dict.fromkeys(float_names, 0.0)

    class Recorder(torch.fx.Interpreter):
        def __init__(self, module: Any, keep: dict[str, str]) -> None:
            super().__init__(module)
            self.keep, self.values = keep, {}

        def run_node(self, node: Any) -> Any:
            value = super().run_node(node)
            if node.name in self.keep and isinstance(value, torch.Tensor) and value.is_floating_point():
                self.values[self.keep[node.name]] = value.detach().double()
            return value

    with torch.no_grad():
        for sample in samples:
            expected = Recorder(reference, {n: n for n in float_names})
            expected.run(*sample)
            got = Recorder(quantized, {k: v for k, v in seen_as.items() if v in float_names})
            got.run(*sample)
            for name, value in expected.values.items():
                other = got.values.get(name)
                if other is not None and other.shape == value.shape:
                    signal[name] += float((value ** 2).sum())
                    noise[name] += float(((value - other) ** 2).sum())
    rows = []
    for name in float_names:
        if signal[name] == 0.0 and noise[name] == 0.0:
            continue
        sqnr = float(10 * np.log10(signal[name] / noise[name])) if noise[name] > 0 and signal[name] > 0 else None
        rows.append({"layer": _layer(ops[name], named, ops_by_name=True), "op": _op_name(ops[name].target), "tensor": name,
                     "sqnr_db": sqnr, "order": order[name]})
    return worst_layers(rows)


def _weight_bytes(node: Any, constants: set[str]) -> int:
    """The bytes of a weighted op's weight: the int8 tensor its dequantize reads, or the float one;
    0 where the second operand is an activation (attention's ``q @ k``), not one of the program's
    ``constants`` (its lifted parameters, buffers and constant tensors)."""
    weight = node.args[1] if len(node.args) > 1 else None
    if weight is not None and "dequantize" in str(getattr(weight, "target", "")):
        weight = weight.args[0]
    if getattr(weight, "op", None) != "get_attr" and getattr(weight, "name", None) not in constants:
        return 0
    value = getattr(weight, "meta", {}).get("val")
    return int(value.numel() * value.element_size()) if value is not None and hasattr(value, "numel") else 0


def _constants(program: Any) -> set[str]:
    """The placeholders of an exported program that are its parameters, buffers and constants."""
    specs = getattr(getattr(program, "graph_signature", None), "input_specs", None) or []
    return {spec.arg.name for spec in specs if str(getattr(spec.kind, "name", spec.kind)) != "USER_INPUT"}


def _only_reaches_outputs(node: Any) -> bool:
    """Whether every use of an op's result leads to the graph's output through float ops a tail may
    hold only."""
    return all(user.op == "output" or (user.op == "call_function" and _op_name(user.target) in TAIL_OPS
                                       and not _op_name(user.target).startswith("quantize")
                                       and _only_reaches_outputs(user)) for user in node.users)


def _reads_and_writes_quantized(node: Any) -> bool:
    """Whether an op reads only dequantized values (directly or through the ops fused before it)
    and its result is quantized again (directly or through the ops fused after it)."""
    def compute(n: Any) -> bool:
        return n.op == "call_function" and _op_name(n.target) not in QDQ

    def upstream(n: Any) -> bool:
        args = [a for a in n.all_input_nodes if a.op == "call_function"]
        return bool(args) and all(_op_name(a.target).startswith("dequantize")
                                  or (compute(a) and len(a.users) == 1 and upstream(a)) for a in args)

    def downstream(n: Any) -> bool:
        users = list(n.users)
        return bool(users) and all(
            (u.op == "call_function" and _op_name(u.target).startswith("quantize"))
            or (compute(u) and len(u.all_input_nodes) == 1 and downstream(u)) for u in users)

    return upstream(node) and downstream(node)


def _op_name(target: Any) -> str:
    """``aten.convolution.default`` (ATen or edge dialect) -> ``convolution``; a plain function by its name."""
    opname = getattr(target, "_opname", None)
    return str(opname) if opname else getattr(target, "__name__", str(target)).split(".")[-1]


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
    named = _plan_names(model, layer_names)
    io = json.dumps({"inputs": list(names), "outputs": list(output_names)})
    pairs = [(float(node.args[1]), int(node.args[2])) for node in exported.graph_module.graph.nodes
             if node.op == "call_function" and _op_name(node.target) == "quantize_per_tensor"]
    import onnx

    from ...conversion.quantized import matched_ranges, strip_qdq

    carried, missing = matched_ranges(strip_qdq(onnx.load(form.path)), pairs)
    placement, precision = _lower_and_write(exported, output, io, named)
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
