"""Stage 6: the manifest written into the staged package, signed, published by rename.

Publication is atomic: the staged tree is renamed to ``OUTDIR/NAME.edgekit`` (replacing an old
one only with ``--force``); a run that loses a race to another run says so.
"""

from __future__ import annotations

import errno
import platform
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Mapping

import numpy as np

from ..version import __version__
from ..errors import OutputExistsError
from ..formats import backends
from ..fsutil import publish, sha256_tree, write_text_atomic
from ..manifest import Artifact, Manifest, TensorSpec
from ..sources.description import SourceDescription
from ..validation_record import ValidationRecord
from .data import PreparedData
from .options import PackageOptions


def _model_file(model: str) -> str:
    """The file a model spec names (``file.py:factory`` -> ``file.py``)."""
    file, sep, function = model.rpartition(":")
    return file if sep and file.endswith(".py") and function.isidentifier() else model


def make_manifest(
    name: str,
    options: PackageOptions,
    kind: str,
    described: SourceDescription,
    data: PreparedData,
    artifacts: list[Artifact],
    validation: ValidationRecord,
    failed: list[dict[str, str]],
    methods: dict[str, str],
) -> Manifest:
    """The package's manifest.json: tensors, preprocessing, artifacts, calibration, validation, versions."""
    inputs = [TensorSpec(
        name=p.name, shape=p.shape, dtype="float32" if p.role != "integer" else p.dtype,
        layout=p.spec.layout if p.role == "image" and p.spec is not None and p.spec.resize else None,
        preprocessing=p.spec if p.role != "integer" else None, role=p.role,
        range=[float(data.calibration[p.name].min()), float(data.calibration[p.name].max())]
        if p.role != "integer" else None,
    ) for p in data.inputs]
    outputs = [TensorSpec(name=o.name, shape=list(o.shape), dtype="float32",
                          labels=data.labels if o.name == data.labelled_output else None)
               for o in described.outputs]
    return Manifest(
        name=name,
        edgekit_version=__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        source={"format": kind, "file": Path(options.model).name, "sha256": sha256_tree(_model_file(options.model)),
                **described.recorded},
        inputs=inputs,
        outputs=outputs,
        artifacts=artifacts,
        calibration={
            "samples": data.calibration_count,
            "method": _method_summary(methods),
            "methods": methods,
            "seed": options.seed,
            "source": data.calibration_source,
            "data_sha256": data.calibration_raw.sha256,
            "warnings": data.warnings,
        },
        validation=validation,
        versions=_versions(described.versions),
        failed=failed,
    )


def write_package_files(staged: Path, manifest: Manifest, labels: list[str] | None, sign_key: str | None) -> None:
    write_text_atomic(staged / "manifest.json", manifest.to_json())
    if labels:
        write_text_atomic(staged / "labels.txt", "\n".join(labels) + "\n")
    if sign_key:
        from ..signing import sign_directory

        sign_directory(staged, sign_key)


def publish_package(staged: Path, destination: Path, force: bool) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        publish(staged, destination, replace=force)
    except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
        raise OutputExistsError(
            f"{destination} appeared while this package was being built (another `edgekit package` run "
            "wrote it first); this run's package was not written",
            hint="use a different -o or --name for each concurrent run, or pass --force to replace it",
        ) from exc
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:
            raise
        raise OutputExistsError(
            f"{destination} appeared while this package was being built (another run wrote it first)",
            hint="use a different -o or --name for each concurrent run",
        ) from exc


def _versions(source_versions: Mapping[str, str]) -> dict[str, str]:
    versions = {"edgekit": __version__, "python": platform.python_version(), "numpy": np.__version__,
                **source_versions}
    for name, backend in backends().items():
        library = backend.available()
        if library:
            versions[name] = library
    return versions


def _method_summary(methods: dict[str, str]) -> str:
    distinct = set(methods.values())
    return distinct.pop() if len(distinct) == 1 else "; ".join(f"{t}: {m}" for t, m in methods.items())
