"""coremltools, imported without the integrations edgekit never asks it for.

coremltools probes its optional libraries when it is imported (``coremltools._deps``):
scikit-learn for its sklearn converters, ExecuTorch for its EXIR frontend (which then imports
``executorch.exir`` and parses its edge-dialect YAML), torchao for the int4 weight-packed ops of
torchao-quantized PyTorch models (edgekit converts float models to CoreML: a quantized source's
learned ranges go to TFLite and ONNX only). ``edgekit[executorch]`` installs all three, and the
probe cost every process that imports coremltools (each CoreML conversion and validation child)
about 8.5 s. They are hidden from that probe only: they stay importable afterwards, and
coremltools' TensorFlow and PyTorch frontends, which edgekit uses, are probed as before."""

from __future__ import annotations

import sys
from types import ModuleType

NEVER_USED = ("sklearn", "executorch", "torchao")  # sklearn converters, EXIR frontend, int4 packed weights


def coremltools() -> ModuleType:
    """The ``coremltools`` module (imported once per process)."""
    if "coremltools" in sys.modules:
        return sys.modules["coremltools"]
    hidden = [name for name in NEVER_USED if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        import coremltools as ct
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return ct
