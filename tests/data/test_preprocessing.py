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


def png_header_only(path, width: int, height: int) -> None:
    """A PNG that declares width x height but holds no pixel data: opening it reads only the header,
    like a decompression bomb that has not been decoded yet."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))


def test_a_20000_pixel_square_image_is_refused_before_decoding(tmp_path):
    from edgekit.data.preprocessing import decode_image

    png_header_only(tmp_path / "huge.png", 20000, 20000)
    with pytest.raises(DataError, match=r"20000x20000 \(400 megapixels\), more than the 50-megapixel limit") as info:
        decode_image(tmp_path / "huge.png", (8, 8), "L")
    assert "EDGEKIT_MAX_IMAGE_PIXELS" in info.value.hint


def test_pixel_limit_is_configurable(tmp_path, monkeypatch):
    from edgekit.data.preprocessing import decode_image

    Image.new("L", (100, 100)).save(tmp_path / "small.png")
    monkeypatch.setenv("EDGEKIT_MAX_IMAGE_PIXELS", "5000")
    with pytest.raises(DataError, match="100x100"):
        decode_image(tmp_path / "small.png", None, "L")
    monkeypatch.setenv("EDGEKIT_MAX_IMAGE_PIXELS", "10000")
    assert decode_image(tmp_path / "small.png", None, "L").shape == (100, 100, 1)


def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path):
    from edgekit.data.preprocessing import decode_image

    values = np.array([[0, 257 * 100], [65535, 257 * 7]], np.uint16)
    Image.fromarray(values).save(tmp_path / "deep.png")
    decoded = decode_image(tmp_path / "deep.png", None, "L")[..., 0]
    np.testing.assert_array_equal(decoded, [[0, 100], [255, 7]])
    rgb = decode_image(tmp_path / "deep.png", None, "RGB")
    assert rgb.shape == (2, 2, 3) and rgb[1, 0].tolist() == [255, 255, 255]


@pytest.mark.parametrize("name, write, expected", [
    ("objects.npy", lambda p: np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True),
     "not a readable array file"),
    ("empty.npy", lambda p: p.write_bytes(b""), "not a readable array file"),
    ("ragged.json", lambda p: p.write_text("[[1, 2, 3], [4]]"), "not a rectangular array"),
    ("truncated.json", lambda p: p.write_text("[[1, 2, 3], [4, 5"), "not valid JSON"),
    ("deep.json", lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
    ("words.json", lambda p: p.write_text('["a", "b"]'), "expected numbers"),
    ("nothing.json", lambda p: p.write_text("[]"), "is empty"),
])
def test_bad_array_files_are_input_errors(tmp_path, name, write, expected):
    from edgekit.errors import InputError

    path = tmp_path / name
    write(path)
    with pytest.raises(InputError, match=expected) as info:
        load_input(str(path), None, (8, 8, 1))
    assert name in info.value.message and info.value.hint


def test_nan_location_names_the_file_row_not_the_subset_index():
    x = np.zeros((4, 2), np.float32)
    x[3, 1] = np.nan
    with pytest.raises(DataError, match="first in row 150 of data.npy"):
        check_finite(x, "calibration data", names=["row 7 of data.npy", "row 9 of data.npy", "row 20 of data.npy",
                                                    "row 150 of data.npy"])
