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
