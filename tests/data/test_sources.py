import numpy as np
import pytest

from edgekit.data.sources import open_data
from edgekit.errors import DataError
from tests.conftest import CALIBRATION, load_npz, write_digit_images


def test_npz_with_labels_and_seeded_selection():
    source = open_data(str(CALIBRATION))
    assert source.kind == "arrays" and source.count == 359 and source.has_targets
    assert source.labels == [str(i) for i in range(10)]
    first = source.select(50, seed=3)
    assert np.array_equal(first, source.select(50, seed=3))
    assert not np.array_equal(first, source.select(50, seed=4))
    held = source.select(20, seed=1)
    rest = source.select(None, seed=0, exclude=held)
    assert not set(held) & set(rest) and len(rest) == 339


def test_image_folder_gives_labels_from_class_folders(tmp_path):
    x, y = load_npz(CALIBRATION)
    write_digit_images(tmp_path, x[:30], y[:30])
    source = open_data(str(tmp_path))
    assert source.kind == "images" and source.count == 30
    batch = source.load(np.arange(30), (8, 8), "L")
    assert batch.x.shape == (30, 8, 8, 1) and batch.x.dtype == np.uint8
    original = [int(path.stem) for path in source._files]  # files are named by their index in x
    assert [source.labels[i] for i in batch.y] == [str(y[i]) for i in original]
    assert np.array_equal(batch.x, x[original])  # PNG round trip is lossless


def test_callable_source(tmp_path):
    (tmp_path / "gen.py").write_text(
        "import numpy as np\n"
        "def samples():\n"
        "    for i in range(12):\n"
        "        yield np.full((8, 8, 1), i, np.float32)\n"
    )
    source = open_data(f"{tmp_path / 'gen.py'}:samples")
    assert source.count == 12 and source.sample_shape == (8, 8, 1)


def test_empty_folder_is_refused(tmp_path):
    with pytest.raises(DataError, match="contains no images"):
        open_data(str(tmp_path))


def test_unreadable_image_names_the_file(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    bad = tmp_path / "a" / "broken.png"
    bad.write_bytes(b"not a png")
    (tmp_path / "b" / "ok.png").write_bytes(b"")
    source = open_data(str(tmp_path))
    with pytest.raises(DataError, match="broken.png"):
        source.load(np.arange(2), (8, 8), "L")


@pytest.mark.parametrize(
    "array, message",
    [
        (np.array(["a", "b"]), "expected numbers"),
        (np.zeros((3,), np.float32), "expected a batch"),
        (np.zeros((0, 8, 8, 1), np.float32), "empty"),
        (np.zeros((2, 2), np.complex64), "expected numbers"),
    ],
)
def test_bad_arrays_are_refused(tmp_path, array, message):
    path = tmp_path / "data.npy"
    np.save(path, array)
    with pytest.raises(DataError, match=message):
        open_data(str(path))


def test_npz_without_x_and_mismatched_y(tmp_path):
    np.savez(tmp_path / "no_x.npz", images=np.zeros((4, 8, 8, 1)))  # one array per input name: accepted
    assert open_data(str(tmp_path / "no_x.npz")).names == ["images"]
    np.savez(tmp_path / "only_y.npz", y=np.zeros(4, np.int64))
    with pytest.raises(DataError, match="has no input arrays"):
        open_data(str(tmp_path / "only_y.npz"))
    np.savez(tmp_path / "uneven.npz", a=np.zeros((4, 2)), b=np.zeros((3, 2)))
    with pytest.raises(DataError, match="different numbers of samples"):
        open_data(str(tmp_path / "uneven.npz"))
    np.savez(tmp_path / "bad_y.npz", x=np.zeros((4, 8, 8, 1)), y=np.zeros(3, np.int64))
    with pytest.raises(DataError, match="y has shape"):
        open_data(str(tmp_path / "bad_y.npz"))


def test_missing_and_unsupported_sources(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        open_data(str(tmp_path / "nope.npz"))
    (tmp_path / "data.csv").write_text("1,2\n")
    with pytest.raises(DataError, match="unsupported file type"):
        open_data(str(tmp_path / "data.csv"))
    with pytest.raises(DataError, match="cannot import"):
        open_data("no_such_module_xyz:fn")


def test_an_input_named_x_beside_other_inputs_is_never_dropped(tmp_path):
    """`x` is the single-array convention; with other arrays beside it, it is one input among
    them (an .npz with `x` and `sample_rate` once lost `sample_rate` silently)."""
    np.savez(tmp_path / "two.npz", x=np.zeros((6, 16), np.float32), sample_rate=np.full((6, 1), 16000.0, np.float32),
             y=np.arange(6))
    source = open_data(str(tmp_path / "two.npz"), "calibration")
    assert sorted(source.names) == ["sample_rate", "x"] and source.has_targets
    single = tmp_path / "one.npz"
    np.savez(single, x=np.zeros((6, 16), np.float32), y=np.arange(6))
    assert open_data(str(single), "calibration").names == []  # the x/y convention: one unnamed input


def test_arrays_batched_on_another_axis_are_moved_batch_first_or_refused_naming_the_axes():
    import numpy as np

    from edgekit.data.sources import open_named
    from edgekit.errors import DataError

    frames, state = np.zeros((120, 16), np.float32), np.zeros((2, 120, 8), np.float32)
    source = open_named({"x": frames, "state": state}, None, None, "data.npz", "calibration")
    assert source.count == 120 and source.named["state"].shape == (120, 2, 8)
    assert "array 'state' (2, 120, 8) holds its 120 samples on axis 1" in source.notes[0]
    with pytest.raises(DataError, match=r"no single axis of 'state' \(2, 7, 8\) holds 120 samples"):
        open_named({"x": frames, "state": np.zeros((2, 7, 8), np.float32)}, None, None, "data.npz", "calibration")


def test_an_object_array_is_refused_without_numpys_allow_pickle_advice(tmp_path):
    import numpy as np

    from edgekit.data.sources import open_data
    from edgekit.errors import DataError

    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(DataError) as caught:
        open_data(str(tmp_path / "objects.npy"))
    assert "holds Python objects" in caught.value.message and "allow_pickle" not in caught.value.message
