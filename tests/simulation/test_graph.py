"""The INT8 simulation every format's plan is searched on: the float graph with the formats' grid
in float arithmetic (per-channel symmetric int8 weights on [-127, 127], per-tensor int8
activations from the calibration ranges), a layer kept float left exactly as it was."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from edgekit.simulation.graph import activation_ranges, layer_report, simulated_graph
from tests.formats.qdq_models import quadrant_images, trained_linear


def _two_layers(path, x, y):
    """flatten -> fc1 (64->16) -> relu -> fc2 (16->4), trained least-squares on the quadrant images."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w1 = (rng.normal(size=(16, 64)) * 0.3).astype(np.float32)
    hidden = np.maximum(x.reshape(len(x), -1) @ w1.T, 0)
    w2, b2 = trained_linear(hidden.reshape(len(x), 1, 4, 4), y)
    nodes = [helper.make_node("Flatten", ["image"], ["flat"], name="flatten"),
             helper.make_node("Gemm", ["flat", "W1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
             helper.make_node("Gemm", ["hr", "W2", "b2"], ["logits"], name="fc2", transB=1)]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2"),
                               numpy_helper.from_array(b2, "b2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _run(path, x):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sim")
    x, y = quadrant_images(200, 0)
    model = _two_layers(folder / "float.onnx", x, y)
    np.save(folder / "calibration.npy", x)
    activation_ranges(str(model), str(folder / "calibration.npy"), str(folder / "ranges.json"))
    return folder, model, x


def test_ranges_are_the_float_graphs_min_and_max_over_the_calibration_samples(two_layers):
    folder, model, x = two_layers
    ranges = json.loads((folder / "ranges.json").read_text())["ranges"]
    assert ranges["image"] == pytest.approx([float(x.min()), float(x.max())])
    assert ranges["logits"] == pytest.approx([float(_run(model, x).min()), float(_run(model, x).max())], rel=1e-5)


def test_the_simulation_puts_weights_and_activations_on_the_int8_grid(two_layers, tmp_path):
    folder, model, x = two_layers
    info = simulated_graph(str(model), str(folder / "ranges.json"), str(tmp_path / "sim.onnx"), [], [])
    assert info["int8_layers"] == ["fc1", "fc2"] and info["float_layers"] == []
    sim = onnx.load(str(tmp_path / "sim.onnx"))
    weights = {i.name: numpy_helper.to_array(i) for i in sim.graph.initializer}
    for name in ("W1", "W2"):  # per output channel: at most 255 levels, the largest at +-127 steps
        for row in weights[name]:
            step = np.abs(row).max() / 127
            assert np.allclose(row / step, np.round(row / step), atol=1e-3)
    pairs = [n for n in sim.graph.node if n.op_type == "QuantizeLinear"]
    assert {n.input[0] for n in pairs} == {"image", "hr__float", "logits__float"}  # input, after the fused relu, output
    got, want = _run(tmp_path / "sim.onnx", x), _run(model, x)
    error = np.abs(got - want).max()
    assert 0 < error < 0.1 * np.abs(want).max()  # quantized, and close
    assert (got.argmax(1) == want.argmax(1)).mean() > 0.95


def test_a_layer_kept_float_keeps_its_weights_and_writes_float(two_layers, tmp_path):
    folder, model, x = two_layers
    info = simulated_graph(str(model), str(folder / "ranges.json"), str(tmp_path / "sim.onnx"), ["fc2"], [])
    assert info["float_layers"] == ["fc2"] and info["int8_layers"] == ["fc1"]
    sim = onnx.load(str(tmp_path / "sim.onnx"))
    weights = {i.name: numpy_helper.to_array(i) for i in sim.graph.initializer}
    original = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(model)).graph.initializer}
    assert np.array_equal(weights["W2"], original["W2"]) and not np.array_equal(weights["W1"], original["W1"])
    assert "logits__float" not in {n.input[0] for n in sim.graph.node if n.op_type == "QuantizeLinear"}
    everything = simulated_graph(str(model), str(folder / "ranges.json"), str(tmp_path / "all.onnx"), ["fc1", "fc2"], [])
    assert everything["int8_layers"] == [] and np.array_equal(_run(tmp_path / "all.onnx", x), _run(model, x))


