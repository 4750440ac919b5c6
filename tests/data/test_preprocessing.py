import numpy as np
import pytest
from PIL import Image

from edgekit.data.preprocessing import check_finite, conform, infer_preprocessing, load_input, normalize
from edgekit.errors import DataError
from edgekit.manifest import Preprocessing


def test_uint8_data_without_rescaling_layer_is_scaled_to_unit_range():
    spec = infer_preprocessing([-1, 8, 8, 1], np.dtype(np.uint8), model_rescales=False, overrides={})
    assert spec.scale == pytest.approx(1 / 255) and spec.resize == [8, 8] and spec.color_order == "L"
    assert "uint8" in spec.inferred_from


def test_model_with_rescaling_layer_gets_raw_pixels_and_float_data_passes_unchanged():
    assert infer_preprocessing([-1, 32, 32, 3], np.dtype(np.uint8), True, {}).scale == 1.0
    spec = infer_preprocessing([-1, 32, 32, 3], np.dtype(np.float32), False, {})
    assert spec.scale == 1.0 and spec.color_order == "RGB"


def test_overrides_win_and_are_recorded():
    spec = infer_preprocessing(
        [-1, 224, 224, 3], np.dtype(np.uint8), False,
        {"scale": 1 / 255, "mean": [0.5], "std": [0.5], "color_order": "BGR", "resize": None},
    )
    assert spec.mean == [0.5] and spec.std == [0.5] and spec.color_order == "BGR"
    assert "set by options" in spec.inferred_from
    x = normalize(np.array([[0, 255]], np.uint8), spec)
    assert np.allclose(x, [[-1.0, 1.0]])


def test_conform_adds_channel_and_batch_axes_and_refuses_wrong_shapes():
    assert conform(np.zeros((5, 8, 8)), (8, 8, 1), "x").shape == (5, 8, 8, 1)
    assert conform(np.zeros((8, 8, 1)), (8, 8, 1), "x").shape == (1, 8, 8, 1)
    assert conform(np.zeros((5, 1, 8, 8, 1)), (8, 8, 1), "x").shape == (5, 8, 8, 1)
    with pytest.raises(DataError, match=r"has shape \(5, 7, 7, 1\); the model expects \(N, 8, 8, 1\)"):
        conform(np.zeros((5, 7, 7, 1)), (8, 8, 1), "calibration data")


def test_nan_and_inf_are_reported_with_counts():
    x = np.zeros((4, 3), np.float32)
    x[2, 1] = np.nan
    x[3, 0] = np.inf
    with pytest.raises(DataError, match=r"2 NaN/Inf values \(first in sample 2, 2 samples affected\)"):
        check_finite(x, "calibration data")


def test_images_are_decoded_resized_and_normalized_like_the_manifest_says(tmp_path):
    path = tmp_path / "img.png"
    Image.fromarray(np.full((16, 16), 255, np.uint8), mode="L").save(path)
    spec = Preprocessing(resize=[8, 8], scale=1 / 255, color_order="L")
    x = load_input(str(path), spec, (8, 8, 1))
    assert x.shape == (1, 8, 8, 1) and x.dtype == np.float32 and np.allclose(x, 1.0)
