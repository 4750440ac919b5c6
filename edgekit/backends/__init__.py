"""Device-side runtimes, registered by name (``--backend NAME``)."""

from __future__ import annotations

from ..errors import BackendUnavailableError
from .base import Backend, TensorInfo
from .coreml import CoreMLBackend
from .litert import LiteRTBackend
from .onnxruntime import OnnxRuntimeBackend

BACKENDS: dict[str, type[Backend]] = {}

# Which backend runs each build-side target's artifact, in order of preference.
TARGET_BACKENDS: dict[str, tuple[str, ...]] = {"tflite": ("litert",), "onnx": ("onnxruntime",), "coreml": ("coreml",)}


def register(backend: type[Backend]) -> None:
    if backend.name in BACKENDS:
        raise ValueError(f"backend {backend.name!r} is registered twice")
    BACKENDS[backend.name] = backend


def get_backend(name: str) -> type[Backend]:
    try:
        return BACKENDS[name]
    except KeyError:
        raise BackendUnavailableError(
            f"unknown backend {name!r}", hint="choose one of: " + ", ".join(sorted(BACKENDS))
        ) from None


register(LiteRTBackend)
register(OnnxRuntimeBackend)
register(CoreMLBackend)

__all__ = ["BACKENDS", "TARGET_BACKENDS", "Backend", "TensorInfo", "get_backend", "register"]
