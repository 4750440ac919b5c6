"""The registry of model sources: every module below ``edgekit/sources/`` that defines ``SOURCE``.

``detect_source(path)`` makes the checks every source shares (the file exists and is
readable, it is not a format edgekit cannot read yet) and asks each source whether the model
is one of its kinds.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ModelSourceError
from ..registry import Registry, discover, gather
from .base import Source

_FIRST = ("tensorflow", "onnx")
_NOT_YET = (".tflite", ".mlpackage")  # converted models: edgekit's own outputs, not a source yet
_FACTORY = re.compile(r"^(?P<file>.+\.py):(?P<function>[A-Za-z_]\w*)$")  # file.py:factory (PyTorch)


SOURCES: Registry[Source] = gather(Registry("source"), discover(__name__, os.path.dirname(__file__), folders=False,
                                                             first=_FIRST, skip=("base",)),
                                   "SOURCE", Source, lambda source: source.name)


def detect_source(path: str | os.PathLike[str]) -> tuple[Source, str]:
    """The source that reads the model at ``path`` and the model's kind; a clear error otherwise."""
    model = Path(path)
    accepts = "; ".join(s.accepts for s in SOURCES.values())
    factory = _FACTORY.match(str(path))
    if factory and not Path(factory["file"]).is_file():
        raise ModelSourceError(f"model factory file {factory['file']} does not exist",
                               hint="pass path/to/file.py:factory, where factory() returns the nn.Module")
    if not model.exists() and not factory:
        raise ModelSourceError(f"model {model} does not exist", hint=f"pass a model: {accepts}")
    if model.suffix.lower() in _NOT_YET:
        raise ModelSourceError(
            f"converted {model.suffix.lower()} models ({model.name}) are not supported as a source yet",
            hint="export the model from its framework as a Keras .keras file, a TF SavedModel or ONNX",
        )
    if not factory and not model.is_dir() and not os.access(model, os.R_OK):
        raise ModelSourceError(f"model {model} is not readable", hint="check the file's permissions")
    for source in SOURCES.values():
        try:
            kind = source.detect(model)
        except OSError as exc:
            raise ModelSourceError(f"model {model} cannot be read ({exc.strerror})") from None
        if kind is not None:
            return source, kind
    raise ModelSourceError(
        f"{model} is not a model edgekit can read (expected {accepts})",
        hint="save the model with model.save('model.keras'), model.export(DIR), or export it to ONNX",
    )


__all__ = ["SOURCES", "Source", "detect_source"]
