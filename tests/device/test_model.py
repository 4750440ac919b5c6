"""``edgekit.device.model``: what the runtime says about inputs far outside their calibrated range."""

from __future__ import annotations

import numpy as np

from edgekit.manifest import Preprocessing
from edgekit.device.model import _range_advice


def test_the_pixel_advice_is_given_for_pixel_values_only():
    """A log-mel spectrogram (fractional values up to 10.5) was told it looked like raw 0..255 pixels."""
    rng = np.random.default_rng(0)
    mel = np.exp(rng.uniform(np.log(5e-9), np.log(10.5), (2, 64, 32))).astype(np.float32)
    assert "pixels" not in _range_advice(None, mel, float(mel.min()), float(mel.max()), 1.0)
    features = Preprocessing(inferred_from="float data passed to the model unchanged")
    said = _range_advice(features, mel, float(mel.min()), float(mel.max()), 1.0)
    assert "images" not in said and "preprocessed as the calibration data was" in said
    pixels = rng.integers(0, 256, (2, 8, 8, 1)).astype(np.float32)
    assert "Raw 0..255 pixels?" in _range_advice(None, pixels, 0.0, 255.0, 1.0)
    image = Preprocessing(resize=[8, 8], scale=1 / 255)
    assert "pass images or raw uint8 arrays" in _range_advice(image, pixels, 0.0, 255.0, 1.0)
