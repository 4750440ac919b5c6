"""``edgekit.load(package).predict(x)``: the device-side entry point.

Device path: imports numpy, Pillow and one runtime library, never TensorFlow. The model is
loaded once (artifact verified, interpreter built, tensors allocated); ``predict`` applies the
manifest's preprocessing and returns float outputs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .backends import BACKENDS, TARGET_BACKENDS, Backend, get_backend
from .data.preprocessing import check_finite, conform, load_input
from .errors import BackendUnavailableError, InputError
from .manifest import Artifact, Manifest
from .package_io import open_package, verified_artifact_path


class Model:
    """A loaded package artifact, ready to predict."""

    def __init__(self, root: Path, manifest: Manifest, artifact: Artifact, backend: Backend) -> None:
        self.root = root
        self.manifest = manifest
        self.artifact = artifact
        self.backend = backend
        spec = manifest.inputs[0]
        self._sample_shape = tuple(None if d == -1 else d for d in spec.shape[1:])
        self._preprocessing = spec.preprocessing

    @property
    def labels(self) -> list[str] | None:
        return self.manifest.labels

    def predict(self, inputs: Any, raw: bool = False) -> np.ndarray:
        """Outputs for one input or a list of inputs (image paths, PIL images, arrays).

        Images and integer arrays get the manifest's preprocessing; float arrays are taken as
        already preprocessed model inputs. Returns float32 outputs with a batch axis.
        """
        if isinstance(inputs, (list, tuple)):
            if not inputs:
                raise InputError("no inputs given", hint="pass at least one image or array")
            batch = np.concatenate([load_input(item, self._preprocessing, self._sample_shape) for item in inputs])
        else:
            batch = load_input(inputs, self._preprocessing, self._sample_shape)
        return self.predict_tensor(batch, raw=raw)

    def predict_tensor(self, x: np.ndarray, raw: bool = False) -> np.ndarray:
        """Outputs for a preprocessed float32 batch shaped like the model input, or for a batch
        already quantized to the artifact's input dtype (fed unchanged)."""
        native = self.backend.inputs[0].dtype
        if not isinstance(x, np.ndarray) or (x.dtype.kind != "f" and x.dtype != native):
            raise InputError(
                f"expected a float32 (or {native}) array, got {getattr(x, 'dtype', type(x).__name__)}",
                hint="use predict() for images and raw pixel arrays",
            )
        check_finite(x, "input")
        x = conform(x, self._sample_shape, "input")
        return self.backend.run(x if x.dtype == native else x.astype(np.float32, copy=False), raw=raw)[0]

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(
    source: str | os.PathLike[str],
    target: str | None = None,
    backend: str | None = None,
    threads: int | None = None,
) -> Model:
    """Load a package (directory or ``.ekpkg``) with the best artifact this device can run.

    ``target`` picks the artifact (``tflite``); ``backend`` the runtime (``litert``).
    """
    root, manifest = open_package(source)
    artifact, backend_cls = _choose(manifest, target, backend)
    path = verified_artifact_path(root, artifact)
    return Model(root, manifest, artifact, backend_cls(str(path), threads=threads))


def _choose(manifest: Manifest, target: str | None, backend: str | None) -> tuple[Artifact, type[Backend]]:
    candidates: Sequence[Artifact] = [manifest.artifact(target)] if target else manifest.artifacts
    missing: list[str] = []
    for artifact in candidates:
        names = TARGET_BACKENDS.get(artifact.target, ())
        if backend is not None:
            names = tuple(n for n in names if n == backend)
            get_backend(backend)
        for name in names:
            cls = BACKENDS[name]
            if cls.available():
                return artifact, cls
            missing.append(f"{artifact.target} needs {name}")
    detail = "; ".join(missing) or "no backend for " + ", ".join(a.target for a in candidates)
    raise BackendUnavailableError(
        f"no installed runtime can run package {manifest.name!r} ({detail})",
        hint="pip install 'edgekit[tflite]' on this device",
    )
