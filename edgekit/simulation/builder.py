"""The simulation as a builder: the search's tries build the simulated INT8 graph of a plan
(``graph.simulated_graph``, in a converter child) and are measured by ONNX Runtime like any
artifact, so the whole search (blocks, single layers, most-integer, the held-out check) runs on
forward passes instead of conversions."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from ..conversion import worker
from ..conversion.layer_names import LayerNames
from ..formats.building import COMMON_GRID, BuildContext, Builder, BuildResult, QuantGrid
from ..manifest import Artifact, QuantParams
from .convert import (LayerReportRequest, RangesRequest, SimulationRequest, calibrate, report_layers,
                      simulate)

ARTIFACT_PATH = "simulation/model.sim.onnx"


class SimulatedBuilder(Builder):
    """Builds a plan's simulated INT8 graph from one float ONNX graph and its calibrated ranges."""

    name: ClassVar[str] = "simulation"
    backend: ClassVar[str] = "onnxruntime"
    cheap_tries: ClassVar[bool] = True

    def __init__(self, float_onnx: str, inputs: list[str], outputs: list[str],
                 on_grid: QuantGrid = COMMON_GRID) -> None:
        self.float_onnx, self.inputs, self.outputs = float_onnx, inputs, outputs
        self.on_grid = on_grid  # the format grid it simulates (``QuantGrid``)
        # range estimator -> its ranges (JSON), shared by the builders of this graph in every grid
        self.ranges: dict[str, str] = {}
        self.module_paths: dict[str, str] = {}  # ONNX node -> its PyTorch module (``LayerNames.module_paths``)
        self.layer_names: tuple[str, ...] = ()  # the source's layers, the plan's vocabulary
        self.costs: dict[str, float] = {}  # plan layer -> its relative compute (``costs.layer_costs``)
        self.links: tuple[tuple[str, str, float], ...] = ()  # tensors between layers (``costs.layer_links``)
        self.regridded = 0  # of the last build: activations its grid placed otherwise than the common one

    @property
    def ranges_json(self) -> str | None:
        """The ranges this builder's grid places activations by (None: not calibrated yet)."""
        return self.ranges.get(self.on_grid.ranges)

    def calibrate(self, context: BuildContext) -> int:
        """The activation ranges, once per range estimator: one pass of the float graph over the
        calibration samples (the common grid's min/max first, with the layers' costs)."""
        estimator = self.on_grid.ranges
        # named after its graph: the equalized graph's ranges never overwrite the graph as given's
        graph = hashlib.sha256(str(Path(self.float_onnx).resolve()).encode()).hexdigest()[:12]
        path = str(Path(context.workdir) / f"simulation-ranges.{graph}.{estimator}.json")
        found = worker.convert(calibrate, RangesRequest(self.float_onnx, context.calibration_npy, path,
                                                        tuple(context.layer_names), estimator),
                               what=f"INT8 simulation: activation ranges ({estimator})", timeout=context.timeout_s)
        self.ranges[estimator] = path
        if not self.costs:
            self.module_paths, self.costs = dict(found.module_paths), dict(found.costs)
            self.layer_names = tuple(context.layer_names)
            self.links = tuple((str(a), str(b), float(e)) for a, b, e in found.links)
        return found.tensors

    @property
    def names(self) -> LayerNames:
        """The simulated graph's layer names: the plan's vocabulary and each node's PyTorch module."""
        return LayerNames(self.layer_names, dict(self.module_paths))

    def on(self, grid: QuantGrid) -> SimulatedBuilder:
        """A builder of the same graph and ranges in another format's grid (its own try count);
        a grid whose quantizer estimates ranges otherwise calibrates them when it first builds."""
        other = SimulatedBuilder(self.float_onnx, self.inputs, self.outputs, grid)
        other.ranges, other.module_paths, other.costs, other.links = (self.ranges, self.module_paths,
                                                                      self.costs, self.links)
        other.layer_names = self.layer_names
        return other

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        if self.ranges_json is None:
            self.calibrate(context)
        output = Path(context.package_dir) / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        assert self.ranges_json is not None
        report = worker.convert(simulate, SimulationRequest(
            self.float_onnx, self.ranges_json, str(output), tuple(context.plan.floats), tuple(context.layer_names),
            self.on_grid.rules()),
            what="INT8 simulation", timeout=context.timeout_s)
        # a grid estimating ranges its own way places (nearly) every activation otherwise
        self.regridded = report.regridded + (self.on_grid.ranges != COMMON_GRID.ranges)
        details: dict[str, Any] = {
            "weighted_layers": list(report.weighted_layers),
            "precision": {"ops": {"integer_weighted": len(report.int8_layers)},
                          "float_layers": list(report.float_layers)},
        }
        if context.explain_npy:
            details["explain"] = worker.convert(report_layers, LayerReportRequest(
                self.float_onnx, str(output), context.explain_npy, tuple(context.layer_names)),
                what="INT8 simulation: per-layer report", timeout=context.timeout_s).rows
        floats = len(report.float_layers)
        precision = ("float" if not report.int8_layers else
                     f"int8+float ({floats} layer{'s' if floats != 1 else ''})" if floats else "int8")
        return BuildResult(artifact=Artifact(
            format=self.name, path=ARTIFACT_PATH, sha256="", bytes=output.stat().st_size, precision=precision,
            inputs=[QuantParams(name=n, dtype="float32") for n in self.inputs],
            outputs=[QuantParams(name=n, dtype="float32") for n in self.outputs],
            converter={"tool": "edgekit INT8 simulation (per-channel int8 weights, per-tensor int8 activations, "
                               "float arithmetic in ONNX Runtime)", "pairs": report.pairs},
            details=details))
