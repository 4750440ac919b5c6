"""Triton model repository export, parsed with Triton's own model-config protobuf."""

from __future__ import annotations

import os

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from edgekit.fsutil import sha256_file
from edgekit.manifest import Manifest
from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def parse(path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_cpu_repository_is_valid_triton_config(digits_all_package, tmp_path, capsys):
    code, out, err = run_cli(capsys, "export", "triton", digits_all_package, "-o", tmp_path / "repo",
                             "--max-batch-size", "16")
    assert code == 0, err
    model_dir = tmp_path / "repo" / "digits"
    config = parse(model_dir / "config.pbtxt")
    assert config.name == "digits" and config.backend == "onnxruntime" and config.max_batch_size == 16
    assert list(config.input[0].dims) == [8, 8, 1] and config.input[0].data_type == model_config_pb2.TYPE_FP32
    assert list(config.output[0].dims) == [10] and config.output[0].label_filename == "labels.txt"
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    assert sha256_file(model_dir / "1" / "model.onnx") == manifest.artifact("onnx").sha256
    assert (model_dir / "labels.txt").read_text().split() == [str(i) for i in range(10)]


def test_gpu_repository_uses_tensorrt_int8_and_kserve_manifest(digits_all_package, tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", "triton", digits_all_package, "-o", tmp_path / "repo", "--gpu",
                           "--kserve", "s3://bucket/repo")
    assert code == 0, err
    config = parse(tmp_path / "repo" / "digits" / "config.pbtxt")
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == "INT8"
    yaml = (tmp_path / "repo" / "digits.inferenceservice.yaml").read_text()
    assert "kind: InferenceService" in yaml and 'storageUri: "s3://bucket/repo"' in yaml and "protocolVersion: v2" in yaml
    code, _, err = run_cli(capsys, "export", "triton", digits_all_package, "-o", tmp_path / "repo")
    assert code == 1 and "already exists" in err


def test_package_without_onnx_is_refused(digits_package, tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", "triton", digits_package, "-o", tmp_path / "repo")
    assert code == 1 and "has no ONNX artifact" in err and "--target onnx" in err


def test_every_input_and_output_is_in_the_config_with_its_datatype():
    """A detector-style package with two inputs (one of token ids) and two outputs: the config
    names all four (the export once wrote only the first of each)."""
    from edgekit.export.triton import config_pbtxt
    from edgekit.manifest import TensorSpec
    from tests.test_manifest import _manifest

    manifest = _manifest()
    manifest.inputs = [TensorSpec("image", [-1, 32, 32, 3]), TensorSpec("tokens", [-1, 6], dtype="int64")]
    manifest.outputs = [TensorSpec("boxes", [-1, 10, 4]), TensorSpec("scores", [-1, 10], labels=None)]
    config = text_format.Parse(config_pbtxt(manifest, 8, False, 1, 500), model_config_pb2.ModelConfig())
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("image", model_config_pb2.TYPE_FP32, [32, 32, 3]), ("tokens", model_config_pb2.TYPE_INT64, [6])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("boxes", [10, 4]), ("scores", [10])]


def test_the_python_backend_export_serves_the_package_on_a_real_tritonserver(digits_all_package, tmp_path, capsys):
    """``--backend python`` on Triton 2.51 (the server bundled in the nvidia-pytriton wheel): the
    model loads, answers tritonclient, batches concurrent requests, and gives
    what edgekit.load gives; a malformed request fails alone."""
    import site

    import numpy as np
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    import edgekit
    from tests.conftest import EVAL, ROOT, load_npz
    from tests.export.tritonserver import running_tritonserver

    python_path = os.pathsep.join([str(ROOT), *site.getsitepackages()])
    code, _, err = run_cli(capsys, "export", "triton", digits_all_package, "-o", tmp_path / "repo", "--backend",
                           "python", "--artifact", "onnx", "--python-path", python_path, "--max-batch-size", "16")
    assert code == 0, err
    config = parse(tmp_path / "repo" / "digits" / "config.pbtxt")
    assert config.backend == "python" and config.parameters["artifact"].string_value == "onnx"
    assert (tmp_path / "repo" / "digits" / "1" / "package" / "manifest.json").is_file()
    x = load_npz(EVAL)[0][:16].astype(np.float32) / 255
    with edgekit.load(digits_all_package, artifact="onnx") as local:
        expected = local.predict_tensor(x)
    with running_tritonserver(tmp_path / "repo", tmp_path / "triton.log") as address:
        client = httpclient.InferenceServerClient(address, concurrency=8)
        assert client.is_model_ready("digits")
        tensor = httpclient.InferInput("image", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        np.testing.assert_allclose(client.infer("digits", [tensor]).as_numpy("output_0"), expected, atol=1e-6)

        def single(i):
            tensor = httpclient.InferInput("image", [1, 8, 8, 1], "FP32")
            tensor.set_data_from_numpy(x[i : i + 1])
            return [tensor]

        pending = [client.async_infer("digits", single(i)) for i in range(16)]  # in flight together
        rows = np.concatenate([p.get_result().as_numpy("output_0") for p in pending])
        np.testing.assert_allclose(rows, expected, atol=1e-6)
        bad = httpclient.InferInput("image", [1, 8, 8, 1], "FP32")
        bad.set_data_from_numpy(np.full((1, 8, 8, 1), np.nan, np.float32))
        with pytest.raises(InferenceServerException, match="NaN"):
            client.infer("digits", [bad])
        still = client.infer("digits", single(3)).as_numpy("output_0")  # the server keeps serving
        np.testing.assert_allclose(still, expected[3:4], atol=1e-6)


def test_the_packages_latency_cards_travel_into_the_model_repository(heads_package, tmp_path, capsys):
    """A card stored in the package lands beside config.pbtxt (cards/, which Triton's loader skips:
    it reads numeric version folders), byte for byte; an altered card stops the export."""
    import shutil

    from tests.conftest import assert_user_error, edgekit_cli

    package = tmp_path / "heads.edgekit"
    shutil.copytree(heads_package, package)
    stored = edgekit_cli("card", package, "--eval", heads_package.parent.parent / "heads_eval.npz", "-o",
                         tmp_path / "cards", "--runs", "20", "--min-seconds", "0.1", "--no-launch", "--store",
                         "--device-name", "edge1", "--report", tmp_path / "run.json")
    assert stored.returncode == 0, stored.stderr[-3000:]
    code, _, err = run_cli(capsys, "export", "triton", package, "-o", tmp_path / "repo")
    assert code == 0, err
    entry, = Manifest.from_json((package / "manifest.json").read_bytes()).cards
    for key, path in (("sha256", entry["path"]), ("markdown_sha256", entry["markdown"])):
        copied = tmp_path / "repo" / "heads" / "cards" / path.split("/")[-1]
        assert sha256_file(copied) == entry[key]
    assert parse(tmp_path / "repo" / "heads" / "config.pbtxt").name == "heads"
    (package / entry["markdown"]).write_text("edited")
    assert_user_error(edgekit_cli("export", "triton", package, "-o", tmp_path / "again"), "does not match the manifest")
    assert not (tmp_path / "again" / "heads").exists()
