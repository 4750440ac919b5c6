"""``edgekit package``: source model + calibration data -> validated INT8 package, as stages.

1. ``preflight``: cheap checks, before any model loads (``preflight.py``).
2. ``load_source``: the source describes the model and exports what formats convert from
   (converter child).
3. ``prepare_data``: calibration and validation samples as the model sees them (``data.py``).
4. ``float_reference``: the float model's outputs on the validation samples (converter child).
5. ``build_formats`` (``each_format.py``): each format's route (``edgekit.routing.routes``, planned before
   anything loads) turns what the source described into the form the format converts from, then its
   builder makes the artifact into the staging tree, measured against the float outputs
   (``validate.py``), searched when a gate fails (``search/``); a ``FormatOutcome`` per format,
   built or failed.
6. ``assemble_package`` (``assemble.py``): manifest, gates, signature, publication by rename.

This module only conducts: it runs the stages in order and holds what they share.

Stages take frozen values and return new ones; nothing writes into a shared object. Partial
success (some formats failed) is part of the result: ``build_package`` returns it, and
``package`` raises ``PartialPackageError`` unless ``allow_partial``.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..device.devices import Profile
from ..errors import EdgekitError, PartialPackageError
from ..formats import FORMATS, BuildContext, expand_formats, get_format, missing_converter
from ..formats.base import EXPLAIN
from ..formats.building import save_samples
from ..formats.plan import FLOAT, INT16
from ..fsutil import staging_dir, temp_dir
from ..device.package_io import write_archive
from ..progress import Progress
from ..routing.routes import plan, routes
from ..routing.routes import route as route_to
from ..sources import Source, detect_source
from ..sources.description import SourceDescription
from ..conversion.worker_reuse import reusing
from ..manifest import LeftOut
from .assemble import assemble_package
from .context import PackagingContext
from .data import PreparedData, prepare_data
from .each_format import Planned, build_formats, refused_routes
from .float_model import float_model_outputs, say_source_accuracy, source_against_float
from .loading import LoadedSource, float_reference, load_source
from .fallback import wants_float_fallback
from .gates import REFUSED_PREFIX, Remedies
from .options import PackageOptions, PackageResult
from .plan_layers import check_plan_layers
from .preflight import TEMP_PREFIX, Plan, preflight
from .validate import Judging, infer_kinds, silent_outputs

EXPLAIN_SAMPLES = 32


def formats_left_out(options: PackageOptions) -> tuple[LeftOut, ...]:
    """The formats ``all`` leaves out because their converter is not installed here: format, why,
    and the extra that brings it (recorded in the manifest's ``left_out``). A format asked for by
    name whose converter is missing is refused instead (``plan_formats``)."""
    named = set(options.formats or []) - {"all"}
    found = []
    for fmt in (get_format(name) for name in expand_formats(options.formats or [])):
        why = missing_converter(fmt)
        if why is not None and fmt.name not in named:
            found.append(LeftOut(fmt.name, why, fmt.build_extra))
    return tuple(found)


def plan_formats(options: PackageOptions, source: Source, kind: str, progress: Progress) -> list[Planned]:
    """Each requested format with its route; an option a route cannot honour, or a format no
    route reaches, is refused here, before anything loads (``routes.plan``). ``all`` is every
    format whose converter is installed here (each other one named in one line with the extra that
    brings it); one asked for by name whose converter is not installed is refused."""
    left_out = {entry.format: entry for entry in formats_left_out(options)}
    formats = [get_format(name) for name in expand_formats(options.formats or []) if name not in left_out]
    for fmt in formats:
        why = missing_converter(fmt)
        if why is not None:
            raise EdgekitError(f"cannot build --format {fmt.name} here: {why}", hint=f"pip install '{fmt.build_extra}'")
    for entry in left_out.values():
        progress.say(f"note: --format all leaves out {entry.format}: {entry.why} "
                     f"(pip install '{entry.extra}' builds it)")
    if not formats:
        raise EdgekitError("--format all finds no format this machine can build: "
                           + "; ".join(f"{e.format}: {e.why}" for e in left_out.values()),
                           hint="pip install 'edgekit[package]' (TFLite, ONNX, CoreML)")
    planned = plan(source, kind, formats, {FLOAT: bool(options.plan.floats), EXPLAIN: options.explain,
                                           INT16: bool(options.plan.int16)})
    found = []
    for fmt in formats:
        builder = fmt.builder()
        route = planned[fmt.name]
        remedies = Remedies(builder.fixes(), builder.saturation_explanation(), layers=tuple(route.honours))
        everywhere = tuple(r for f in FORMATS.values() if (r := route_to(source, kind, f)) is not None)
        found.append(Planned(builder, route, remedies, everywhere, tuple(routes(source, kind, fmt))))
    return found


def package(options: PackageOptions, progress: Progress | None = None) -> PackageResult:
    """Build a validated package; raises ``PartialPackageError`` when a format failed (unless allowed)."""
    result = build_package(options, progress)
    if result.failed and not options.allow_partial:
        raise partial_error(result)
    return result


def partial_error(result: PackageResult) -> PartialPackageError:
    """What a package with failed formats is, as the error ``package`` and the CLI raise."""
    listed = "; ".join(f"{f.target}: {f.error}" for f in result.failed)
    failed = {f.target for f in result.failed}
    built = list(dict.fromkeys(a.format for a in result.manifest.artifacts if a.format not in failed))
    keep = " ".join(f"--format {fmt}" for fmt in built)
    validation = result.manifest.validation
    unmeasured = [a.key for a in result.manifest.artifacts if not validation.artifact(a.key).measured]
    kept = "passed" if not unmeasured else f"were built ({', '.join(unmeasured)} not measured here)"
    refused = next((f.hint for f in result.failed if f.error.startswith(REFUSED_PREFIX)), None)
    return PartialPackageError(
        f"package written to {result.path} without {', '.join(f.target for f in result.failed)} ({listed})",
        hint=(f"fix the model for those formats, keep the ones that {kept} ({keep}), or pass --allow-partial"
              if built else "fix the model for those formats (no format passed)")
        + (f"; for a format refused by its gates: {refused}" if refused else ""),
        result=result,
    )


def build_package(options: PackageOptions, progress: Progress | None = None) -> PackageResult:
    """The stages; the result lists failed formats instead of raising for them."""
    progress = progress or Progress()
    began = time.monotonic()
    source, kind = detect_source(options.model)
    planned = plan_formats(options, source, kind, progress)
    profiles = device_profiles(options.profiles)  # an unknown --profile is said before anything loads
    plan = preflight(options, progress)
    metric = load_metric(options.metric) if options.metric else None
    peeked = source.peek(Path(options.model)) if source.peek is not None else None
    if peeked is not None:  # the model's ops and inputs read without loading it: a route limit refuses now
        inputs = [name for name in peeked["inputs"] if name not in (options.fixed_inputs or {})]
        planned, _ = refused_routes(planned, peeked["op_types"], len(inputs), progress)
    with temp_dir(TEMP_PREFIX) as work, reusing():
        hints = source_hints(options, plan)
        loaded = load_source(source, kind, options, work, progress, hints)
        say_quantized_source(loaded.described, progress)
        say_rewrites(loaded.described, progress)
        if plan.few_calibration_samples and not loaded.described.precision.learned:
            progress.warn(plan.few_calibration_samples)
        check_plan_layers(options.plan, loaded.described)
        data = prepare_data(plan, options, loaded.described, progress)
        given = resolve_kinds(options.output_kinds, loaded.described)
        reference = float_reference(loaded, data, work, progress, options.step_timeout_s)
        say_source_accuracy(loaded.described, reference, data, progress)
        float_outputs = float_model_outputs(options, loaded, data, work, progress, hints)
        kinds = infer_kinds(loaded.described, reference, data, given)
        say_kinds(kinds, reference, progress)
        judging = Judging(kinds=kinds, metric_spec=options.metric, metric=metric,
                          max_accuracy_drop=options.max_accuracy_drop)
        if float_outputs is not None:  # recorded as source.quantized.float_reference
            loaded.described.recorded["quantized"]["float_reference"] = source_against_float(
                options, reference, float_outputs, data, judging, progress)
        with staging_dir(plan.destination) as staged:
            context = build_context(options, loaded, data, staged, work, profiles)
            run = PackagingContext(data, reference, staged, progress, judging, options,
                                   dict(loaded.described.output_layers), setup_s=time.monotonic() - began,
                                   float_model=float_outputs, left_out=formats_left_out(options))
            outcomes = build_formats(planned, context, loaded.described, run)
            result = assemble_package(plan, loaded, run, [p.builder for p in planned], context, outcomes)
    if plan.archive is not None:
        write_archive(plan.destination, plan.archive, replace=options.force)
    return result


def say_quantized_source(described: SourceDescription, progress: Progress) -> None:
    """A source that is already quantized (QAT, another tool) is said in the first lines: what it
    carries, that it is its own reference, and that its learned ranges are kept."""
    if not described.precision.learned:
        return
    from ..conversion.quantized import describe_scheme

    progress.say(f"the source is already quantized ({describe_scheme(described.precision.scheme)}): its outputs as given are the "
                 "reference every artifact is judged against, and its learned ranges are kept, never chosen again")


def say_kinds(kinds: dict[str, Any], reference: dict[str, np.ndarray], progress: Progress) -> None:
    """Each output's kind with its evidence, before anything is judged by it; silent outputs warned."""
    for kind in kinds.values():
        progress.say(f"output {kind.describe()}")
    for note in silent_outputs(reference).values():
        progress.warn(note)


def say_rewrites(described: Any, progress: Progress) -> None:
    """What the source's rewrites changed in what the package takes (``sources/onnx_rewrite.py``)."""
    rewrites = described.recorded.get("rewrites") or {}
    if rewrites.get("batch_axis_added"):
        progress.say("the model has no batch axis (each calibration sample has its inputs' whole shape): one sample "
                     "is one call, fed one at a time; the package's tensors have a batch axis of 1 in front "
                     f"({', '.join(rewrites['batch_axis_added'])})")
    for name, axis in (rewrites.get("batch_axes") or {}).items():
        progress.say(f"{name!r} has its batch on axis {axis} in the model: the package takes and gives it batch-first")


def source_hints(options: PackageOptions, plan: Plan) -> dict[str, Any]:
    """What a source without fixed input shapes (PyTorch TorchScript, factories) needs to trace
    the model: ``--input-shape`` and the calibration arrays' sample shapes and dtypes."""
    arrays = plan.calibration.arrays
    return {
        "input_shapes": dict(options.input_shapes),
        "batch_axes": dict(options.batch_axes),
        "sample_shapes": {name: list(x.shape[1:]) for name, x in arrays.items()},
        "sample_dtypes": {name: str(x.dtype) for name, x in arrays.items()},
        # each --input NAME=VALUE with its --input-shape, if one was given
        "fixed_inputs": {name: {**spec, **({"given_shape": options.input_shapes[name]}
                                           if name in options.input_shapes else {})}
                         for name, spec in options.fixed_inputs.items()},
    }


def device_profiles(names: list[str] | None) -> tuple[Profile, ...]:
    """The device profiles the package is for (``--profile``; ``auto`` is this machine's;
    default: every profile edgekit knows): formats read what their devices need from them."""
    from ..device.devices import detect, get_profile, load_profiles

    known = load_profiles()
    chosen = [detect(profiles=known) if name == "auto" else get_profile(name, known) for name in names] \
        if names else list(known.values())
    return tuple({profile.name: profile for profile in chosen}.values())


def build_context(options: PackageOptions, loaded: LoadedSource, data: PreparedData, staged: Path,
                  work: Path, profiles: tuple[Profile, ...] = ()) -> BuildContext:
    # the per-layer report's samples: for --explain, and for --auto-fix's layer search to ask for it
    sensitivity_npy = save_samples(work / "explain", {k: v[:EXPLAIN_SAMPLES] for k, v in data.evaluation.items()})
    explain_npy = sensitivity_npy if options.explain else None
    return BuildContext(
        calibration_npy=save_samples(work / "calibration", data.calibration),
        eval_npy=save_samples(work / "eval", data.evaluation),
        package_dir=staged,
        workdir=work,
        layer_names=loaded.described.layers,
        output_layers=MappingProxyType(dict(loaded.described.output_layers)),
        output_names=tuple(loaded.described.output_names),
        plan=options.plan,
        allow_float_ops=options.allow_float_ops,
        explain_npy=explain_npy,
        sensitivity_npy=sensitivity_npy,
        timeout_s=options.step_timeout_s,
        # a quantized source has no float model to fall back to (its float graph is the fake-quant simulation)
        source_precision=loaded.described.precision,
        options=MappingProxyType(options.options_for_formats()),
        also_float=wants_float_fallback(options.also_float, options.model) and not loaded.described.precision.learned,
        device_profiles=tuple(profile.build_target() for profile in profiles),
    )


def resolve_kinds(specs: dict[str, str], described: SourceDescription) -> dict[str, str]:
    """``--output-kind`` by output name; a Keras output may also be named by its layer."""
    from ..kinds import resolve_kinds as resolve

    by_layer = {layer: name for name, layer in described.output_layers.items()}
    return resolve({by_layer.get(k, k): v for k, v in specs.items()}, described.output_names,
                   {o.name: list(o.shape) for o in described.outputs})


def load_metric(spec: str) -> Any:
    from ..comparison.user_metric import load_metric as load

    return load(spec)


__all__ = ["PackageOptions", "PackageResult", "build_package", "package", "partial_error"]
