"""OpenVINO runs the package's ONNX artifacts (INT8 QDQ and float) like ONNX Runtime does."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.errors import BackendUnavailableError
from edgekit.manifest import Manifest
from tests.conftest import EVAL, device_cli

openvino = pytest.importorskip("openvino")


def onnx_artifacts(package):
    manifest = Manifest.from_json((package / "manifest.json").read_bytes())
    return [a for a in manifest.artifacts if a.target == "onnx"]


def test_openvino_outputs_equal_onnx_runtime_on_the_same_artifact(digits_all_package, tmp_path):
    from edgekit.formats.onnx.backend import OnnxRuntimeBackend
    from edgekit.formats.onnx.openvino import OpenVINOBackend

    with np.load(EVAL) as data:
        x = data["x"][:64].astype(np.float32) / 255.0
    artifacts = onnx_artifacts(digits_all_package)
    assert {a.precision for a in artifacts} >= {"int8"}
    for artifact in artifacts:
        path = str(digits_all_package / artifact.path)
        # ONNX Runtime without graph optimizations runs the QDQ graph as quantized, on every CPU; its
        # fused kernels saturate on x86 without VNNI (the S8S8 build), which OpenVINO's do not
        reference = OnnxRuntimeBackend(path, threads=1, graph_optimizations=False).run(x)[0]
        with OpenVINOBackend(path, threads=1, compiled_dir=str(tmp_path / artifact.key)) as ov:
            assert [t.name for t in ov.inputs] == ["image"] and ov.inputs[0].shape[0] == -1
            got = ov.run(x)[0]
        # the same QDQ graph: equal up to a few int8 steps of the softmax output (1/255 each: the kernels
        # round and requantize differently)
        step = 1.0 / 32 if artifact.precision == "int8" else 1e-4
        assert got.shape == reference.shape and np.abs(got - reference).max() <= step, artifact.key
        assert (got.argmax(1) == reference.argmax(1)).mean() >= 0.98
        assert any((tmp_path / artifact.key).iterdir())  # the compiled blob is kept for the next load


def test_the_device_runs_a_package_with_backend_openvino(digits_all_package, tmp_path):
    with np.load(EVAL) as data:
        np.save(tmp_path / "digits.npy", data["x"][:5])
    result = device_cli(digits_all_package, "-i", tmp_path / "digits.npy", "--backend", "openvino",
                        "--output", tmp_path / "out.json", "-v")
    assert result.returncode == 0, result.stderr
    assert "openvino" in (result.stdout + result.stderr).lower()
    rows = json.loads((tmp_path / "out.json").read_text())
    assert len(rows) == 5


def test_a_missing_openvino_is_a_clear_error_naming_the_extra(monkeypatch):
    import sys

    from edgekit.formats.onnx.openvino import OpenVINOBackend

    monkeypatch.setitem(sys.modules, "openvino", None)  # as on a device without the library
    assert OpenVINOBackend.available() is None
    with pytest.raises(BackendUnavailableError, match="OpenVINO is not installed") as raised:
        OpenVINOBackend("model.onnx")
    assert "edgekit[openvino]" in raised.value.hint


def test_a_model_openvino_cannot_read_is_a_package_error(tmp_path):
    from edgekit.errors import PackageError
    from edgekit.formats.onnx.openvino import OpenVINOBackend

    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not an onnx file")
    with pytest.raises(PackageError, match="OpenVINO cannot load"):
        OpenVINOBackend(str(broken))


def test_a_damaged_compiled_blob_is_replaced_and_said(digits_all_package, tmp_path):
    """A damaged blob was never replaced and `-v` said compiled_cache=True whatever happened:
    the blob is sealed with its hash, a damaged or empty one is removed and compiled again, and
    describe() says which of hit / written / replaced it was."""
    from edgekit.machine.compiled_cache import problem as compiled_problem
    from edgekit.formats.onnx.openvino import OpenVINOBackend

    path = str(digits_all_package / onnx_artifacts(digits_all_package)[0].path)
    folder = tmp_path / "compiled"
    with OpenVINOBackend(path, threads=1, compiled_dir=str(folder)) as ov:
        assert ov.describe()["compiled_cache"] == "written"
    with OpenVINOBackend(path, threads=1, compiled_dir=str(folder)) as ov:
        assert ov.describe()["compiled_cache"] == "hit"
    blob = next(folder.glob("*.blob"))
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert "does not match the hash" in compiled_problem(folder)
    with OpenVINOBackend(path, threads=1, compiled_dir=str(folder)) as ov:
        said = ov.describe()["compiled_cache"]
        assert said.startswith("replaced: ") and "does not match the hash" in said
    assert compiled_problem(folder) is None  # compiled again and sealed
    blob = next(folder.glob("*.blob"))
    blob.write_bytes(b"")
    assert compiled_problem(folder) == f"{blob.name} is empty (0 bytes)"
    with OpenVINOBackend(path, threads=1, compiled_dir=str(folder)) as ov:
        assert "is empty" in ov.describe()["compiled_cache"]
    assert next(folder.glob("*.blob")).stat().st_size > 0
