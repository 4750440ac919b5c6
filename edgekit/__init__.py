"""edgekit: package trained models as calibrated INT8 artifacts and run them on edge devices.

Public API: ``package()`` (build side, needs ``edgekit[package]``) and ``load()`` (device side:
numpy, Pillow and one runtime library).
"""

from __future__ import annotations

from typing import Any

from .version import __version__


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
    from .device.runtime import load as _load

    return _load(source, artifact=artifact, backend=backend, threads=threads, profile=profile, **options)


def package(model: Any, calibration: Any, output_dir: Any = ".", *, eval: Any = None, example_inputs: Any = None,
            **options: Any) -> Any:
    """Build a validated INT8 package and return its ``PackageResult`` (path, ``verdicts``,
    ``table()``; a notebook shows both).

    ``model``: a path as on the command line, or the object itself: a ``keras.Model``, a
    ``torch.nn.Module`` (traced with ``example_inputs``, else the first calibration samples, else
    zeros of ``input_shapes={"x": [1, 3, 224, 224]}``) or an ``onnx.ModelProto``.
    ``calibration``/``eval``: a path, an array, ``(x, y)``, a dict of arrays by input name, or an
    iterable (generator, PyTorch ``DataLoader``). Other keyword options as in
    ``edgekit.packaging.PackageOptions`` (``formats=["all"]``, ``name=``, ``samples=``, ...).
    """
    from .packaging import PackageOptions
    from .packaging import package as _package
    from .data.in_memory import data_file, is_path
    from .sources.objects import input_ranks, model_file
    from .fsutil import temp_dir

    with temp_dir("edgekit-objects-") as folder:
        if not is_path(model):
            path, name = model_file(model, folder, options.get("name"), example_inputs, options.get("input_shapes"),
                                    calibration)
            ranks = input_ranks(model)
            options.setdefault("name", name)
        else:
            path, ranks = str(model), {}
        calibration_file = data_file(calibration, folder, "calibration", ranks)
        eval_file = None if eval is None else data_file(eval, folder, "eval", ranks)
        names = {file: f"edgekit.package({role}=...)" for file, role, given in
                 ((calibration_file, "calibration", calibration), (eval_file, "eval", eval))
                 if file is not None and not is_path(given)}
        return _package(PackageOptions.from_keywords(
            model=path, calibration=calibration_file, eval=eval_file, output_dir=str(output_dir),
            data_names=names, **options))


__all__ = ["__version__", "load", "package"]
