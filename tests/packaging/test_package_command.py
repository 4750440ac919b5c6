"""`edgekit package` end to end: bad inputs (one clear error each, nothing written) and policies."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, load_npz, run_cli, write_digit_images


def package(capsys, out, *extra, model=DIGITS_MODEL, calibration=CALIBRATION):
    return run_cli(capsys, "package", model, "--calibration", calibration, "-o", out, *extra)


def assert_clean_failure(code, err, out_dir, *fragments):
    assert code != 0
    lines = err.splitlines()
    assert all(line.startswith(("warning: ", "error: ", "  fix: ")) for line in lines if line.strip()), err
    assert sum(line.startswith("error: ") for line in lines) == 1, err
    for fragment in fragments:
        assert fragment in err, err
    assert "fix: " in err
    assert "Traceback" not in err
    leftovers = list(out_dir.iterdir()) if out_dir.exists() else []
    assert leftovers == [], f"half-written output left behind: {leftovers}"


# --- fail before TensorFlow starts ---------------------------------------------------------


def test_missing_model(tmp_path, capsys):
    code, _, err = package(capsys, tmp_path / "out", model=tmp_path / "nope.keras")
    assert_clean_failure(code, err, tmp_path / "out", "does not exist")


def test_not_a_model(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    code, _, err = package(capsys, tmp_path / "out", model=text)
    assert_clean_failure(code, err, tmp_path / "out", "is not a model edgekit can read")
    fake = tmp_path / "fake.keras"
    fake.write_text("not a zip")
    code, _, err = package(capsys, tmp_path / "out", model=fake)
    assert_clean_failure(code, err, tmp_path / "out", "is not a Keras model")
    folder = tmp_path / "folder"
    folder.mkdir()
    code, _, err = package(capsys, tmp_path / "out", model=folder)
    assert_clean_failure(code, err, tmp_path / "out", "not a SavedModel")


def test_empty_calibration_folder(tmp_path, capsys):
    (tmp_path / "images").mkdir()
    code, _, err = package(capsys, tmp_path / "out", calibration=tmp_path / "images")
    assert_clean_failure(code, err, tmp_path / "out", "contains no images")


def test_calibration_with_wrong_dtype(tmp_path, capsys):
    np.save(tmp_path / "strings.npy", np.array([["a"] * 64] * 10))
    code, _, err = package(capsys, tmp_path / "out", calibration=tmp_path / "strings.npy")
    assert_clean_failure(code, err, tmp_path / "out", "dtype <U1", "expected numbers")


def test_zero_samples_refused(tmp_path, capsys):
    np.save(tmp_path / "empty.npy", np.zeros((0, 8, 8, 1), np.float32))
    code, _, err = package(capsys, tmp_path / "out", calibration=tmp_path / "empty.npy")
    assert_clean_failure(code, err, tmp_path / "out", "is empty (0 samples)")
    code, _, err = package(capsys, tmp_path / "out", "--samples", "0")
    assert_clean_failure(code, err, tmp_path / "out", "--samples: must be at least 1")


def test_existing_package_needs_force(tmp_path, capsys):
    (tmp_path / "digits.edgekit").mkdir()
    (tmp_path / "digits.edgekit" / "keep.txt").write_text("user data")
    code, _, err = package(capsys, tmp_path)
    assert code == 1 and "digits.edgekit already exists" in err and "--force" in err
    assert (tmp_path / "digits.edgekit" / "keep.txt").exists()


def test_mismatched_calibration_and_eval(tmp_path, capsys):
    x, y = load_npz(EVAL)
    np.savez(tmp_path / "float_eval.npz", x=x.astype(np.float32) / 255, y=y)
    code, _, err = package(capsys, tmp_path / "out", "--eval", tmp_path / "float_eval.npz")
    assert_clean_failure(code, err, tmp_path / "out", "calibration data is uint8 but evaluation data is float32")


def test_bad_cli_usage_exits_2_without_traceback(tmp_path, capsys):
    code, _, err = run_cli(capsys, "package", DIGITS_MODEL, "-o", tmp_path)
    assert code == 2 and "--calibration" in err and "Traceback" not in err


# --- fail after the model is inspected (one TensorFlow child each) ---------------------------


@pytest.mark.slow
def test_calibration_with_wrong_shape(tmp_path, capsys):
    np.save(tmp_path / "small.npy", np.zeros((50, 7, 7, 1), np.float32))
    code, _, err = package(capsys, tmp_path / "out", calibration=tmp_path / "small.npy")
    # the half taken for calibration is 25 samples: the file's own 50 are named beside the shape
    assert_clean_failure(code, err, tmp_path / "out", "small.npy (25 of its 50 samples) has shape (25, 7, 7, 1); "
                                                      "the model expects (N, 8, 8, 1)")


@pytest.mark.slow
def test_nan_and_inf_in_calibration(tmp_path, capsys):
    x = np.random.default_rng(0).random((120, 8, 8, 1)).astype(np.float32)
    x[7, 0, 0, 0] = np.nan
    x[9, 1, 1, 0] = np.inf
    np.save(tmp_path / "nan.npy", x)
    code, _, err = package(capsys, tmp_path / "out", "--samples", "120", calibration=tmp_path / "nan.npy")
    assert_clean_failure(code, err, tmp_path / "out", "NaN/Inf values")


@pytest.mark.slow
def test_unreadable_image_in_calibration_folder(tmp_path, capsys):
    x, y = load_npz(CALIBRATION)
    write_digit_images(tmp_path / "images", x[:20], y[:20])
    (tmp_path / "images" / "3" / "corrupt.png").write_bytes(b"\x89PNG broken")
    code, _, err = package(capsys, tmp_path / "out", "--samples", "1000", calibration=tmp_path / "images")
    assert_clean_failure(code, err, tmp_path / "out", "cannot read image", "corrupt.png")


# --- full packaging runs ---------------------------------------------------------------------


@pytest.mark.slow
def test_image_folders_with_force_and_archive(tmp_path, capsys):
    x, y = load_npz(CALIBRATION)
    write_digit_images(tmp_path / "calib", x, y)
    ex, ey = load_npz(EVAL)
    write_digit_images(tmp_path / "eval", ex, ey)
    out = tmp_path / "out"
    out.mkdir()
    (out / "digits.edgekit").mkdir()  # an older package of the same name
    code, stdout, err = package(capsys, out, "--eval", tmp_path / "eval", "--force", "--archive",
                                calibration=tmp_path / "calib")
    assert code == 0, err
    assert "float acc" in stdout and "tflite" in stdout
    manifest = json.loads((out / "digits.edgekit" / "manifest.json").read_text())
    assert manifest["outputs"][0]["labels"] == [str(i) for i in range(10)]
    metrics = manifest["validation"]["artifacts"]["tflite"]
    assert metrics["accuracy"] >= manifest["validation"]["float"]["accuracy"] - 0.01
    assert sorted(p.name for p in out.iterdir()) == ["digits.edgekit", "digits.ekpkg"]
    with zipfile.ZipFile(out / "digits.ekpkg") as archive:
        assert {"manifest.json", "tflite/model.int8.tflite", "labels.txt"} <= set(archive.namelist())


@pytest.mark.slow
def test_few_bad_samples_warn_then_accuracy_drop_fails_unless_allowed(tmp_path, capsys):
    blank = np.zeros((5, 8, 8, 1), np.uint8)  # calibration ranges from blank images ruin INT8
    np.savez(tmp_path / "blank.npz", x=blank)
    out = tmp_path / "out"
    code, _, err = package(capsys, out, "--eval", EVAL, calibration=tmp_path / "blank.npz")
    assert "warning: calibrating on 5 samples" in err
    assert_clean_failure(code, err, out,
                         "INT8 validation failed", "accuracy_drop_pp",
                         "needs accuracy drop <= 1 pp (--max-accuracy-drop)", "no package was written")

    code, _, err = package(capsys, out, "--eval", EVAL, "--allow-accuracy-drop", calibration=tmp_path / "blank.npz")
    assert code == 0, err
    manifest = json.loads((out / "digits.edgekit" / "manifest.json").read_text())
    assert manifest["validation"]["passed"] is False
    assert manifest["validation"]["artifacts"]["tflite"]["accuracy_drop_pp"] > 1.0


@pytest.mark.slow
def test_data_guards_warn_with_numbers_and_are_recorded(tmp_path, capsys):
    x, y = load_npz(CALIBRATION)
    keep = y < 8  # classes 8 and 9 missing
    raw = np.repeat(x[keep][:1].astype(np.float32), 150, axis=0)  # one sample, float 0..255
    np.savez(tmp_path / "bad.npz", x=raw, y=y[keep][:1].repeat(150))
    ex, ey = load_npz(EVAL)
    np.savez(tmp_path / "eval.npz", x=ex.astype(np.float32), y=ey)
    code, _, err = package(capsys, tmp_path / "out", "--allow-accuracy-drop", "--eval", tmp_path / "eval.npz",
                           calibration=tmp_path / "bad.npz")
    assert code == 0, err
    assert "calibration values range 0..255 but the preprocessing passes floats unchanged" in err
    assert "all 150 calibration samples are the same sample" in err
    assert "9 of 10 classes have no calibration sample" in err
    manifest = json.loads((tmp_path / "out" / "digits.edgekit" / "manifest.json").read_text())
    assert len(manifest["calibration"]["warnings"]) == 3
