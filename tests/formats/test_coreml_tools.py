"""coremltools is imported without probing scikit-learn and ExecuTorch (each CoreML child paid
their imports, ExecuTorch's edge-dialect YAML among them), and both stay importable after it; its
pass pipeline validates the program at its ends, not after each pass, and writes the same program."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("coremltools")
pytestmark = pytest.mark.slow  # a child importing coremltools with TensorFlow and PyTorch


PROBES_CHECK = """
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


PIPELINE_CHECK = """
    import re
    import torch
    from edgekit.formats.coreml.tools import coremltools
    ct = coremltools()
    from coremltools.converters.mil.mil import Program
    from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipelineManager as manager
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(144, 5)).eval()
    traced = torch.jit.trace(net, torch.zeros(1, 3, 8, 8))
    calls = []
    validate = Program.validate
    def counted(self, *args, **kwargs):
        calls.append(1)
        return validate(self, *args, **kwargs)
    Program.validate = counted
    def program():
        calls.clear()
        converted = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=(1, 3, 8, 8))], convert_to="milinternal")
        return re.sub(r"\\bblock\\d+\\(", "block(", str(converted)), len(calls)  # blocks: a global counter
    ours, our_checks = program()
    manager.apply_pipeline = manager.coremltools_apply_pipeline
    theirs, their_checks = program()
    print(ours == theirs, our_checks, their_checks)
"""


@pytest.fixture(scope="module")
def checked() -> list[str]:
    """Both checks in one fresh child (coremltools' import is most of its time): the probes first,
    before anything else is imported, then the pass pipeline; the lines each printed."""
    code = textwrap.dedent(PROBES_CHECK) + textwrap.dedent(PIPELINE_CHECK)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_coremltools_is_imported_without_its_sklearn_executorch_and_torchao_probes(checked):
    assert checked[0] == "[]" and checked[1] == "False False True" and checked[2] == "importable afterwards True"


def test_the_pass_pipeline_validates_at_its_ends_and_writes_the_same_program(checked):
    """coremltools 9 validated the program after each of its ~100 passes (and formatted it for a debug
    log that was off): a third of a conversion's time. The same passes now write the same program."""
    same, ours, theirs = checked[-1].split()
    assert same == "True", checked
    assert int(ours) <= 20 < 100 <= int(theirs), checked
