"""The simulation's converter steps, child side, as typed messages: the activation ranges once,
a plan's simulated graph per try, and the per-layer report. Each wraps the graph functions of
``graph.py`` (which tests also call directly) and answers with a frozen report the builder
reads by attribute (``worker.convert``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..conversion.messages import Message
from .equalize import equalize
from .graph import activation_ranges, layer_report, simulated_graph


@dataclass(frozen=True)
class RangesRequest(Message):
    """One pass of the float graph over the calibration samples; the ranges go to ``output``."""

    float_onnx: str
    calibration_npy: str
    output: str
    layer_names: tuple[str, ...] = ()  # the plan's vocabulary, for the layers' costs
    estimator: str = "minmax"  # how the format's quantizer sets a range (``estimators.py``)


@dataclass(frozen=True)
class RangesReport(Message):
    samples: int
    tensors: int  # the float tensors ranged
    module_paths: dict[str, str]  # ONNX node -> its PyTorch module (``LayerNames.module_paths``)
    costs: dict[str, float]  # plan layer -> its relative compute (``costs.layer_costs``)
    links: list[list[Any]] = field(default_factory=list)  # (writer, reader, elements) (``costs.layer_links``)


@dataclass(frozen=True)
class SimulationRequest(Message):
    """A plan's simulated graph: ``floats`` left in float, every other layer on the int8 grid."""

    float_onnx: str
    ranges_json: str
    output: str
    floats: tuple[str, ...]
    layer_names: tuple[str, ...]
    rules: dict[str, Any] = field(default_factory=dict)  # the format's grid (``QuantGrid.rules``)


@dataclass(frozen=True)
class SimulationReport(Message):
    pairs: int  # activation quantize/dequantize pairs written
    weighted_layers: tuple[str, ...]
    float_layers: tuple[str, ...]
    int8_layers: tuple[str, ...]
    regridded: int = 0  # activations the format's grid placed otherwise than the common grid


@dataclass(frozen=True)
class LayerReportRequest(Message):
    float_onnx: str
    simulated_onnx: str
    samples_npy: str
    layer_names: tuple[str, ...]


@dataclass(frozen=True)
class LayerReport(Message):
    rows: list[dict[str, Any]]  # each computing layer against float, stored as made


@dataclass(frozen=True)
class EqualizeRequest(Message):
    """The float graph with its convolution pairs equalized (``equalize.py``), written to ``output``."""

    float_onnx: str
    output: str


@dataclass(frozen=True)
class EqualizeReport(Message):
    pairs: list[list[str]]  # (first, second) node names of each pair rescaled
    largest_factor: float
    why_not: str = ""  # why no pair was looked at (weights outside the file)
    scales_json: str = ""  # each pair's scale per channel (``equalize._rescale_record``), for the source's own model


@dataclass(frozen=True)
class FoldRequest(Message):
    """The float graph with each Conv -> BatchNormalization folded (``fold.py``), written to ``output``."""

    float_onnx: str
    output: str


@dataclass(frozen=True)
class FoldReport(Message):
    folded: list[str]  # the BatchNormalization nodes folded (none: nothing written)
    why_not: str = ""


def fold_graph(request: FoldRequest) -> FoldReport:
    from .fold import fold_batchnorm

    found = fold_batchnorm(request.float_onnx, request.output)
    return FoldReport(folded=list(found["folded"]), why_not=str(found.get("why_not", "")))


def equalize_graph(request: EqualizeRequest) -> EqualizeReport:
    import json
    from pathlib import Path

    found = equalize(request.float_onnx, request.output)
    scales = Path(request.output).with_suffix(".scales.json")
    scales.write_text(json.dumps(found.get("scales") or []))
    return EqualizeReport(pairs=[list(p) for p in found["pairs"]], largest_factor=float(found["largest_factor"]),
                          why_not=str(found.get("why_not", "")), scales_json=str(scales))


def calibrate(request: RangesRequest) -> RangesReport:
    found = activation_ranges(request.float_onnx, request.calibration_npy, request.output,
                              layer_names=list(request.layer_names), estimator=request.estimator)
    return RangesReport(samples=int(found["samples"]), tensors=int(found["tensors"]),
                        module_paths=dict(found.get("module_paths") or {}),
                        costs={str(k): float(v) for k, v in (found.get("costs") or {}).items()},
                        links=[[str(a), str(b), float(e)] for a, b, e in found.get("links") or []])


def simulate(request: SimulationRequest) -> SimulationReport:
    found = simulated_graph(request.float_onnx, request.ranges_json, request.output, list(request.floats),
                            list(request.layer_names), dict(request.rules))
    return SimulationReport(pairs=int(found["pairs"]), weighted_layers=tuple(found["weighted_layers"]),
                            float_layers=tuple(found["float_layers"]), int8_layers=tuple(found["int8_layers"]),
                            regridded=int(found.get("regridded", 0)))


def report_layers(request: LayerReportRequest) -> LayerReport:
    return LayerReport(rows=layer_report(request.float_onnx, request.simulated_onnx, request.samples_npy,
                                         list(request.layer_names)))
