"""Stage 6: the manifest written into the staged package, signed, published by rename.

Publication is atomic: the staged tree is renamed to ``OUTDIR/NAME.edgekit`` (replacing an old
one only with ``--force``); a run that loses a race to another run says so.
"""

from __future__ import annotations

import errno
import platform
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..version import __version__
from ..errors import AccuracyDropError, OutputExistsError
from ..formats import FORMATS, backends
from ..fsutil import publish, sha256_tree, write_text_atomic
from ..manifest import Artifact, FailedFormat, LeftOut, Manifest, TensorSpec
from ..sources.description import SourceDescription
from ..validation_record import ValidationRecord
from .context import PackagingContext
from .data import PreparedData
from .each_format import FormatOutcome, ship_now
from .gates import failure_hint, failure_message, saturation_note
from .options import PackageOptions, PackageResult
from .partial import leave_out, refused_formats
from .preflight import Plan
from .ranking import rank_and_say
from .record import validation_record
from .search.trial import LAYERS
from .summary import lines as summary_lines

if TYPE_CHECKING:
    from ..formats import Builder, BuildContext
    from .loading import LoadedSource


def model_file(model: str) -> str:
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
    failed: list[FailedFormat],
    methods: dict[str, str],
    left_out: tuple[LeftOut, ...] = (),
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
        source={"format": kind, "file": Path(options.model).name, "sha256": sha256_tree(model_file(options.model)),
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
        left_out=list(left_out),
    )


def write_package_files(staged: Path, manifest: Manifest, labels: list[str] | None, sign_key: str | None) -> None:
    write_text_atomic(staged / "manifest.json", manifest.to_json())
    if labels:
        write_text_atomic(staged / "labels.txt", "\n".join(labels) + "\n")
    if sign_key:
        from ..device.signing import sign_directory

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


def assemble_package(plan: Plan, loaded: LoadedSource, run: PackagingContext, builders: list[Builder],
                     context: BuildContext, outcomes: list[FormatOutcome]) -> PackageResult:
    """Manifest, gates, signature and publication of the staged package."""
    options, data, reference, staged, progress = run.options, run.data, run.reference, run.staged, run.progress
    kinds = run.judging.kinds
    refused = refused_formats(outcomes, options.allow_accuracy_drop, options.allow_partial)  # a partial package
    built = [o for o in outcomes if o.built is not None and not any(o is r for r in refused)]
    measured = {o.name: o.comparison for o in built}
    failed = [FailedFormat(o.name, o.error.message, o.error.hint or "")
              for o in outcomes if o.error]
    failed += [leave_out(o, staged, options.auto_fix) for o in refused]
    failures = {o.name: list(o.failures) for o in built}
    notes = {o.name: [n for n in [saturation_note(o.name, o.comparison, o.remedies)] if n]
             for o in built if o.comparison}
    unmeasured = {b.name: b.unmeasured_reason for b in builders}
    validation = validation_record(
        measured, options, data, reference, plan.held_out,
        unmeasured={o.name: o.built.not_measured or unmeasured.get(o.built.artifact.format, "") for o in built},
        measured_by={o.name: o.built.evaluated_by for o in built if o.comparison and o.built.evaluated_by},
        failures=failures, notes=notes, kinds=kinds,
    )
    validation = validation.with_auto_fix({o.name: [t.to_dict() for t in o.fixes] for o in built if o.fixes})
    methods = {b.name: b.range_method(next((o.context for o in built if o.name == b.name and o.context),
                                                 context)) for b in builders}
    manifest = make_manifest(plan.name, options, loaded.kind, loaded.described, data,
                             [o.built.artifact for o in built], validation, failed, methods, run.left_out)
    failed_gates = [f for o in built for f in o.failures]
    if len(outcomes) > 1 or any(o.fixes for o in outcomes) or any(
            o.built is not None and o.built.artifact.precision == "float" for o in outcomes):  # what the label means
        for line in summary_lines(outcomes, options.allow_accuracy_drop, refused, validation):
            progress.say(line)
    if failed_gates and not options.allow_accuracy_drop:
        tried = {o.name: {t.change for t in o.fixes if not t.stage} for o in built} \
            if options.auto_fix else None
        searched = {o.name: sum(1 for t in o.fixes if t.stage == LAYERS) for o in built}
        passed = [o.name for o in built if o.name in FORMATS and not o.failures and o.comparison is not None]
        quantized = loaded.described.precision.learned  # its ranges kept: no calibration fix applies
        hint = failure_hint(tried, searched, passed, any(f.fixes for f in failed_gates), quantized)
        raise AccuracyDropError(failure_message(failed_gates, tried, quantized),
                                hint=hint + ship_now(outcomes) if not passed else hint)
    for f in failed_gates:
        progress.warn(f"{f.format} failed validation (kept because of --allow-accuracy-drop): {f.what}")
    speed = rank_and_say(manifest, staged, data.evaluation, progress)
    if speed:
        manifest = replace(manifest, speed=speed)
    write_package_files(staged, manifest, data.labels, options.sign_key)
    publish_package(staged, plan.destination, options.force)
    summaries = {name: m.summary if m is not None else None for name, m in measured.items()}
    return PackageResult(plan.destination, manifest, plan.archive, summaries, progress.warnings, failed)