def test_the_per_layer_report_ranks_each_weighted_layer(two_layers, tmp_path):
    folder, model, x = two_layers
    simulated_graph(str(model), str(folder / "ranges.json"), str(tmp_path / "sim.onnx"), [], [])
    rows = layer_report(str(model), str(tmp_path / "sim.onnx"), str(folder / "calibration.npy"), [])
    assert [r["layer"] for r in rows] == ["fc1", "fc2"] and all(15 < r["sqnr_db"] < 80 for r in rows)


def test_a_model_with_large_tensors_runs_fewer_samples_at_a_time_with_the_same_ranges_and_report(
        two_layers, tmp_path, monkeypatch):
    """Every intermediate tensor is an output of the ranging and report passes: a model whose
    tensors of one sample are large (a 256x256 U-Net held 18.9 GB at 8 samples a pass) runs as
    many samples as fit in ``INTERMEDIATES_BYTES``, with the same ranges, report and costs."""
    from edgekit.simulation import graph

    folder, model, _ = two_layers
    assert graph.fitting_batch(10 * 2**20) == 8 and graph.fitting_batch(100 * 2**20) == 2
    assert graph.fitting_batch(2**40) == 1  # one sample at least
    simulated_graph(str(model), str(folder / "ranges.json"), str(tmp_path / "sim.onnx"), [], [])
    wide = activation_ranges(str(model), str(folder / "calibration.npy"), str(tmp_path / "wide.json"))
    rows = layer_report(str(model), str(tmp_path / "sim.onnx"), str(folder / "calibration.npy"), [])
    monkeypatch.setattr(graph, "INTERMEDIATES_BYTES", 1)  # one sample a pass
    assert graph.fitting_batch(10) == 1
    narrow = activation_ranges(str(model), str(folder / "calibration.npy"), str(tmp_path / "narrow.json"))
    assert json.loads((tmp_path / "narrow.json").read_text()) == json.loads((tmp_path / "wide.json").read_text())
    assert narrow["costs"] == wide["costs"] and narrow["costs"]["fc1"] == 64 * 16  # per sample, either way
    assert layer_report(str(model), str(tmp_path / "sim.onnx"), str(folder / "calibration.npy"), []) == rows


