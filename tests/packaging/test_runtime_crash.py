"""Every step that runs a converted artifact runs it in a child process: a runtime library that
dies on an artifact (a signal, no Python exception) fails that format by name, and the other
formats still ship."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.formats import FORMATS, register
from edgekit.packaging import build_package
from edgekit.packaging.options import PackageOptions
from tests.conftest import ROOT
from tests.packaging import crashing_format

onnx = pytest.importorskip("onnx")


def _dense_onnx(path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.normal(0, 0.5, (8, 4)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.fixture
def crashy_registered(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the child imports the format's backend by name
    register(crashing_format.FORMAT)
    yield
    FORMATS.remove("crashy")


def test_a_runtime_killed_by_a_signal_fails_its_format_and_the_others_ship(tmp_path, crashy_registered,
                                                                           own_converter_children):
    _dense_onnx(tmp_path / "dense.onnx")
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calibration.npz", x=rng.normal(0, 1, (200, 8)).astype(np.float32))
    result = build_package(PackageOptions(model=str(tmp_path / "dense.onnx"),
                                          calibration=str(tmp_path / "calibration.npz"),
                                          output_dir=str(tmp_path / "out"), formats=["crashy", "onnx"],
                                          allow_partial=True, also_float=False))
    failed = {f.target: f for f in result.failed}
    assert set(failed) == {"crashy"}
    message = failed["crashy"].error
    assert "crashing-runtime crashed running the crashy artifact" in message
    assert "killed by signal 11 (SIGSEGV)" in message
    assert "package without --format crashy" in failed["crashy"].hint
    assert {a.format for a in result.manifest.artifacts} == {"onnx"}
    assert not (result.path / "crashy").exists()


def test_the_tflite_build_opens_no_litert_interpreter_in_the_packager(tmp_path, monkeypatch):
    """Reading a TFLite artifact's ops, scales and output tensors is LiteRT loading it: done in a
    child like running it (a converter's artifact that kills LiteRT ends that child, not the
    packager). The packager's own interpreters are counted, then the real class runs."""
    from edgekit.formats.tflite.backend import _interpreter_module

    module = _interpreter_module()[0]
    opened = []
    real_init = module.Interpreter.__init__

    def counted(self, *args, **kwargs):
        opened.append(kwargs.get("model_path"))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(module.Interpreter, "__init__", counted)
    _dense_onnx(tmp_path / "dense.onnx")
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calibration.npz", x=rng.normal(0, 1, (200, 8)).astype(np.float32))
    result = build_package(PackageOptions(model=str(tmp_path / "dense.onnx"),
                                          calibration=str(tmp_path / "calibration.npz"),
                                          output_dir=str(tmp_path / "out"), formats=["tflite"], also_float=False))
    assert not result.failed and result.manifest.artifacts[0].precision.startswith("int8")
    assert [q.name for q in result.manifest.artifacts[0].outputs] == ["y"]  # the signature, read in the child
    assert opened == []
