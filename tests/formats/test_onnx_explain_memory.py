"""The ONNX per-layer report (``--explain``, the search's ranking) held every intermediate tensor
of every sample of both the float and the QDQ model (ONNX Runtime's ``collect_activations``):
memory grew with the sample count, the search's peak on a detector. Each sample's activations
are now reduced to sums of squares before the next sample runs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edgekit.formats.onnx import convert as build

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

SIDE = 256  # a 4 x 256 x 256 float tensor: 1 MiB per intermediate per sample


def _two_convs(path, side: int) -> None:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(0, 0.5, (4, 4, 1, 1)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.5, (4, 4, 1, 1)).astype(np.float32), "w2")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["h"], name="conv1"), helper.make_node("Relu", ["h"], ["r"], name="act"),
         helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")],
        "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, side, side])], [w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _quantized(tmp_path, side: int, count: int) -> tuple[str, str, str]:
    _two_convs(tmp_path / "float.onnx", side)
    x = np.random.default_rng(1).normal(0, 1, (count, 4, side, side)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    settings = {"calibration_method": "minmax", "max_intermediate_outputs": None, "excluded": []}
    build._quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), {"x": x[:4]}, ["x"], "s8",
                           False, settings)
    return str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), str(tmp_path / "x.npy")


def test_the_report_matches_onnx_runtimes_own_matching(tmp_path):
    from onnxruntime.quantization import CalibrationDataReader
    from onnxruntime.quantization.qdq_loss_debug import (
        collect_activations, compute_activation_error, create_activation_matching,
        modify_model_output_intermediate_tensors)

    float_onnx, qdq_onnx, samples = _quantized(tmp_path, 16, 12)
    rows = build.explain(build.ExplainRequest(float_onnx, qdq_onnx, samples, (), str(tmp_path))).rows
    x = np.load(samples)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.i = 0

        def get_next(self):
            self.i += 1
            return {"x": x[self.i - 1 : self.i]} if self.i <= len(x) else None

    modify_model_output_intermediate_tensors(float_onnx, str(tmp_path / "f.aug.onnx"))
    modify_model_output_intermediate_tensors(qdq_onnx, str(tmp_path / "q.aug.onnx"))
    expected = compute_activation_error(create_activation_matching(
        collect_activations(str(tmp_path / "q.aug.onnx"), Reader()), collect_activations(str(tmp_path / "f.aug.onnx"),
                                                                                         Reader())))
    found = {row["tensor"]: row["sqnr_db"] for row in rows}
    assert found.keys() == {t for t, e in expected.items() if "xmodel_err" in e} and found
    for tensor, value in found.items():
        assert value == pytest.approx(float(expected[tensor]["xmodel_err"]), abs=1e-3), tensor


@pytest.mark.slow
def test_the_reports_memory_does_not_grow_with_the_sample_count(tmp_path):
    """60 samples of 1 MiB intermediates: ONNX Runtime's collection held about 60 x 7 MiB over
    both models; one sample's at a time stays within a few MiB of where it started."""
    float_onnx, qdq_onnx, samples = _quantized(tmp_path, SIDE, 60)
    code = (
        "import json, resource, sys, numpy as np, onnx, onnxruntime\n"
        "from edgekit.formats.onnx import convert as build\n"
        f"np.load({samples!r}).sum()\n"  # the samples themselves are not the report's memory
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"rows = build.explain(build.ExplainRequest({float_onnx!r}, {qdq_onnx!r}, {samples!r}, (), {str(tmp_path)!r})).rows\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(json.dumps({'grew_mib': (after - before) / 1024, 'rows': len(rows)}))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["rows"] >= 2
    assert found["grew_mib"] < 150, found  # holding every sample's would be ~400 MiB
