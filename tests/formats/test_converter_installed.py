"""A format whose converter is not installed: left out of `--format all` (and said), refused by
name when asked for, before anything loads. Checked in a child whose import system refuses
ExecuTorch, as on a machine with edgekit[package] alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from edgekit.formats import FORMATS, missing_converter
from edgekit.formats.base import Format
from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, assert_user_error

BLOCKER = '''
import importlib.abc, sys


class NoExecuTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "executorch" or name.startswith("executorch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoExecuTorch())
'''


def test_a_format_names_what_its_converter_lacks():
    fake = Format("x", "", lambda: None, (), "", "", build_requires=("edgekit_no_such_module",), build_extra="edgekit[x]")
    assert missing_converter(fake) == "its converter needs edgekit_no_such_module, not installed here"
    assert missing_converter(FORMATS["tflite"]) is None


def _without_executorch(tmp_path: Path, *formats: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(textwrap.dedent(BLOCKER))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    arguments = [a for f in formats for a in ("--format", f)]
    return subprocess.run([sys.executable, "-m", "edgekit.cli", "package", str(DIGITS_MODEL), *arguments, "-c",
                           str(CALIBRATION), "--eval", str(EVAL), "-o", str(tmp_path / "out"), "--no-also-float"],
                          capture_output=True, text=True, env=env, timeout=300)


def test_executorch_asked_for_without_its_converter_is_refused_before_loading(tmp_path):
    result = _without_executorch(tmp_path, "executorch")
    assert_user_error(result, "cannot build --format executorch here", "pip install 'edgekit[executorch]'")
    assert "Loading" not in result.stdout + result.stderr and not (tmp_path / "out").exists()


def test_format_all_leaves_out_what_this_machine_cannot_build_and_records_it(tmp_path):
    """The demo's first run: --format all on a machine without ExecuTorch ships the other formats,
    exit 0, one line naming the extra, and the manifest records what was left out and why."""
    result = _without_executorch(tmp_path, "all")
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in (result.stdout + result.stderr).splitlines() if "leaves out executorch" in line]
    assert len(said) == 1 and "pip install 'edgekit[executorch]'" in said[0], result.stdout[-3000:]
    manifest = json.loads((tmp_path / "out" / "digits.edgekit" / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"]} == {"tflite", "onnx", "coreml"} and manifest["failed"] == []
    (left,) = manifest["left_out"]
    assert left == {"format": "executorch", "why": "its converter needs executorch, not installed here",
                    "extra": "edgekit[executorch]"}
