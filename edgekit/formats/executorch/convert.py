"""ExecuTorch ``.pte`` from a PyTorch program (``edgekit.conversion.forms.TORCH_PROGRAM``), child side.

The module is exported with ``torch.export`` at batch 1 (positional inputs in the source's order,
outputs flattened), quantized by PT2E with ExecuTorch's XNNPACK quantizer (symmetric int8,
per-channel weights, static int8 activations calibrated on every calibration sample), lowered
with the XNNPACK partitioner and serialized; the float program is lowered the same way as the
fallback. Layers the precision plan keeps in float get no quantizer annotation
(``set_module_name(name, None)``): XNNPACK runs them in float, or the portable kernels do.
What ran where is read back from the lowered program (``placement``).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import worker
from ...conversion.pt2e import qat_folding_only_where_it_can_match
from ...errors import ConversionError
from ..building import read_samples

OTHER_ROUTES = "build the other formats (--format tflite, onnx or coreml) for this model"


def convert_executorch(model: dict[str, Any], calibration_npy: str, output: str, output_names: list[str],
                       float_output: str | None = None, keep_float: list[str] | None = None) -> dict[str, Any]:
    """INT8 ``.pte`` into ``output`` (and the float one into ``float_output``); what was done and
    what runs where, for the manifest."""
    import torch

    from ...conversion.forms import ModelForm, flatten_outputs, load_module

    samples = read_samples(calibration_npy)
    module, names = load_module(ModelForm.from_dict(model), example={k: np.asarray(v[:1]) for k, v in samples.items()},
                                submodules=True)
    if list(samples) == [""]:
        samples = {names[0]: samples[""]}
    modules = dict(module.named_modules()) if hasattr(module, "named_modules") else {}
    unknown = [name for name in keep_float or [] if name not in modules]
    if unknown:
        raise ConversionError(f"ExecuTorch: no module named {', '.join(unknown)} in this PyTorch model",
                              hint="name layers by their module path (as --explain lists them)")
    # imported once the model is known to be convertible (ExecuTorch and torchao take ~8 s to import)
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    class Positional(torch.nn.Module):
        """The source model with positional inputs in the source's order and a tuple of outputs."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def train(self, mode: bool = True) -> "Positional":
            # the source is already in eval mode, and a torch.export program's module refuses train()
            self.training = mode
            return self

        def forward(self, *inputs: Any) -> tuple[Any, ...]:
            return tuple(flatten_outputs(self.inner(*inputs)))

    def sample(i: int) -> tuple[Any, ...]:
        return tuple(torch.from_numpy(_model_dtype(np.asarray(samples[n][i : i + 1]))) for n in names)

    started = time.perf_counter()
    wrapped = Positional().eval()
    with torch.no_grad():  # checked before any conversion work: every output keeps its name
        produced = len(wrapped(*sample(0)))
    if produced != len(output_names):
        raise ConversionError(f"ExecuTorch: the program returns {produced} outputs, the model {len(output_names)}",
                              hint=OTHER_ROUTES)
    exported = _export(wrapped, sample(0))
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    if keep_float:  # nodes of a kept layer get no annotation: they stay float
        kept = [f"inner.{name}" for name in keep_float]
        quantizer.set_filter_function(lambda node: not any(_inside(path, kept) for path in _module_paths(node)))
    graph = prepare_pt2e(exported.module(), quantizer)
    total = len(next(iter(samples.values())))
    with torch.no_grad():
        for i in range(total):
            if i % 10 == 0:
                worker.report_progress(i, total)
            graph(*sample(i))
    worker.report_progress(total, total)
    with qat_folding_only_where_it_can_match():
        converted = convert_pt2e(graph)
    quantized = _export(converted, sample(0))
    placement = _lower_and_write(quantized, output)
    seconds = time.perf_counter() - started
    float_placement = _lower_and_write(exported, float_output) if float_output else None
    return {"torch": torch.__version__, "executorch": _version("executorch"), "seconds": round(seconds, 3),
            "inputs": list(names), "placement": placement, "float_placement": float_placement}


def _module_paths(node: Any) -> list[str]:
    """The module paths a graph node was traced inside (``torch.export``'s ``nn_module_stack``)."""
    return [str(entry[0]) for entry in (node.meta.get("nn_module_stack") or {}).values()]


def _inside(path: str, modules: list[str]) -> bool:
    return any(path == module or path.startswith(module + ".") for module in modules)


def _export(module: Any, example: tuple[Any, ...]) -> Any:
    import torch

    try:
        return torch.export.export(module, example)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many types; all mean "cannot export"
        raise ConversionError(f"ExecuTorch: torch.export could not export this model: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}", hint=OTHER_ROUTES) from None


def _lower_and_write(exported: Any, path: str) -> dict[str, Any]:
    """Lower ``exported`` with the XNNPACK partitioner, write the ``.pte`` (temp name, then
    rename) and say what the delegate took and what was left to the portable kernels."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    placement = placement_of(edge.exported_program().graph_module)
    program = edge.to_executorch()
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(program.buffer)
    partial.replace(target)
    return placement


WEIGHTED = {"convolution", "linear", "addmm", "mm", "bmm"}  # ops whose second argument is a weight


def placement_of(graph_module: Any) -> dict[str, Any]:
    """The ops inside XNNPACK delegate calls (counted from each lowered module's original graph),
    the ops left outside them (portable kernels), by op name, and each weighted layer's precision
    as lowered: ``int8`` where its weight comes out of a dequantize op, else ``float``."""
    delegated: Counter[str] = Counter()
    portable: Counter[str] = Counter()
    layers: dict[str, str] = {}
    partitions = 0

    def weighted(node: Any, where: str) -> None:
        paths = [p for p in _module_paths(node) if p.startswith("inner.")]
        weight = node.args[1] if len(node.args) > 1 else None
        if paths and weight is not None:
            quantized = str(getattr(weight, "target", "")).find("dequantize") >= 0
            layers[paths[-1][len("inner."):]] = ("int8" if quantized else "float") + where

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


def _op_name(target: Any) -> str:
    """``aten.convolution.default`` -> ``convolution``; a plain function by its name."""
    parts = getattr(target, "__name__", str(target)).split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _model_dtype(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) if x.dtype.kind == "i" else x.astype(np.float32)


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)
