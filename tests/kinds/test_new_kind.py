"""A new output kind is one new module in ``edgekit/kinds/``: inferred, gated, shown in the table
and accepted by ``--output-kind``, with nothing else in edgekit edited.

The toy kind, ``signs``, is a hashing head's tanh codes: values in [-1, 1], most of them
saturated; its gate is the share of codes whose sign INT8 keeps. The module is added to a copy of
the edgekit package; a child process using that copy packages a small ONNX model (MatMul, Tanh)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import edgekit_with

pytestmark = pytest.mark.slow

TOY_KIND = '''
"""Toy: tanh codes (a hashing head): the sign of each code INT8 keeps."""

import numpy as np

from . import register
from .base import Kind, OutputKind, TaskResult, shape_text


@register
class Signs(Kind):
    name = "signs"
    help = "tanh codes: sign agreement"
    order = 70

    def from_values(self, name, reference, common):
        if reference.ndim != 2 or not reference.size or np.abs(reference).max() > 1 + 1e-5:
            return None
        if np.mean(np.abs(reference) >= 0.9) < 0.5:
            return None
        return OutputKind(name, self.name, 1, f"{shape_text(list(reference.shape))}, codes in [-1, 1], mostly "
                          "saturated", "values", **common)

    def evaluate(self, reference, candidate, targets, max_accuracy_drop_pp, axis, threshold):
        agreement = float(np.mean(np.sign(reference) == np.sign(candidate)))
        floor = 1 - max_accuracy_drop_pp / 100
        return TaskResult(self.name, {"sign_agreement": agreement}, agreement >= floor,
                          f"sign agreement with float >= {100 * floor:g}%", agreement - floor)
'''


def _tanh_model(path, rng):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = (rng.normal(size=(8, 16)) * 3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "w"], ["z"], name="dense"),
         helper.make_node("Tanh", ["z"], ["codes"], name="codes")],
        "hashing", [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("codes", TensorProto.FLOAT, ["batch", 16])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_a_toy_kind_is_one_module_inferred_gated_and_shown(tmp_path):
    python = edgekit_with(tmp_path, {"kinds/signs.py": TOY_KIND})
    rng = np.random.default_rng(0)
    _tanh_model(tmp_path / "hashing.onnx", rng)
    np.save(tmp_path / "calibration.npy", rng.normal(size=(200, 8)).astype(np.float32))
    np.save(tmp_path / "eval.npy", rng.normal(size=(200, 8)).astype(np.float32))

    def child(*args):
        return python("-m", "edgekit.cli", *args)

    assert "signs" in child("package", "--help").stdout  # --output-kind lists it
    built = child("package", tmp_path / "hashing.onnx", "-c", tmp_path / "calibration.npy", "--eval",
                  tmp_path / "eval.npy", "--format", "onnx", "--no-also-float", "--max-accuracy-drop", "5",
                  "-o", tmp_path / "out")
    assert built.returncode == 0, built.stderr[-3000:]
    assert "output codes: signs, [N, 16], codes in [-1, 1], mostly saturated" in built.stdout  # inferred, said
    assert "output 'codes' signs: sign_agreement" in built.stdout and "passes (sign agreement" in built.stdout
    manifest = json.loads((tmp_path / "out" / "hashing.edgekit" / "manifest.json").read_text())
    assert manifest["validation"]["kinds"]["codes"]["kind"] == "signs"
    task = manifest["validation"]["artifacts"]["onnx"]["tasks"]["codes"]
    assert task["task"] == "signs" and task["passed"] and task["values"]["sign_agreement"] >= 0.95
    given = child("package", tmp_path / "hashing.onnx", "-c", tmp_path / "calibration.npy", "--format", "onnx",
                  "--output-kind", "signs:0.3", "-o", tmp_path / "again")
    assert given.returncode == 2 and "signs takes no score threshold" in given.stderr  # a usage error