def test_a_format_grid_ties_a_concat_to_one_scale_or_puts_activations_on_a_symmetric_grid(tmp_path):
    """TFLite and XNNPACK put a Concat's inputs on its output's scale: in their grid the small
    input takes the large one's (the union range); Core ML's activations are symmetric (zero point 0)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Mul", ["x", "ten"], ["big"], name="scale_up"),
             helper.make_node("Relu", ["x"], ["small"], name="relu"),
             helper.make_node("Add", ["small", "zero"], ["small_out"], name="add"),
             helper.make_node("Concat", ["big", "small_out"], ["y"], name="cat", axis=1)]
    graph = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                              [numpy_helper.from_array(np.array(10.0, np.float32), "ten"),
                               numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "cat.onnx")
    np.save(tmp_path / "samples.npy", np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32))
    activation_ranges(str(tmp_path / "cat.onnx"), str(tmp_path / "samples.npy"), str(tmp_path / "ranges.json"))

    def grid(**how):
        simulated_graph(str(tmp_path / "cat.onnx"), str(tmp_path / "ranges.json"), str(tmp_path / "sim.onnx"), [],
                        [], how)
        return {i.name: float(numpy_helper.to_array(i)) for i in onnx.load(str(tmp_path / "sim.onnx")).graph.initializer
                if i.name.endswith(("__scale", "__zero"))}

    common, tied, symmetric = grid(), grid(tied_ops=["Concat"]), grid(symmetric=True)
    regridded = {name: simulated_graph(str(tmp_path / "cat.onnx"), str(tmp_path / "ranges.json"),
                                       str(tmp_path / "sim.onnx"), floats, [], {"tied_ops": ["Concat"]})["regridded"]
                 for name, floats in (("tied", []), ("cat float", ["cat"]))}
    # the small input alone moves; with the cat float the grid changes nothing (not simulated again)
    assert regridded == {"tied": 1, "cat float": 0}
    assert common["big__scale"] > 5 * common["small_out__scale"]  # each tensor its own range
    assert tied["big__scale"] == tied["small_out__scale"] == tied["y__scale"] >= common["big__scale"]
    assert all(v == 0 for k, v in symmetric.items() if k.endswith("__zero"))
    assert symmetric["small_out__scale"] == pytest.approx(2 * common["small_out__scale"], rel=0.05)  # half the levels


def _sigmoid_head(tmp_path):
    """conv logits (a decisive head: a wide range) -> sigmoid -> conv: a detector's scores read on."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "W1"], ["logits"], name="cls"),
             helper.make_node("Sigmoid", ["logits"], ["scores"], name="sigmoid"),
             helper.make_node("Conv", ["scores", "W2"], ["y"], name="mix")]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 4, 4])],
                              [numpy_helper.from_array((rng.normal(size=(3, 2, 1, 1)) * 8).astype(np.float32), "W1"),
                               numpy_helper.from_array(rng.normal(size=(2, 3, 1, 1)).astype(np.float32), "W2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "head.onnx")
    samples = rng.standard_t(1.5, size=(64, 2, 4, 4)).astype(np.float32)  # heavy tails: a few values far out
    np.save(tmp_path / "samples.npy", samples)
    return tmp_path / "head.onnx"


def _pairs(path):
    found = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    return {name[:-len("__scale")]: (float(found[name]), int(found[name[:-len("__scale")] + "__zero"]))
            for name in found if name.endswith("__scale")}


def test_a_format_grid_fixes_the_output_grid_its_kernels_require_or_leaves_unannotated_ops_float(tmp_path):
    """TFLite's int8 LOGISTIC writes on 1/256 from -128 whatever the calibration saw (a score
    threshold of 0.25 is then a grid point); XNNPACK's quantizer annotates no sigmoid: its scores
    are computed in float from the dequantized logits and quantized again only where an int8 op
    reads them."""
    from edgekit.formats.executorch.builder import ExecuTorchBuilder
    from edgekit.formats.tflite.builder import TFLiteBuilder

    model = _sigmoid_head(tmp_path)
    activation_ranges(str(model), str(tmp_path / "samples.npy"), str(tmp_path / "ranges.json"))
    graphs = {}
    for name, rules in (("common", None), ("tflite", TFLiteBuilder.grid.rules()),
                        ("xnnpack", {**ExecuTorchBuilder.grid.rules(), "tied_ops": []})):
        graphs[name] = simulated_graph(str(model), str(tmp_path / "ranges.json"), str(tmp_path / f"{name}.onnx"),
                                       [], [], rules)
    common, tflite = _pairs(tmp_path / "common.onnx"), _pairs(tmp_path / "tflite.onnx")
    assert common["scores"] != (1 / 256, -128) and tflite["scores"] == (1 / 256, -128)
    assert {k: v for k, v in tflite.items() if k != "scores"} == {k: v for k, v in common.items() if k != "scores"}
    xnnpack = onnx.load(str(tmp_path / "xnnpack.onnx"))
    sigmoid = next(n for n in xnnpack.graph.node if n.op_type == "Sigmoid")
    assert sigmoid.input[0] == "logits" and sigmoid.output[0] == "scores__float"  # float, quantized for its reader
    assert graphs["common"]["regridded"] == 0 < graphs["tflite"]["regridded"] and graphs["xnnpack"]["regridded"] == 1


def test_a_histogram_estimator_sets_the_ranges_pytorchs_observer_would(tmp_path):
    """ExecuTorch's XNNPACK quantizer (PT2E) ranges activations by HistogramObserver: the L2-best
    sub-range of a 2048-bin histogram, which clips the farthest values min/max spans. The
    simulation's histogram ranges are that observer's grid, exactly."""
    import torch
    from torch.ao.quantization.observer import HistogramObserver

    model = _sigmoid_head(tmp_path)
    minmax = activation_ranges(str(model), str(tmp_path / "samples.npy"), str(tmp_path / "minmax.json"))
    histogram = activation_ranges(str(model), str(tmp_path / "samples.npy"), str(tmp_path / "histogram.json"),
                                  estimator="histogram")
    assert minmax["tensors"] == histogram["tensors"] and minmax["costs"] == histogram["costs"]
    wide = json.loads((tmp_path / "minmax.json").read_text())["ranges"]
    narrow = json.loads((tmp_path / "histogram.json").read_text())
    assert narrow["estimator"] == "histogram"
    assert wide["x"][0] < narrow["ranges"]["x"][0] < narrow["ranges"]["x"][1] < wide["x"][1]
    observer = HistogramObserver(dtype=torch.qint8, quant_min=-128, quant_max=127, eps=2 ** -12)
    samples = np.load(tmp_path / "samples.npy")
    for start in range(0, len(samples), 8):  # the simulation's batches
        observer(torch.from_numpy(samples[start:start + 8]))
    scale, zero = (float(v.reshape(-1)[0]) for v in observer.calculate_qparams())
    simulated_graph(str(model), str(tmp_path / "histogram.json"), str(tmp_path / "sim.onnx"), [], [])
    assert _pairs(tmp_path / "sim.onnx")["x"] == (pytest.approx(scale, rel=1e-6), int(zero))


def test_a_value_a_loop_body_reads_through_a_transpose_stays_float_and_the_simulation_runs(tmp_path):
    """tf2onnx's masked GRU: an Add feeds a Transpose whose output a Loop body reads from outside.
    A pair on the Add's output made ONNX Runtime's optimizer abort (SIGABRT) when it moved the
    pair across the Transpose: the simulation was lost for the whole model."""
    import subprocess
    import sys

    from onnx import TensorProto, helper

    from tests.conversion.test_onnx_torch import _rnn_loop_model

    model = _rnn_loop_model(steps=4)
    graph = model.graph
    graph.node[0].input[0] = "shifted"
    graph.node.insert(0, helper.make_node("Add", ["x", "bias"], ["shifted"], name="shift"))
    graph.initializer.append(numpy_helper.from_array(np.full((3,), 0.5, np.float32), "bias"))
    # the initial state follows the batch: zeros of [N, 4] from the first frame
    graph.node.insert(2, helper.make_node("Gather", ["seq", "first"], ["frame0"], axis=0, name="first_frame"))
    graph.node.insert(3, helper.make_node("MatMul", ["frame0", "none"], ["h_start"], name="zero_state"))
    graph.node[4].input[3] = "h_start"
    graph.initializer.extend([numpy_helper.from_array(np.array(0, np.int64), "first"),
                              numpy_helper.from_array(np.zeros((3, 4), np.float32), "none")])
    graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    graph.output[1].type.tensor_type.elem_type = TensorProto.FLOAT
    source = tmp_path / "loop.onnx"
    onnx.save(model, source)
    x = np.random.default_rng(0).normal(size=(16, 4, 3)).astype(np.float32)
    np.save(tmp_path / "cal.npy", x)
    activation_ranges(str(source), str(tmp_path / "cal.npy"), str(tmp_path / "ranges.json"))
    simulated_graph(str(source), str(tmp_path / "ranges.json"), str(tmp_path / "sim.onnx"), [], [])
    run = ("import numpy as np, onnxruntime as o; s = o.InferenceSession(%r); "
           "print(s.run(None, {'x': np.load(%r)})[0].shape)" % (str(tmp_path / "sim.onnx"), str(tmp_path / "cal.npy")))
    child = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-500:]
    assert child.stdout.strip() == "(16, 4, 4)"


def test_a_mask_comparison_reads_the_float_value_as_every_format_builds_it(tmp_path):
    """Keras Masking(-1) compares the input with -1. The simulation compared the quantized copy,
    where -1 lands a rounding step away: every padded step counted as data, plain INT8 scored
    79% in the simulation of a masked GRU whose real artifacts pass at 100%."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Equal", ["x", "sentinel"], ["padded"], name="mask"),
             helper.make_node("Not", ["padded"], ["kept"], name="keep"),
             helper.make_node("Cast", ["kept"], ["weight"], to=TensorProto.FLOAT, name="as_float"),
             helper.make_node("MatMul", ["x", "w"], ["h"], name="dense"),
             helper.make_node("Mul", ["h", "weight"], ["y"], name="masked")]
    graph = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(np.float32(-1), "sentinel"),
                               numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")])
    source = tmp_path / "mask.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source)
    x = np.random.default_rng(0).uniform(-0.3, 7.3, (64, 4)).astype(np.float32)
    x[::3] = -1.0
    np.save(tmp_path / "cal.npy", x)
    activation_ranges(str(source), str(tmp_path / "cal.npy"), str(tmp_path / "ranges.json"))
    simulated_graph(str(source), str(tmp_path / "ranges.json"), str(tmp_path / "sim.onnx"), [], [])
    simulated = onnx.load(tmp_path / "sim.onnx")
    assert next(n for n in simulated.graph.node if n.op_type == "Equal").input[0] == "x"
    out = ort.InferenceSession(str(tmp_path / "sim.onnx")).run(None, {"x": x})[0]
    assert np.all(out[::3] == 0)
