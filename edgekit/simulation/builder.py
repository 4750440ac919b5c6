"""The simulation as a builder: the search's tries build the simulated INT8 graph of a plan
(``graph.simulated_graph``, in a converter child) and are measured by ONNX Runtime like any
artifact, so the whole search (blocks, single layers, most-integer, the held-out check) runs on
forward passes instead of conversions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from ..conversion import worker
from ..formats.building import BuildContext, Builder, BuildResult
from ..manifest import Artifact, QuantParams
from .graph import activation_ranges, layer_report, simulated_graph

ARTIFACT_PATH = "simulation/model.sim.onnx"


class SimulatedBuilder(Builder):
    """Builds a plan's simulated INT8 graph from one float ONNX graph and its calibrated ranges."""

    name: ClassVar[str] = "simulation"
    backend: ClassVar[str] = "onnxruntime"
    cheap_tries: ClassVar[bool] = True

    def __init__(self, float_onnx: str, inputs: list[str], outputs: list[str]) -> None:
        self.float_onnx, self.inputs, self.outputs = float_onnx, inputs, outputs
        self.ranges_json: str | None = None
        self.module_paths: dict[str, str] = {}  # ONNX node -> its PyTorch module (``graph.module_paths``)
        self.builds = 0

    def calibrate(self, context: BuildContext) -> int:
        """The activation ranges, once: one pass of the float graph over the calibration samples."""
        self.ranges_json = str(context.workdir / "simulation-ranges.json")
        found = worker.call(activation_ranges, what="INT8 simulation: activation ranges", timeout=context.timeout_s,
                            float_onnx=self.float_onnx, calibration_npy=context.calibration_npy,
                            output=self.ranges_json)
        self.module_paths = dict(found.get("module_paths") or {})
        return int(found["tensors"])

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        if self.ranges_json is None:
            self.calibrate(context)
        output = Path(context.package_dir) / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        info = worker.call(simulated_graph, what="INT8 simulation", timeout=context.timeout_s,
                           float_onnx=self.float_onnx, ranges_json=self.ranges_json, output=str(output),
                           floats=list(context.plan.floats), layer_names=list(context.layer_names))
        self.builds += 1
        details: dict[str, Any] = {
            "weighted_layers": info["weighted_layers"],
            "precision": {"ops": {"integer_weighted": len(info["int8_layers"])},
                          "float_layers": info["float_layers"]},
        }
        if context.explain_npy:
            details["explain"] = worker.call(layer_report, what="INT8 simulation: per-layer report",
                                             timeout=context.timeout_s, float_onnx=self.float_onnx,
                                             simulated_onnx=str(output), samples_npy=context.explain_npy,
                                             layer_names=list(context.layer_names))
        floats = len(info["float_layers"])
        precision = ("float" if not info["int8_layers"] else
                     f"int8+float ({floats} layer{'s' if floats != 1 else ''})" if floats else "int8")
        return BuildResult(artifact=Artifact(
            format=self.name, path=ARTIFACT_PATH, sha256="", bytes=output.stat().st_size, precision=precision,
            inputs=[QuantParams(name=n, dtype="float32") for n in self.inputs],
            outputs=[QuantParams(name=n, dtype="float32") for n in self.outputs],
            converter={"tool": "edgekit INT8 simulation (per-channel int8 weights, per-tensor int8 activations, "
                               "float arithmetic in ONNX Runtime)", "pairs": info["pairs"]},
            details=details))
