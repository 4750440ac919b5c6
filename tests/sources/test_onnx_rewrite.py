"""The ONNX source's lossless rewrites on real exports' shapes: nested Ifs that read values of
the branch around them, and recurrent states whose dims an exporter named after its nodes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.sources.onnx_rewrite import batch_dim_name, fold_constant_ifs
from tests.conftest import edgekit_cli

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def nested_if_model(path) -> None:
    """y = relu(x @ W) * 2 through two constant Ifs: the inner one reads ``t``, a value the outer
    branch makes (an outer-scope read), as streaming exports with a sample-rate switch do."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inner_then = helper.make_graph([helper.make_node("Mul", ["t", "two"], ["u"])], "inner_then", [],
                                   [helper.make_tensor_value_info("u", TensorProto.FLOAT, None)])
    inner_else = helper.make_graph([helper.make_node("Neg", ["t"], ["v"])], "inner_else", [],
                                   [helper.make_tensor_value_info("v", TensorProto.FLOAT, None)])
    outer_then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["t"]),
         helper.make_node("If", ["yes"], ["r"], then_branch=inner_then, else_branch=inner_else, name="inner")],
        "outer_then", [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    outer_else = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "outer_else", [],
                                   [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["yes"], ["y"], then_branch=outer_then, else_branch=outer_else, name="outer")],
        "nested", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [numpy_helper.from_array(rng.normal(0, 0.5, (8, 8)).astype(np.float32), "W"),
         numpy_helper.from_array(np.asarray(True), "yes"), numpy_helper.from_array(np.asarray(2.0, np.float32), "two")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_nested_ifs_fold_and_keep_their_outer_scope_reads(tmp_path):
    nested_if_model(tmp_path / "nested.onnx")
    model = onnx.load(str(tmp_path / "nested.onnx"))
    folded = fold_constant_ifs(model)
    assert [f["node"] for f in folded] == ["outer", "outer/inner"]
    onnx.checker.check_model(model, full_check=True)  # topologically sorted, every read defined
    onnx.save(model, str(tmp_path / "folded.onnx"))
    x = np.random.default_rng(1).normal(0, 1, (4, 8)).astype(np.float32)
    before = ort.InferenceSession(str(tmp_path / "nested.onnx")).run(None, {"x": x})[0]
    after = ort.InferenceSession(str(tmp_path / "folded.onnx")).run(None, {"x": x})[0]
    np.testing.assert_array_equal(before, after)


def test_a_nested_if_export_packages_with_default_flags(tmp_path):
    nested_if_model(tmp_path / "nested.onnx")
    x = np.random.default_rng(2).normal(0, 1, (300, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = edgekit_cli("package", tmp_path / "nested.onnx", "-c", tmp_path / "x.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "nested.edgekit" / "manifest.json").read_text())
    assert len(manifest["source"]["rewrites"]["folded_ifs"]) == 2
    assert manifest["validation"]["artifacts"]["onnx"]["verdict"] == "passed"


def test_the_batch_is_the_dim_the_inputs_share_whatever_it_is_named():
    # a state [AddstateN_dim_0, batch, 128] beside audio [batch, 512]: not the state's first dim
    assert batch_dim_name([["AddstateN_dim_0", "batch", ""], ["batch", ""]]) == "batch"
    assert batch_dim_name([["batch", ""], ["AddstateN_dim_0", "batch", ""]]) == "batch"
    assert batch_dim_name([["N", ""]]) == "N" and batch_dim_name([["", ""]]) is None
