"""`edgekit package`: every cheap check runs before TensorFlow starts.

Each case passes a decoy model (a valid zip named .keras that is not a model): had the check not
run first, the error would be about the model. Each ends in one `error:`/`fix:` pair, exit 1.
"""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from tests.conftest import CALIBRATION, assert_user_error, edgekit_cli, load_npz, write_digit_images


@pytest.fixture
def decoy(tmp_path):
    path = tmp_path / "decoy.keras"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("notes.txt", "not a model")
    return path


@pytest.fixture
def image_folder(tmp_path):
    x, y = load_npz(CALIBRATION)
    write_digit_images(tmp_path / "images", x[:40], y[:40])
    return tmp_path / "images"


def package(model, *args):
    return edgekit_cli("package", model, *args)


def test_decoy_really_fails_at_model_load(decoy, tmp_path):
    result = package(decoy, "-c", CALIBRATION, "-o", tmp_path / "out")
    assert result.returncode == 1 and "model" in result.stderr.lower()


def test_corrupt_image_in_calibration_folder(decoy, image_folder, tmp_path):
    broken = sorted(image_folder.rglob("*.png"))[3]
    broken.write_bytes(broken.read_bytes()[:40])  # truncated
    result = package(decoy, "-c", image_folder, "--samples", "1000", "-o", tmp_path / "out")
    assert_user_error(result, f"cannot read image {broken}", "remove or replace")


def test_std_zero(decoy, tmp_path):
    assert_user_error(package(decoy, "-c", CALIBRATION, "--std", "0", "-o", tmp_path / "out"),
                      "--std 0.0 contains 0", "standard deviation of each channel")


def test_mean_and_std_counts_disagree(decoy, tmp_path):
    assert_user_error(package(decoy, "-c", CALIBRATION, "--mean", "0.1,0.2", "--std", "1,2,3", "-o", tmp_path / "o"),
                      "--mean has 2 values but --std has 3")


def test_labels_empty_directory_or_wrong_count(decoy, image_folder, tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    assert_user_error(package(decoy, "-c", CALIBRATION, "--labels", tmp_path / "empty.txt", "-o", tmp_path / "o"),
                      "labels file", "is empty")
    (tmp_path / "labels_dir").mkdir()
    assert_user_error(package(decoy, "-c", CALIBRATION, "--labels", tmp_path / "labels_dir", "-o", tmp_path / "o"),
                      "is a directory")
    (tmp_path / "three.txt").write_text("a\nb\nc\n")
    assert_user_error(package(decoy, "-c", image_folder, "--labels", tmp_path / "three.txt", "-o", tmp_path / "o"),
                      "--labels has 3 labels but the data has 10 class folders")


def test_missing_signing_key(decoy, tmp_path):
    assert_user_error(package(decoy, "-c", CALIBRATION, "--sign", tmp_path / "nokey", "-o", tmp_path / "o"),
                      "signing key", "does not exist", "edgekit keys generate")


def test_read_only_output_directory(decoy, readonly_dir):
    assert_user_error(package(decoy, "-c", CALIBRATION, "-o", readonly_dir / "dist"),
                      "cannot write output directory", "read-only")


def test_zero_byte_and_object_calibration_arrays(decoy, tmp_path):
    (tmp_path / "empty.npy").write_bytes(b"")
    assert_user_error(package(decoy, "-c", tmp_path / "empty.npy", "-o", tmp_path / "o"), "is empty (0 bytes)")
    np.save(tmp_path / "objects.npy", np.array([None, 1], dtype=object), allow_pickle=True)
    assert_user_error(package(decoy, "-c", tmp_path / "objects.npy", "-o", tmp_path / "o"),
                      "is not a readable .npy array")
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 nothing")
    assert_user_error(package(decoy, "-c", tmp_path / "bad.npz", "-o", tmp_path / "o"), "not a readable .npz")


def test_eval_data_that_are_the_calibration_data_are_refused(decoy, tmp_path):
    """--eval identical to --calibration judged INT8 on the samples it was calibrated on, unsaid."""
    copy = tmp_path / "copy.npz"
    copy.write_bytes(CALIBRATION.read_bytes())
    for given in (CALIBRATION, copy):
        result = package(decoy, "-c", CALIBRATION, "--eval", given, "-o", tmp_path / "out")
        assert_user_error(result, "holds the same data as the calibration data", "leave out --eval")
