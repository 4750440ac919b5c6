"""``edgekit package``: source model + calibration data -> validated INT8 package, as stages.

1. ``preflight``: cheap checks, before any model loads (``preflight.py``).
2. ``load_source``: the source describes the model and exports what formats convert from
   (converter child).
3. ``prepare_data``: calibration and validation samples as the model sees them (``data.py``).
4. ``float_reference``: the float model's outputs on the validation samples (converter child).
5. ``build_formats``: each format's builder makes its artifact into the staging tree; a
   ``FormatOutcome`` per format, built or failed. Then each artifact is measured against the
   float outputs (``validate.py``).
6. ``assemble``: manifest, gates, signature, publication by rename (``assemble.py``).

Stages take frozen values and return new ones; nothing writes into a shared object. Partial
success (some formats failed) is part of the result: ``build_package`` returns it, and
``package`` raises ``PartialPackageError`` unless ``allow_partial``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .. import worker
from ..errors import AccuracyDropError, ConversionError, EdgekitError, PartialPackageError
from ..formats import Builder, BuildContext, BuildResult, expand_formats, get_format
from ..formats.base import save_samples
from ..fsutil import staging_dir, temp_dir
from ..package_io import write_archive
from ..progress import Progress
from ..sources import Source, detect_source
from .assemble import make_manifest, publish_package, write_package_files
from .data import PreparedData, prepare_data
from .options import PackageOptions, PackageResult
from .preflight import TEMP_PREFIX, Plan, preflight
from .validate import Measured, gate_failures, gate_message, measure, validation_record

EXPLAIN_SAMPLES = 32


@dataclass(frozen=True)
class LoadedSource:
    source: Source
    kind: str
    described: dict[str, Any]  # what the source's prepare() returned (JSON)


@dataclass(frozen=True)
class FormatOutcome:
    """One format's result: built (and measured), or failed with the reason."""

    name: str
    built: BuildResult | None = None
    comparison: Measured | None = None
    error: EdgekitError | None = None


def package(options: PackageOptions, progress: Progress | None = None) -> PackageResult:
    """Build a validated package; raises ``PartialPackageError`` when a format failed (unless allowed)."""
    result = build_package(options, progress)
    if result.failed and not options.allow_partial:
        raise partial_error(result)
    return result


def partial_error(result: PackageResult) -> PartialPackageError:
    """What a package with failed formats is, as the error ``package`` and the CLI raise."""
    listed = "; ".join(f"{f['target']}: {f['error']}" for f in result.failed)
    return PartialPackageError(
        f"package written to {result.path} without {', '.join(f['target'] for f in result.failed)} ({listed})",
        hint="fix the model for those formats, drop them from --format, or pass --allow-partial",
        result=result,
    )


def build_package(options: PackageOptions, progress: Progress | None = None) -> PackageResult:
    """The stages; the result lists failed formats instead of raising for them."""
    progress = progress or Progress()
    source, kind = detect_source(options.model)
    builders = [get_format(name).builder() for name in expand_formats(options.formats or [])]
    plan = preflight(options, progress)
    with temp_dir(TEMP_PREFIX) as work:
        loaded = load_source(source, kind, options, work, progress)
        data = prepare_data(plan, options, loaded.described, progress)
        reference = float_reference(loaded, data, work, progress)
        with staging_dir(plan.destination) as staged:
            context = build_context(options, loaded, data, staged, work)
            outcomes = build_formats(builders, context, data, reference, staged, progress)
            result = assemble(plan, options, loaded, data, reference, builders, context, outcomes, staged, progress)
    if plan.archive is not None:
        write_archive(plan.destination, plan.archive, replace=options.force)
    return result


def load_source(source: Source, kind: str, options: PackageOptions, work: Path, progress: Progress) -> LoadedSource:
    with progress.step(f"Loading {kind} model {options.model}"):
        described = worker.call(
            source.prepare,
            what="loading the model",
            model_path=str(Path(options.model).resolve()),
            kind=kind,
            export_dir=str(work / "saved_model"),
        )
    return LoadedSource(source, kind, described)


def float_reference(loaded: LoadedSource, data: PreparedData, work: Path, progress: Progress) -> dict[str, np.ndarray]:
    """Every output of the float model on the validation samples, by output name."""
    inputs, outputs = work / "eval_inputs.npz", work / "reference.npz"
    np.savez(inputs, **data.evaluation)
    with progress.step(f"Float reference outputs on {data.evaluation_count} samples"):
        worker.call(loaded.source.float_reference, what="running the float model", prepared=loaded.described,
                    inputs_npz=str(inputs), output_npz=str(outputs))
    with np.load(outputs) as stored:
        found = {name: stored[name].astype(np.float32) for name in stored.files}
    expected = [o["name"] for o in loaded.described["outputs"]]
    if sorted(found) != sorted(expected):
        raise EdgekitError(f"the float model returned outputs {sorted(found)}, not the described {expected}",
                           hint="report this model: its signature and its outputs disagree")
    return {name: found[name] for name in expected}


