"""CoreML backend (macOS only): ``coremltools.models.MLModel`` loaded once, ``predict`` per batch.

CoreML prediction exists only on macOS; elsewhere ``available()`` says no without importing
coremltools (2 s and 0.5 GB), so Linux devices never pay for it. The ML programs edgekit
writes have batch size 1: a batch runs sample by sample through the same loaded model.
"""

from __future__ import annotations

import platform
import sys
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, PackageError
from ..backend import Backend, TensorInfo


class CoreMLBackend(Backend):
    name = "coreml"
    libraries = ("coremltools",)
    suffixes = (".mlpackage", ".mlmodel")

    @classmethod
    def available(cls) -> str | None:
        if sys.platform != "darwin":
            return None
        try:
            import coremltools
        except ImportError:
            return None
        return f"coremltools {coremltools.__version__} (macOS {platform.mac_ver()[0]})"

    def __init__(self, path: str, threads: int | None = None, **_: object) -> None:
        if sys.platform != "darwin":
            raise BackendUnavailableError(
                "CoreML models run only on macOS/iOS",
                hint="use the package's tflite or onnx artifact on this device (--artifact tflite|onnx)",
            )
        try:
            import coremltools as ct
        except ImportError:
            raise BackendUnavailableError("coremltools is not installed", hint="pip install coremltools") from None
        try:
            self._model: Any = ct.models.MLModel(path, compute_units=ct.ComputeUnit.ALL)
        except Exception as exc:
            raise PackageError(f"CoreML cannot load {path}: {exc}") from None
        spec = self._model.get_spec()
        from .names import source_name

        self._feed_names = [i.name for i in spec.description.input]  # as CoreML names them
        self._inputs = [
            TensorInfo(source_name(i.name), tuple(int(d) for d in i.type.multiArrayType.shape), np.dtype(np.float32))
            for i in spec.description.input
        ]
        self._outputs = [
            TensorInfo(o.name, tuple(int(d) for d in o.type.multiArrayType.shape), np.dtype(np.float32))
            for o in spec.description.output
        ]

    @property
    def fixed_batch(self) -> int | None:
        return 1  # CoreML artifacts are converted with batch 1

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        per_sample = [self._model.predict({name: x.astype(np.float32) for name, x in zip(self._feed_names, feeds)})]
        return [
            np.concatenate([np.asarray(result[out.name], dtype=np.float32) for result in per_sample])
            for out in self._outputs
        ]

    def close(self) -> None:
        self._model = None
