"""edgekit.load(...).predict(...) on the real digits package with the real LiteRT runtime."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from PIL import Image

import edgekit
from edgekit.errors import DataError, InputError, PackageError
from tests.conftest import EVAL, load_npz

pytestmark = pytest.mark.slow


def test_predict_on_raw_uint8_arrays_matches_the_validation(digits_package):
    x, y = load_npz(EVAL)
    with edgekit.load(digits_package) as model:
        assert model.labels == [str(i) for i in range(10)]
        assert model.artifact.target == "tflite"
        probabilities = model.predict(x)
    assert probabilities.shape == (360, 10) and probabilities.dtype == np.float32
    assert np.allclose(probabilities.sum(axis=1), 1.0, atol=0.02)
    assert np.mean(probabilities.argmax(axis=1) == y) >= 0.97


def test_image_files_pil_images_and_float_arrays_give_the_same_answer(digits_package, tmp_path):
    x, _ = load_npz(EVAL)
    path = tmp_path / "digit.png"
    Image.fromarray(x[0, ..., 0], mode="L").save(path)
    with edgekit.load(digits_package, artifact="tflite") as model:  # int8 input: every path lands on one grid
        from_file = model.predict(str(path))
        from_pil = model.predict(Image.open(path))
        from_uint8 = model.predict(x[0])
        from_float = model.predict_tensor(x[:1].astype(np.float32) / 255)
        batch = model.predict([str(path), x[1]])
    for result in (from_pil, from_uint8, from_float):
        assert np.array_equal(result, from_file)
    assert batch.shape == (2, 10) and np.array_equal(batch[0], from_file[0])


def test_raw_mode_returns_int8(digits_package):
    x, _ = load_npz(EVAL)
    with edgekit.load(digits_package, artifact="tflite") as model:
        raw = model.predict(x[:3], raw=True)
        floats = model.predict(x[:3])
        quantized_in = model.artifact.inputs[0]
        x_q = np.clip(np.round(x[:3] / 255 / quantized_in.scale) + quantized_in.zero_point, -128, 127).astype(np.int8)
        from_int8 = model.predict_tensor(x_q, raw=True)
    assert raw.dtype == np.int8
    params = model.artifact.outputs[0]
    assert np.allclose((raw.astype(np.float32) - params.zero_point) * params.scale, floats)
    assert np.array_equal(from_int8, raw)  # int8 input is fed as is


def test_archive_loads_from_the_cache(digits_package):
    archive = digits_package.with_suffix(".ekpkg")
    x, _ = load_npz(EVAL)
    with edgekit.load(archive) as first, edgekit.load(digits_package) as direct:
        assert np.array_equal(first.predict(x[:5]), direct.predict(x[:5]))
        root = first.root
    with edgekit.load(archive) as second:
        assert second.root == root  # unpacked once, keyed by the archive's sha256


def test_bad_inputs_are_refused(digits_package):
    with edgekit.load(digits_package) as model:
        with pytest.raises(DataError, match="the model expects"):  # (uint8 (N, H, W, C) pixels are resized)
            model.predict(np.zeros((2, 9, 9, 1), np.float32))
        with pytest.raises(DataError, match="the model expects"):  # two channels: not images
            model.predict(np.zeros((2, 9, 9, 2), np.uint8))
        with pytest.raises(DataError, match="NaN/Inf"):
            model.predict(np.full((1, 8, 8, 1), np.nan, np.float32))
        with pytest.raises(InputError, match="expected numbers"):
            model.predict(np.array(["x"]))
        with pytest.raises(InputError, match="no inputs"):
            model.predict([])


@pytest.fixture
def package_copy(digits_package, tmp_path):
    copy = tmp_path / "digits.edgekit"
    shutil.copytree(digits_package, copy)
    return copy


def test_modified_artifact_is_refused(package_copy):
    artifact = package_copy / "tflite" / "model.int8.tflite"
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF
    artifact.write_bytes(bytes(data))
    with pytest.raises(PackageError, match="does not match the manifest"):
        edgekit.load(package_copy, artifact="tflite")


def test_missing_artifact_and_broken_manifest_are_refused(package_copy, tmp_path):
    (package_copy / "tflite" / "model.int8.tflite").unlink()
    with pytest.raises(PackageError, match="is missing"):
        edgekit.load(package_copy, artifact="tflite")
    (package_copy / "manifest.json").write_text("{")
    with pytest.raises(PackageError, match="not valid JSON"):
        edgekit.load(package_copy)
    with pytest.raises(PackageError, match="does not exist"):
        edgekit.load(tmp_path / "nothing.edgekit")
    (tmp_path / "junk.ekpkg").write_bytes(b"junk")
    with pytest.raises(PackageError, match="not an edgekit package"):
        edgekit.load(tmp_path / "junk.ekpkg")