def build_context(options: PackageOptions, loaded: LoadedSource, data: PreparedData, staged: Path,
                  work: Path) -> BuildContext:
    explain_npy = None
    if options.explain:
        explain_npy = save_samples(work / "explain", {k: v[:EXPLAIN_SAMPLES] for k, v in data.evaluation.items()})
    return BuildContext(
        calibration_npy=save_samples(work / "calibration", data.calibration),
        eval_npy=save_samples(work / "eval", data.evaluation),
        package_dir=staged,
        workdir=work,
        saved_model=loaded.described.get("saved_model"),
        onnx_model=loaded.described.get("onnx_model"),
        source_path=str(Path(options.model).resolve()),
        source_kind=loaded.kind,
        layer_names=tuple(loaded.described["layers"]),
        keep_float=tuple(options.keep_float),
        allow_float_ops=options.allow_float_ops,
        explain_npy=explain_npy,
        timeout_s=options.timeout_s,
        options=MappingProxyType(options.options_for_formats()),
    )


def build_formats(builders: list[Builder], context: BuildContext, data: PreparedData, reference: dict[str, np.ndarray],
                  staged: Path, progress: Progress) -> list[FormatOutcome]:
    """Each format built and measured in turn; with one format its failure is the run's error."""
    outcomes = []
    for builder in builders:
        try:
            steps = f"Calibrating and converting {builder.name} on {data.calibration_count} samples"
            with progress.step(steps) as update:
                built = builder.build(context, update)
            written = staged / built.artifact.path
            if not written.exists() or (written.is_file() and written.stat().st_size == 0):
                raise ConversionError(f"the {builder.name} converter reported success but wrote no artifact at "
                                      f"{built.artifact.path}", hint="rerun with --debug and report the log")
        except EdgekitError as exc:
            if len(builders) == 1:
                raise
            progress.warn(f"{builder.name} failed: {exc.message}")
            outcomes.append(FormatOutcome(builder.name, error=exc))
            continue
        with progress.step(f"Validating {builder.name} against the float model"):
            comparison = measure(built, builder, staged, data, reference)
        outcomes.append(FormatOutcome(builder.name, built=built, comparison=comparison))
    if not any(o.built for o in outcomes):
        details = "; ".join(f"{o.name}: {o.error.message}" for o in outcomes if o.error)
        first = next((o.error.hint for o in outcomes if o.error), "")
        raise EdgekitError(f"no target could be built (every requested format failed: {details})", hint=first)
    return outcomes


def assemble(plan: Plan, options: PackageOptions, loaded: LoadedSource, data: PreparedData,
             reference: dict[str, np.ndarray],
             builders: list[Builder], context: BuildContext, outcomes: list[FormatOutcome], staged: Path,
             progress: Progress) -> PackageResult:
    """Manifest, gates, signature and publication of the staged package."""
    built = [o for o in outcomes if o.built is not None]
    measured = {o.name: o.comparison for o in built}
    failed = [{"format": o.name, "target": o.name, "error": o.error.message, "hint": o.error.hint}
              for o in outcomes if o.error]
    validation = validation_record(
        measured, options, data, reference, plan.held_out,
        unmeasured={b.name: b.unmeasured_reason for b in builders},
        measured_by={o.name: o.built.evaluated_by for o in built if o.comparison and o.built.evaluated_by},
    )
    methods = {b.name: b.calibration_method(context) for b in builders}
    manifest = make_manifest(plan.name, options, loaded.kind, loaded.described, data,
                             [o.built.artifact for o in built], validation, failed, methods)
    failures = gate_failures(measured, options)
    if failures and not options.allow_accuracy_drop:
        raise AccuracyDropError(gate_message(failures, options))
    for name, failure in failures.items():
        progress.warn(f"{name} failed validation (kept because of --allow-accuracy-drop): "
                      + gate_message({name: failure}, options))
    write_package_files(staged, manifest, data.labels, options.sign_key)
    publish_package(staged, plan.destination, options.force)
    summaries = {name: m.summary if m is not None else None for name, m in measured.items()}
    return PackageResult(plan.destination, manifest, plan.archive, summaries, progress.warnings, failed)


__all__ = ["PackageOptions", "PackageResult", "build_package", "package", "partial_error"]
