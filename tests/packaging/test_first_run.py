"""The Python result's verdicts read as they are: passed, refused, not decidable, built unverified,
not built (``--format all`` on a machine without a converter: tests/formats/test_converter_installed.py)."""

from __future__ import annotations

import numpy as np

from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL


def test_the_python_result_says_not_decidable_never_passed(tmp_path):
    import edgekit

    with np.load(str(EVAL)) as data:
        x, y = data["x"][:99], data["y"][:99]
    result = edgekit.package(str(DIGITS_MODEL), str(CALIBRATION), tmp_path, eval=(x, y), formats=["tflite"],
                             also_float=False)
    verdict = result.verdicts["tflite"]
    assert verdict.startswith("not decidable: 100 held-out samples would decide it"), verdict
    assert "passed" not in repr(result) and "not decidable" in repr(result)


def test_a_format_past_its_share_of_the_time_limit_is_ended_and_recorded_while_the_next_is_written(
        tmp_path, monkeypatch):
    import json

    import edgekit
    from edgekit.packaging import each_format

    shares = iter([0.0, None])  # the first format's share is spent before it starts; the second has no bound
    monkeypatch.setattr(each_format, "format_share", lambda *_: next(shares))
    result = edgekit.package(str(DIGITS_MODEL), str(CALIBRATION), tmp_path, eval=str(EVAL),
                             formats=["tflite", "onnx"], also_float=False, allow_partial=True)
    assert result.verdicts["tflite"].startswith("not built: tflite ran past its share"), result.verdicts
    assert result.verdicts["onnx"] == "passed"
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"]} == {"onnx"}  # its variants too
    assert [f["target"] for f in manifest["failed"]] == ["tflite"] and "--time-limit" in manifest["failed"][0]["hint"]
    assert not (result.path / "tflite").exists()
