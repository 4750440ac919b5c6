"""The first run on a machine that installed only some converters, and the Python result's verdicts:
``--format all`` builds what this machine can and names the rest; every verdict reads as it is."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, ROOT

# the demo's install has no ExecuTorch: its import system finds no module of that name
WITHOUT_EXECUTORCH = """
import sys
class Uninstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "executorch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Uninstalled())
from edgekit.cli.main import main
sys.exit(main())
"""


def edgekit_without_executorch(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXECUTORCH, *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=900)


@pytest.mark.slow
def test_format_all_leaves_out_what_this_machine_cannot_build_and_records_it(tmp_path):
    result = edgekit_without_executorch("package", DIGITS_MODEL, "--format", "all", "--no-also-float",
                                        "--preprocessing", "0..1", "-c", CALIBRATION, "--eval", EVAL, "-o", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in (result.stdout + result.stderr).splitlines() if "leaves out executorch" in line]
    assert len(said) == 1 and "pip install 'edgekit[executorch]'" in said[0], result.stdout[-3000:]
    manifest = json.loads((tmp_path / "digits.edgekit" / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"]} == {"tflite", "onnx", "coreml"}
    (left,) = manifest["left_out"]
    assert left["format"] == "executorch" and "executorch" in left["why"] and left["extra"] == "edgekit[executorch]"
    assert manifest["failed"] == []


def test_a_format_named_that_this_machine_cannot_build_stays_an_error(tmp_path):
    result = edgekit_without_executorch("package", DIGITS_MODEL, "--format", "executorch", "-c", CALIBRATION,
                                        "-o", tmp_path)
    assert result.returncode == 1 and "cannot build --format executorch here" in result.stderr
    assert "pip install 'edgekit[executorch]'" in result.stderr and "Traceback" not in result.stderr


def test_the_python_result_says_not_decidable_never_passed(tmp_path):
    import edgekit

    with np.load(str(EVAL)) as data:
        x, y = data["x"][:99], data["y"][:99]
    result = edgekit.package(str(DIGITS_MODEL), str(CALIBRATION), tmp_path, eval=(x, y), formats=["tflite"],
                             also_float=False)
    verdict = result.verdicts["tflite"]
    assert verdict.startswith("not decidable: 100 held-out samples would decide it"), verdict
    assert "passed" not in repr(result) and "not decidable" in repr(result)
