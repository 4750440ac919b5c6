"""Validation runs an artifact in batches that fit a memory budget: one sample first, and what
its run added to the process's memory sets how many run at a time (a 256x256 U-Net's 32-sample
batches ran validation to 19 GB). The outputs are the same, sample for sample, whatever the batch."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from edgekit.conversion import worker
from edgekit.formats import get_backend
from edgekit.packaging import validate


def _wide_model(path) -> None:
    """x [N, 1, 64, 64] -> resized 4x -> 32 channels at 256x256 (8 MB a sample) -> their means [N, 32]."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["big"], name="up", mode="nearest"),
             helper.make_node("Conv", ["big", "w"], ["wide"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["wide"], ["pooled"], name="pool"),
             helper.make_node("Flatten", ["pooled"], ["y"], name="flat")]
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 32])],
                              [numpy_helper.from_array(np.array([1, 1, 4, 4], np.float32), "scales"),
                               numpy_helper.from_array(rng.normal(size=(32, 1, 3, 3)).astype(np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_sample_that_takes_much_memory_runs_in_smaller_batches_with_the_same_outputs(tmp_path, monkeypatch):
    _wide_model(tmp_path / "wide.onnx")
    x = np.random.default_rng(1).normal(size=(40, 1, 64, 64)).astype(np.float32)
    np.savez(tmp_path / "inputs.npz", x=x)
    monkeypatch.setattr(validate, "VALIDATION_BYTES", 16 * 2**20)  # a budget two samples fill
    chosen = []
    measured = validate.fitting
    monkeypatch.setattr(validate, "fitting", lambda grew, most: chosen.append((grew, measured(grew, most))) or
                        chosen[-1][1])
    ran = validate.run_artifact(validate.ArtifactRun(
        worker.reference(get_backend("onnxruntime")), str(tmp_path / "wide.onnx"), str(tmp_path / "inputs.npz"), ("y",),
        "onnx", "onnx", 32, {}, str(tmp_path / "out")))
    (grew, batch), = chosen
    assert grew > 4 * 2**20 and 1 <= batch < 4  # one sample's run added its 8 MB tensors; 32 would add 256+ MB
    expected = ort.InferenceSession(str(tmp_path / "wide.onnx")).run(["y"], {"x": x})[0]
    assert ran.files == (str(tmp_path / "out" / "o0.npy"),) and ran.batch == batch
    stored = np.load(ran.files[0])
    assert np.allclose(stored, expected, atol=1e-5) and len(stored) == 40


def test_the_parent_maps_each_artifacts_outputs_instead_of_holding_them(tmp_path):
    """Every artifact's outputs on every held-out sample stay on disk, mapped, until a gate reads
    them (a package of eight artifacts held eight copies of a segmentation map per sample); a
    reader that writes gets its own copy, never the file's."""
    from edgekit.formats.building import BuildResult
    from edgekit.manifest import Artifact

    _wide_model(tmp_path / "wide.onnx")
    x = np.random.default_rng(1).normal(size=(12, 1, 64, 64)).astype(np.float32)
    built = BuildResult(artifact=Artifact(format="onnx", path="wide.onnx", sha256="", bytes=0, precision="float32"))
    outputs = validate._run_artifact(tmp_path / "wide.onnx", "onnxruntime", {"x": x}, ["y"], built)
    y = outputs["y"]
    assert isinstance(y, np.memmap) and y.shape == (12, 32)
    expected = ort.InferenceSession(str(tmp_path / "wide.onnx")).run(["y"], {"x": x})[0]
    assert np.allclose(y, expected, atol=1e-5)
    y[0] = 0.0  # copy on write: a reader that writes gets its own page (the run's folder is gone by now)
    assert y[0].sum() == 0.0 and np.allclose(y[1:], expected[1:], atol=1e-5)


def test_the_batch_is_what_fits_the_budget_at_least_one_at_most_the_most():
    assert validate.fitting(0, 32) == 32  # nothing measured: the batch as asked
    assert validate.fitting(validate.VALIDATION_BYTES // 5, 32) == 5
    assert validate.fitting(validate.VALIDATION_BYTES * 3, 32) == 1
    assert validate.fitting(1024, 32) == 32


def test_memory_is_read_without_looking_libc_up_again(monkeypatch):
    """Each batch reads memory twice; ``ctypes.util.find_library`` runs ``ldconfig -p`` in a
    subprocess, a fork of a child holding a converter's gigabytes: it was called every time."""
    import ctypes.util

    validate._mallinfo2.cache_clear()
    looked_up = []
    real = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: looked_up.append(name) or real(name))
    readings = [validate.memory_bytes() for _ in range(4)]
    assert len(looked_up) <= 1
    assert all(peak > 0 and now > 0 for peak, now, _ in readings)
