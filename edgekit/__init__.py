"""edgekit: package trained models as calibrated INT8 artifacts and run them on edge devices.

Public API: ``package()`` (build side, needs ``edgekit[package]``) and ``load()`` (device side:
numpy, Pillow and one runtime library).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def load(
    source: Any,
    artifact: str | None = None,
    backend: str | None = None,
    threads: int | None = None,
    profile: Any = "auto",
    **options: Any,
) -> Any:
    """Load a package for prediction: ``edgekit.load("digits.edgekit").predict(image)``.

    ``source``: package directory, ``.ekpkg``, ``http(s)://``/``file://`` URL, ``.tflite`` or
    ``.onnx``. ``artifact``/``backend`` narrow the choice; ``profile``: device profile or "auto".
    """
    from .runtime import load as _load

    return _load(source, artifact=artifact, backend=backend, threads=threads, profile=profile, **options)


def package(model: str, calibration: str, output_dir: str, **options: Any) -> Any:
    """Build a validated INT8 package; keyword options as in ``edgekit.build.PackageOptions``
    (``formats=["tflite", "onnx"]`` or ``["all"]``)."""
    from .build import PackageOptions
    from .build import package as _package

    return _package(PackageOptions(model=model, calibration=calibration, output_dir=output_dir, **options))


__all__ = ["__version__", "load", "package"]
