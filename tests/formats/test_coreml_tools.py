"""coremltools is imported without probing scikit-learn and ExecuTorch (each CoreML child paid
their imports, ExecuTorch's edge-dialect YAML among them), and both stay importable after it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("coremltools")
pytestmark = pytest.mark.slow  # a child importing coremltools with TensorFlow and PyTorch


def test_coremltools_is_imported_without_its_sklearn_executorch_and_torchao_probes():
    code = """
        import importlib.util, sys
        from edgekit.formats.coreml.tools import coremltools
        ct = coremltools()
        from coremltools import _deps
        print(sorted(name for name in ("sklearn", "executorch", "torchao") if name in sys.modules))
        print(_deps._HAS_EXECUTORCH, _deps._HAS_SKLEARN, _deps._HAS_TORCH)
        for name in ("sklearn", "executorch", "torchao"):  # hidden from coremltools' probe only
            if importlib.util.find_spec(name) is not None:
                __import__(name)
        print("importable afterwards", coremltools() is ct)
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "[]" and lines[1] == "False False True" and lines[2] == "importable afterwards True"
