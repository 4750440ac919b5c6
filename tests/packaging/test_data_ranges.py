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
