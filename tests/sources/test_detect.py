"""Which source reads a model (``edgekit.sources.detect_source``): named, or a clear refusal."""

from __future__ import annotations

import pytest

from edgekit.errors import ModelSourceError
from edgekit.sources import SOURCES, detect_source
from tests.conftest import DIGITS_MODEL


def test_a_keras_file_is_read_by_the_tensorflow_source():
    source, kind = detect_source(DIGITS_MODEL)
    assert source is SOURCES["tensorflow"] and kind == "keras"


@pytest.mark.parametrize("name", ["model.tflite", "model.mlpackage"])
def test_a_converted_model_is_refused_by_its_suffix(tmp_path, name):
    (tmp_path / name).write_bytes(b"\0" * 16)
    with pytest.raises(ModelSourceError, match=rf"converted {name[5:]} models \({name}\) are not supported as a source"):
        detect_source(tmp_path / name)


def test_a_file_no_source_reads_names_what_each_accepts(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    with pytest.raises(ModelSourceError) as raised:
        detect_source(tmp_path / "weights.bin")
    assert "is not a model edgekit can read" in str(raised.value)
    assert all(source.accepts in str(raised.value) for source in SOURCES.values())
