"""An artifact's companions fail alone: a `.ort` that ONNX Runtime's converter refuses (its own
type inference can reject a graph the full runtime runs) once discarded the validated `.onnx`."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from edgekit.formats.building import BuildContext
from edgekit.formats.onnx.builder import ORT_PATH, _convert_to_ort


def context(tmp_path: Path) -> BuildContext:
    (tmp_path / "pkg" / "onnx").mkdir(parents=True)
    return BuildContext(calibration_npy="", eval_npy="", package_dir=tmp_path / "pkg", workdir=tmp_path / "work")


def test_a_refused_ort_conversion_is_reported_not_raised(tmp_path):
    model = tmp_path / "model.int8.onnx"
    model.write_bytes(b"not an onnx model at all")
    reason = _convert_to_ort(model, context(tmp_path))
    assert reason and "ONNX -> ORT format conversion failed" in reason
    assert not (tmp_path / "pkg" / ORT_PATH).exists()


def test_a_good_model_gets_its_ort_companion(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = tmp_path / "model.int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    assert _convert_to_ort(model, context(tmp_path)) is None
    assert (tmp_path / "pkg" / ORT_PATH).stat().st_size > 0
