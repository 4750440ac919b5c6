"""Held-out data far outside the calibration range is said before anything is built."""

from __future__ import annotations

import numpy as np

from edgekit.packaging.data import outside_calibration


def test_held_out_data_far_outside_the_calibration_range_is_named():
    rng = np.random.default_rng(0)
    calibration = rng.uniform(-0.05, 0.05, (100, 16)).astype(np.float32)  # 20x too narrow
    evaluation = rng.uniform(-1, 1, (50, 16)).astype(np.float32)
    (said,) = outside_calibration("audio", calibration, evaluation, "evaluation data", named=True)
    assert "input 'audio'" in said and "far outside the calibration data's" in said and "saturate" in said
    assert outside_calibration("audio", evaluation, evaluation[:10] * 0.9, "evaluation data", named=False) == []
    assert outside_calibration("ids", np.arange(10)[None], np.arange(50)[None], "evaluation data", False) == []


def test_a_spectrogram_gets_no_pixel_scale_hint_and_float_pixels_do():
    """A log-mel spectrogram (5e-9..10.5) was told "pass --scale 0.00392157" as if it were 0..255
    pixels; float arrays of whole numbers 0..255 (images saved as floats) still are."""
    from edgekit.manifest import Preprocessing
    from edgekit.packaging.data import data_guards

    rng = np.random.default_rng(0)
    mel = np.exp(rng.uniform(np.log(5e-9), np.log(10.5), (40, 64, 32))).astype(np.float32)
    assert not any("0.00392157" in w for w in data_guards(mel, mel, Preprocessing()))
    pixels = rng.integers(0, 256, (40, 8, 8, 1)).astype(np.float32)
    assert any("0.00392157" in w for w in data_guards(pixels, pixels, Preprocessing()))


def test_held_out_data_naming_their_array_otherwise_than_the_calibration_data_are_read(tmp_path):
    """An --eval .npz whose one array is neither ``x`` nor the input's name, beside calibration data
    keyed ``x``, was read through the calibration data's binding: an internal AttributeError."""
    from edgekit.packaging.data import prepare_data
    from edgekit.packaging.options import PackageOptions
    from edgekit.packaging.preflight import preflight
    from edgekit.progress import Progress
    from edgekit.sources.description import SourceDescription, TensorDescription

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calibration.npz", x=rng.normal(size=(64, 16)).astype(np.float32))
    np.savez(tmp_path / "eval.npz", frames=rng.normal(size=(40, 16)).astype(np.float32))
    (tmp_path / "m.onnx").write_bytes(b"")
    options = PackageOptions(model=str(tmp_path / "m.onnx"), calibration=str(tmp_path / "calibration.npz"),
                             eval=str(tmp_path / "eval.npz"), output_dir=str(tmp_path / "out"))
    described = SourceDescription(inputs=(TensorDescription("features", (-1, 16), "float32"),),
                                  outputs=(TensorDescription("score", (-1, 1), "float32"),))
    data = prepare_data(preflight(options, Progress()), options, described, Progress())
    assert data.evaluation["features"].shape == (40, 16) and data.calibration["features"].shape == (64, 16)


def test_calibration_data_far_wider_than_the_held_out_data_are_named():
    """Calibration data 10^30 times the held-out range were not flagged, and the search was blamed: now
    said before anything is built (a warning: percentile calibration may still repair an outlier)."""
    from edgekit.packaging.data import wider_calibration

    rng = np.random.default_rng(0)
    evaluation = rng.uniform(-1, 1, (50, 16)).astype(np.float32)
    calibration = evaluation.copy()
    calibration[3, 5] = 1e30
    (said,) = wider_calibration("audio", calibration, evaluation, "evaluation data", named=True)
    assert "input 'audio'" in said and "x the span of the evaluation data's" in said and "1 of the input's 256" in said
    assert wider_calibration("audio", rng.uniform(-1.2, 1.2, (50, 16)).astype(np.float32), evaluation,
                             "evaluation data", named=False) == []
    calibration[3, 5] = np.inf
    (infinite,) = wider_calibration("audio", calibration, evaluation, "evaluation data", named=False)
    assert "not finite" in infinite
