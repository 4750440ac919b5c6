"""Converter children: native stderr explains failures, and --debug shows all of it."""

from __future__ import annotations

import os

import pytest

from edgekit.conversion import worker
from edgekit.errors import OTHER_ROUTES, ConversionError
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
    from edgekit.cli.tools import guarded

    code = guarded(lambda: worker.call(fails_like_the_tflite_converter, what="TFLite conversion"), debug=True)
    err = capsys.readouterr().err
    assert code == 1 and "---- converter log ----" in err and MLIR_LINE in err


def test_python_errors_in_a_child_keep_their_type_and_text():
    with pytest.raises(ConversionError, match=r"ValueError: the shape \(3, 4\) does not fit"):
        worker.call(fails_with_a_python_error, what="a step")


def fails_inside_a_library() -> None:
    import torch

    torch.nn.Module().register_buffer("a.b", None)  # torch raises KeyError('buffer name can\'t contain ".")'


def test_a_library_error_in_a_child_names_the_library_and_a_fix():
    """A converter library's bare exception (litert-torch once surfaced `KeyError: "attribute
    'const_66' already exists"` as the whole reason) says which library raised it, and the fix
    names the other routes (the packager fills them in) and --debug."""
    pytest.importorskip("torch")
    with pytest.raises(ConversionError) as info:
        worker.call(fails_inside_a_library, what="a step")
    assert info.value.message.startswith("torch raised KeyError:")
    assert OTHER_ROUTES in info.value.hint and "--debug" in info.value.hint


def test_only_module_level_functions_can_be_sent():
    with pytest.raises(TypeError, match="module-level function"):
        worker.call(lambda: None, what="nothing")


def answers_then_hangs() -> str:
    """A converter that returns but leaves a non-daemon thread running (litert-torch once did)."""
    import threading
    import time

    threading.Thread(target=lambda: time.sleep(3600), daemon=False).start()
    return "done"


def writes_temp_files() -> str:
    """Caches a converter drops in the temp folder (torch's torchinductor_<user>/, a .ses file)."""
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.gettempdir())
    (folder / "torchinductor_someone").mkdir()
    (folder / ".ses").write_text("session")
    return str(folder)


def runs_out_of_threads() -> None:
    raise RuntimeError("can't start new thread")


def blocks_forever() -> None:
    import time

    time.sleep(3600)


def test_a_child_that_answered_but_does_not_exit_is_ended(monkeypatch):
    import time

    monkeypatch.setattr(worker, "EXIT_GRACE_S", 1.0)
    started = time.monotonic()
    assert worker.call(answers_then_hangs, what="a converter") == "done"
    assert time.monotonic() - started < 60


def test_a_child_that_blocks_is_ended_at_its_timeout():
    with pytest.raises(ConversionError, match="did not finish within 2 s"):
        worker.call(blocks_forever, what="loading the model", timeout=2)


def test_children_keep_their_temp_files_in_edgekits_own_temp_dir():
    import tempfile
    from pathlib import Path

    folder = Path(worker.call(writes_temp_files, what="a converter"))
    assert folder != Path(tempfile.gettempdir()) and not folder.exists()
    assert worker.TEMP_PREFIX in str(folder)


def test_an_exhausted_machine_in_a_child_is_named():
    from edgekit.errors import ResourceError

    with pytest.raises(ResourceError, match="out of threads"):
        worker.call(runs_out_of_threads, what="a converter")
