"""The simulation as a builder: one graph's ranges per range estimator, shared by the builders
of that graph in every format's grid, never another graph's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgekit.formats.building import BuildContext, QuantGrid
from edgekit.formats.plan import PrecisionPlan
from edgekit.simulation import SimulatedBuilder


def _scaled(path: Path, factor: float) -> str:
    """x -> conv (weights times ``factor``): the same tensor names, ranges ``factor`` apart."""
    weight = np.full((1, 1, 1, 1), factor, np.float32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["y"], name="conv")], "scaled",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 2, 2])],
                              [numpy_helper.from_array(weight, "W")])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _ranges(builder: SimulatedBuilder) -> dict[str, list[float]]:
    assert builder.ranges_json is not None
    return json.loads(Path(builder.ranges_json).read_text())["ranges"]


def test_two_graphs_calibrated_in_one_work_folder_keep_their_own_ranges(tmp_path):
    """The graph as given and the equalized graph (same tensor names) are calibrated in one work
    folder: each keeps its own ranges, so the search on the first after the second was
    calibrated is not judged on the other's ranges."""
    np.save(tmp_path / "samples.npy", np.random.default_rng(0).uniform(0, 1, (16, 1, 2, 2)).astype(np.float32))
    context = BuildContext(str(tmp_path / "samples.npy"), "", tmp_path / "package", tmp_path, layer_names=("conv",))
    given = SimulatedBuilder(_scaled(tmp_path / "simulation" / "folded.onnx", 1.0), ["x"], ["y"])
    equalized = SimulatedBuilder(_scaled(tmp_path / "simulation-equalized" / "equalized.onnx", 10.0), ["x"], ["y"])
    given.calibrate(context)
    equalized.calibrate(context)
    assert _ranges(equalized)["y"][1] > 5 * _ranges(given)["y"][1]
    given.build(context.with_plan(PrecisionPlan()))
    assert _ranges(given)["y"][1] < 1.0  # its own, after the other graph was calibrated


def test_a_grid_estimating_ranges_its_own_way_calibrates_them_once_for_all_its_builders(tmp_path):
    """ExecuTorch's grid ranges activations by histogram: its first build calibrates them, the
    builders of the same graph in that grid read them, and the common grid keeps min/max."""
    np.save(tmp_path / "samples.npy", np.random.default_rng(0).standard_t(1.5, (64, 1, 2, 2)).astype(np.float32))
    context = BuildContext(str(tmp_path / "samples.npy"), "", tmp_path / "package", tmp_path, layer_names=("conv",))
    common = SimulatedBuilder(_scaled(tmp_path / "simulation" / "folded.onnx", 1.0), ["x"], ["y"])
    common.calibrate(context)
    histogram = QuantGrid("histogram-only", ranges="histogram")
    first = common.on(histogram)
    assert first.ranges_json is None and not histogram.common
    first.build(context)
    assert first.regridded  # its ranges are its own: never taken for the common outcome
    second = common.on(histogram)
    assert second.ranges_json == first.ranges_json != common.ranges_json
    assert json.loads(Path(second.ranges_json).read_text())["estimator"] == "histogram"
    assert _ranges(second)["x"][1] < _ranges(common)["x"][1]
