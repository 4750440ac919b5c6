"""Converter children: native stderr explains failures, and --debug shows all of it."""

from __future__ import annotations

import os

import pytest

from edgekit import worker
from edgekit.errors import ConversionError
from tests.conftest import ROOT

MLIR_LINE = ('loc(fused["Concatenate:", "functional_1/detections_1/concat@__inference_serving_default_92"]): error: '
             "'tfl.concatenation' op quantization parameters violate the same scale constraint")


def fails_like_the_tflite_converter() -> None:
    """What TensorFlow's converter does: the reason on C++ stderr, an exception with no message."""
    os.write(2, b"W0000 00:00 noise from absl\n" + MLIR_LINE.encode() + b"\n")
    raise ConversionError("TFLite converter failed: ")


def fails_with_a_python_error() -> None:
    raise ValueError("the shape (3, 4) does not fit")


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_the_native_mlir_error_becomes_the_message_with_a_matching_fix():
    with pytest.raises(ConversionError) as info:
        worker.call(fails_like_the_tflite_converter, what="TFLite conversion")
    assert info.value.message == ("TFLite converter failed: functional_1/detections_1/concat: 'tfl.concatenation' "
                                  "op quantization parameters violate the same scale constraint")
    assert "--keep-float detections" in info.value.hint
    assert MLIR_LINE in info.value.child_log  # what --debug prints in full


def test_debug_prints_the_converter_log(capsys):
    from edgekit.clitools import guarded

    code = guarded(lambda: worker.call(fails_like_the_tflite_converter, what="TFLite conversion"), debug=True)
    err = capsys.readouterr().err
    assert code == 1 and "---- converter log ----" in err and MLIR_LINE in err


def test_python_errors_in_a_child_keep_their_type_and_text():
    with pytest.raises(ConversionError, match=r"ValueError: the shape \(3, 4\) does not fit"):
        worker.call(fails_with_a_python_error, what="a step")


def test_only_module_level_functions_can_be_sent():
    with pytest.raises(TypeError, match="module-level function"):
        worker.call(lambda: None, what="nothing")
