"""A format whose runtime dies on its artifact (killed by SIGSEGV, as LiteRT once died running a
quantized attention graph): registered by ``test_runtime_crash.py`` only. Its builder ships the
float ONNX graph as is; its backend is ONNX Runtime's, except that running the artifact kills
the process that runs it. The packager must name that as this format's failure and go on."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.conversion import forms
from edgekit.formats import Accepts, Format
from edgekit.formats.building import Builder, BuildContext, BuildResult
from edgekit.formats.onnx.backend import OnnxRuntimeBackend
from edgekit.fsutil import sha256_file
from edgekit.manifest import Artifact


class CrashingBackend(OnnxRuntimeBackend):
    name = "crashing-runtime"

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        os.kill(os.getpid(), signal.SIGSEGV)
        raise AssertionError("unreachable")


class CrashingBuilder(Builder):
    name = "crashy"
    backend = "crashing-runtime"

    def build(self, context: BuildContext, on_progress: Any = None) -> BuildResult:
        target = Path(context.package_dir) / "crashy" / "model.onnx"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(context.model.path, target)
        return BuildResult(Artifact(format=self.name, path="crashy/model.onnx", sha256=sha256_file(target),
                                    bytes=target.stat().st_size, precision="float32"))


FORMAT = Format(name="crashy", description="a runtime that dies on its artifact (tests only)",
                builder=CrashingBuilder, backends=(CrashingBackend,), extra="edgekit[onnx]",
                serving_platform="onnxruntime_onnx", accepts=(Accepts(forms.ONNX_GRAPH),))
