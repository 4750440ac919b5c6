"""``edgekit package``: source model + calibration data -> validated INT8 package, as stages.

1. ``preflight``: cheap checks, before any model loads (``preflight.py``).
2. ``load_source``: the source describes the model and exports what formats convert from
   (converter child).
3. ``prepare_data``: calibration and validation samples as the model sees them (``data.py``).
4. ``float_reference``: the float model's outputs on the validation samples (converter child).
5. ``build_formats``: each format's route (``edgekit.routes``, planned before anything loads)
   turns what the source described into the form the format converts from, then its builder
   makes the artifact into the staging tree; a ``FormatOutcome`` per format, built or failed. Then each artifact is measured against the
   float outputs (``validate.py``).
6. ``assemble``: manifest, gates, signature, publication by rename (``assemble.py``).

Stages take frozen values and return new ones; nothing writes into a shared object. Partial
success (some formats failed) is part of the result: ``build_package`` returns it, and
``package`` raises ``PartialPackageError`` unless ``allow_partial``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .. import worker
from ..errors import OTHER_ROUTES, AccuracyDropError, ConversionError, EdgekitError, PartialPackageError, RouteError
from ..devices import Profile
from ..formats import FORMATS, Builder, BuildContext, BuildResult, expand_formats, get_format
from ..formats.building import save_samples
from ..fsutil import staging_dir, temp_dir
from ..package_io import write_archive
from ..progress import Progress
from ..routes import Route, fallback_route, model_form, other_routes, plan, route_limits, routes
from ..steps import StepContext
from ..routes import route as route_to
from ..sources import Source, detect_source
from ..sources.description import SourceDescription
from .assemble import make_manifest, publish_package, write_package_files
from .data import PreparedData, prepare_data
from .options import PackageOptions, PackageResult
from .preflight import TEMP_PREFIX, Plan, preflight
from .search import Candidate, search
from .context import PackagingContext
from .gates import REFUSED_PREFIX, GateFailure, Remedies, failure_hint, failure_message, saturation_note
from .fallback import discard, fallback_result, wants_float_fallback
from .partial import leave_out, passed_fallbacks, refused_formats
from .record import validation_record
from .summary import lines as summary_lines
from .validate import Judging, Measured, infer_kinds, silent_outputs

EXPLAIN_SAMPLES = 32


@dataclass(frozen=True)
class LoadedSource:
    source: Source
    kind: str
    described: SourceDescription  # what the source's prepare() said of the model


@dataclass(frozen=True)
class Planned:
    """A format to build: its builder, its route from this source, and what fixes its gates."""

    builder: Builder
    route: Route
    remedies: Remedies
    others: tuple[Route, ...] = ()  # this model's routes to every format (for what to do instead)
    alternatives: tuple[Route, ...] = ()  # every route to this format, preferred first (``routes.routes``)
    fell_back: tuple[dict[str, str], ...] = ()  # routes given up for this one, each with why

    def on(self, other: Route, because: str) -> Planned:
        """The same format on another route (what it honours follows the route)."""
        remedies = self.remedies._replace(keep_float="keep_float" in other.honours, layers=tuple(other.honours))
        return replace(self, route=other, remedies=remedies,
                       fell_back=(*self.fell_back, {"route": self.route.describe(), "because": because}))

    def next_route(self, op_types: Iterable[str] = (), inputs: int = 0) -> Route | None:
        """The next route to this format not tried yet that converts such a model, or None."""
        tried = {f["route"] for f in self.fell_back} | {self.route.describe()}
        return fallback_route(self.route, [r for r in self.alternatives if r.describe() not in tried], op_types,
                              inputs)


def plan_formats(options: PackageOptions, source: Source, kind: str) -> list[Planned]:
    """Each requested format with its route; an option a route cannot honour, or a format no
    route reaches, is refused here, before anything loads (``routes.plan``)."""
    formats = [get_format(name) for name in expand_formats(options.formats or [])]
    planned = plan(source, kind, formats, {"keep_float": bool(options.keep_float), "explain": options.explain,
                                           "int16": bool(options.int16_layers)})
    found = []
    for fmt in formats:
        builder = fmt.builder()
        route = planned[fmt.name]
        remedies = Remedies(builder.fixes(), "keep_float" in route.honours, builder.saturation_explanation(),
                            layers=tuple(route.honours))
        everywhere = tuple(r for f in FORMATS.values() if (r := route_to(source, kind, f)) is not None)
        found.append(Planned(builder, route, remedies, everywhere, tuple(routes(source, kind, fmt))))
    return found


@dataclass(frozen=True)
class FormatOutcome:
    """One format's result: built (and measured, with the gates it fails), or failed with the reason."""

    name: str
    built: BuildResult | None = None
    comparison: Measured | None = None
    error: EdgekitError | None = None
    context: BuildContext | None = None  # what built it (after --auto-fix: the fixes kept)
    failures: tuple[GateFailure, ...] = ()
    fixes: tuple[dict[str, Any], ...] = ()  # --auto-fix attempts, as recorded in the manifest
    remedies: Remedies = Remedies()  # what its format and route can do about failed gates
    seconds: float = 0.0  # building, measuring and searching it


def package(options: PackageOptions, progress: Progress | None = None) -> PackageResult:
    """Build a validated package; raises ``PartialPackageError`` when a format failed (unless allowed)."""
    result = build_package(options, progress)
    if result.failed and not options.allow_partial:
        raise partial_error(result)
    return result


def partial_error(result: PackageResult) -> PartialPackageError:
    """What a package with failed formats is, as the error ``package`` and the CLI raise."""
    listed = "; ".join(f"{f['target']}: {f['error']}" for f in result.failed)
    failed = {f["target"] for f in result.failed}
    built = list(dict.fromkeys(a.format for a in result.manifest.artifacts if a.format not in failed))
    keep = " ".join(f"--format {fmt}" for fmt in built)
    validation = result.manifest.validation
    unmeasured = [a.key for a in result.manifest.artifacts if not validation.artifact(a.key).measured]
    kept = "passed" if not unmeasured else f"were built ({', '.join(unmeasured)} not measured here)"
    refused = next((f["hint"] for f in result.failed if f["error"].startswith(REFUSED_PREFIX)), None)
    return PartialPackageError(
        f"package written to {result.path} without {', '.join(f['target'] for f in result.failed)} ({listed})",
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
    planned = plan_formats(options, source, kind)
    profiles = device_profiles(options.profiles)  # an unknown --profile is said before anything loads
    plan = preflight(options, progress)
    metric = load_metric(options.metric) if options.metric else None
    peeked = source.peek(Path(options.model)) if source.peek is not None else None
    if peeked is not None:  # the model's ops and inputs read without loading it: a route limit refuses now
        inputs = [name for name in peeked["inputs"] if name not in (options.fixed_inputs or {})]
        planned, _ = refused_routes(planned, peeked["op_types"], len(inputs), progress)
    with temp_dir(TEMP_PREFIX) as work:
        loaded = load_source(source, kind, options, work, progress, source_hints(options, plan))
        data = prepare_data(plan, options, loaded.described, progress)
        given = resolve_kinds(options.output_kinds, loaded.described)
        reference = float_reference(loaded, data, work, progress, options.step_timeout_s)
        kinds = infer_kinds(loaded.described, reference, data, given)
        say_kinds(kinds, reference, progress)
        judging = Judging(kinds=kinds, metric_spec=options.metric, metric=metric,
                          max_accuracy_drop=options.max_accuracy_drop)
        with staging_dir(plan.destination) as staged:
            context = build_context(options, loaded, data, staged, work, profiles)
            run = PackagingContext(data, reference, staged, progress, judging, options,
                                   dict(loaded.described.output_layers), setup_s=time.monotonic() - began)
            outcomes = build_formats(planned, context, loaded.described, run)
            result = assemble(plan, loaded, run, [p.builder for p in planned], context, outcomes)
    if plan.archive is not None:
        write_archive(plan.destination, plan.archive, replace=options.force)
    return result


def say_kinds(kinds: dict[str, Any], reference: dict[str, np.ndarray], progress: Progress) -> None:
    """Each output's kind with its evidence, before anything is judged by it; silent outputs warned."""
    for kind in kinds.values():
        progress.say(f"output {kind.describe()}")
    for note in silent_outputs(reference).values():
        progress.warn(note)


def source_hints(options: PackageOptions, plan: Plan) -> dict[str, Any]:
    """What a source without fixed input shapes (PyTorch TorchScript, factories) needs to trace
    the model: ``--input-shape`` and the calibration arrays' sample shapes and dtypes."""
    arrays = plan.calibration.arrays
    return {
        "input_shapes": dict(options.input_shapes),
        "sample_shapes": {name: list(x.shape[1:]) for name, x in arrays.items()},
        "sample_dtypes": {name: str(x.dtype) for name, x in arrays.items()},
        # each --input NAME=VALUE with its --input-shape, if one was given
        "fixed_inputs": {name: {**spec, **({"given_shape": options.input_shapes[name]}
                                           if name in options.input_shapes else {})}
                         for name, spec in options.fixed_inputs.items()},
    }


def load_source(source: Source, kind: str, options: PackageOptions, work: Path, progress: Progress,
                hints: dict[str, Any] | None = None) -> LoadedSource:
    model = str(Path(options.model).resolve())
    if kind == "torch_factory":  # file.py:factory: resolve the file, keep the function
        file, _, function = options.model.rpartition(":")
        model = f"{Path(file).resolve()}:{function}"
    runs = source.runs_code.get(kind)
    if runs:  # said before anything loads: the user decides whether they trust the file
        progress.warn(f"loading {options.model} {runs}; package only models from sources you trust "
                      "(README: Security model)")
    with progress.step(f"Loading {kind} model {options.model}"):
        described = worker.call(
            source.prepare,
            what="loading the model",
            timeout=options.step_timeout_s,
            model_path=model,
            kind=kind,
            export_dir=str(work / "saved_model"),
            hints=hints or {},
        )
    return LoadedSource(source, kind, SourceDescription.from_dict(described))


def float_reference(loaded: LoadedSource, data: PreparedData, work: Path, progress: Progress,
                    timeout_s: float | None = None) -> dict[str, np.ndarray]:
    """Every output of the float model on the validation samples, by output name."""
    inputs, outputs = work / "eval_inputs.npz", work / "reference.npz"
    np.savez(inputs, **data.evaluation)
    with progress.step(f"Float reference outputs on {data.evaluation_count} samples"):
        worker.call(loaded.source.float_reference, what="running the float model", timeout=timeout_s,
                    prepared=loaded.described.raw,
                    inputs_npz=str(inputs), output_npz=str(outputs))
    with np.load(outputs) as stored:
        found = {name: stored[name].astype(np.float32) for name in stored.files}
    expected = loaded.described.output_names
    if sorted(found) != sorted(expected):
        raise EdgekitError(f"the float model returned outputs {sorted(found)}, not the described {expected}",
                           hint="report this model: its signature and its outputs disagree")
    return {name: found[name] for name in expected}


def device_profiles(names: list[str] | None) -> tuple[Profile, ...]:
    """The device profiles the package is for (``--profile``; ``auto`` is this machine's;
    default: every profile edgekit knows): formats read what their devices need from them."""
    from ..devices import detect, get_profile, load_profiles

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
        keep_float=tuple(options.keep_float),
        int16_layers=tuple(options.int16_layers),
        allow_float_ops=options.allow_float_ops,
        explain_npy=explain_npy,
        sensitivity_npy=sensitivity_npy,
        timeout_s=options.step_timeout_s,
        options=MappingProxyType({**options.options_for_formats(),
                                  "also_float": wants_float_fallback(options.also_float, options.model)}),
        device_profiles=profiles,
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


def build_formats(planned: list[Planned], context: BuildContext, described: SourceDescription,
                  run: PackagingContext) -> list[FormatOutcome]:
    """Each format built, measured and judged in turn (and searched, by default); with one
    format its build failure is the run's error."""
    progress = run.progress
    steps = StepContext(context.workdir, context.timeout_s, context.layer_names)
    planned, blocked = refused_routes(planned, described.op_types, len(described.inputs), progress)
    outcomes = []
    for format_plan in planned:
        builder = format_plan.builder
        started = time.monotonic()
        try:
            if builder.name in blocked:
                raise blocked[builder.name]
            format_plan, own, built, comparison = build_on_routes(format_plan, context, described, steps, run)
        except EdgekitError as exc:  # one format's failure (converting, or its runtime refusing the result)
            if exc.hint and OTHER_ROUTES in exc.hint:  # the formats to package instead, from the route table
                exc.hint = exc.hint.replace(OTHER_ROUTES, other_routes(format_plan.route, format_plan.others))
            if len(planned) == 1:
                raise
            progress.warn(f"{builder.name} failed: {exc.message}")
            outcomes.append(FormatOutcome(builder.name, error=exc, seconds=time.monotonic() - started))
            shutil.rmtree(run.staged / builder.name, ignore_errors=True)  # its half-made files never ship
            continue
        remedies = format_plan.remedies
        outcome = judge(builder, own, built, comparison, run, remedies, plain_s=time.monotonic() - started,
                        shared_s=run.setup_s / len(planned))
        outcomes.append(replace(outcome, seconds=time.monotonic() - started))
        fallback = float_fallback(builder, outcome.built or built, own, run, remedies)
        # the format's other quantized builds with what the search kept (the same layers in float)
        variants = scheme_variants(builder, outcome.context or own, run, remedies, main_refused=bool(outcome.failures))
        if fallback is not None:  # the build this CPU runs is the one timed against the fallback
            builds = [outcomes[-1], *variants]
            here = this_cpu_build(builder.name, [b.name for b in builds if not b.failures] or [builder.name])
            timed = next((b for b in builds if b.name == here), outcomes[-1])
            timed = timed_against_float(builder, timed, fallback, run)
            outcomes[-1] = timed if timed.name == outcomes[-1].name else outcomes[-1]
            variants = [timed if v.name == timed.name else v for v in variants]
            outcomes.append(fallback)
        outcomes += variants
    if not any(o.built for o in outcomes):
        details = "; ".join(f"{o.name}: {o.error.message}" for o in outcomes if o.error)
        raise EdgekitError(f"no target could be built (every requested format failed: {details})",
                           hint=final_hint(planned, outcomes))
    return outcomes


def final_hint(planned: list[Planned], outcomes: list[FormatOutcome]) -> str:
    """The fix when every requested format failed: a format's own hint that names no other
    format that failed here, else the formats not requested whose routes exist, else a pointer
    to the errors themselves. Never a format that was just tried and failed."""
    failed = {o.name for o in outcomes if o.error}
    for outcome in outcomes:
        hint = outcome.error.hint if outcome.error else ""
        if hint and not any(f"--format {name}" in hint for name in failed - {outcome.name}):
            return hint
    requested = {p.builder.name for p in planned}
    untried = sorted({r.format for p in planned for r in p.others} - requested)
    if untried:
        return (f"package it for {' and '.join(untried)} ({' '.join('--format ' + f for f in untried)}), or fix "
                "the causes named above")
    return "each format's error above names its cause; fix that in the model, or report it with the model"


def ship_now(outcomes: list[FormatOutcome]) -> str:
    """When every INT8 artifact is refused: what can ship now (the float fallbacks that passed,
    and the flag that writes them) and the best plan the search found per format, with its margins."""
    fallbacks = passed_fallbacks(outcomes)
    best = []
    for o in outcomes:
        if o.name in FORMATS and o.failures and o.context is not None:
            margins = ", ".join(f"{f.output or 'artifact'} {f.cause} {f.margin:+.3g}" for f in o.failures)
            best.append(f"{o.name}: {o.context.plan.describe()} ({margins})")
    now = (f"; ship now: the float fallbacks that passed ({', '.join(fallbacks)}): --allow-partial writes them, "
           "every INT8 recorded as refused" if fallbacks else "; no float fallback passed either")
    return now + (f"; best plans found: {'; '.join(best)}" if best else "")


def refused_routes(planned: list[Planned], op_types: Iterable[str], inputs: int,
                   progress: Progress | None = None) -> tuple[list[Planned], dict[str, EdgekitError]]:
    """The formats on the routes that convert a model with these ops and this many inputs: a
    format whose preferred route cannot (``routes.route_limits``) moves to its next route that
    can, said out loud; the errors of those no route converts, by format (raised at once when no
    requested format is left)."""
    ops = list(op_types)
    moved, refused = [], {}
    for p in planned:
        error = route_limits(p.route, ops, inputs, p.others)
        if error is not None and (other := p.next_route(ops, inputs)) is not None:
            why = error.message.split(" (refused", 1)[0]
            if progress is not None:
                progress.say(f"{p.builder.name}: the route {p.route.describe()} cannot convert this model "
                             f"({why.split(' cannot convert ', 1)[-1]}); using {other.describe()} instead")
            p, error = p.on(other, why), None
        moved.append(p)
        if error is not None:
            refused[p.builder.name] = error
    if refused and len(refused) == len(planned):
        raise next(iter(refused.values())) if len(refused) == 1 else RouteError(
            "no requested format's route converts this model: " + "; ".join(e.message for e in refused.values()),
            hint=next(iter(refused.values())).hint)
    return moved, refused


def build_on_routes(format_plan: Planned, context: BuildContext, described: SourceDescription, steps: StepContext,
                    run: PackagingContext) -> tuple[Planned, BuildContext, BuildResult, Measured | None]:
    """The format built on its route; when that route's conversion fails, on the next route that
    converts the model (said out loud and recorded in the artifact's ``details.route``)."""
    while True:
        try:
            own = replace(context, model=model_form(format_plan.route, described.forms, steps))
            built, comparison = build_and_measure(format_plan.builder, own, run)
        except ConversionError as exc:
            other = format_plan.next_route(described.op_types, len(described.inputs))
            if other is None:
                if format_plan.fell_back:
                    tried = "; ".join(f"{f['route']}: {first_line_of(f['because'])}" for f in format_plan.fell_back)
                    exc.message += f" (routes tried before: {tried})"
                raise
            run.progress.warn(f"{format_plan.builder.name}: the route {format_plan.route.describe()} failed "
                              f"({first_line_of(exc.message)}); trying {other.describe()}")
            shutil.rmtree(run.staged / format_plan.builder.name, ignore_errors=True)
            format_plan = format_plan.on(other, exc.message)
            continue
        if format_plan.fell_back:
            route = {"used": format_plan.route.describe(), "instead_of": list(format_plan.fell_back)}
            artifact = built.artifact
            built = replace(built, artifact=artifact.with_details(route=route))
        return format_plan, own, built, comparison


def first_line_of(message: str, limit: int = 200) -> str:
    line = message.strip().splitlines()[0] if message.strip() else message
    return line if len(line) <= limit else line[: limit - 3] + "..."


def this_cpu_build(fmt: str, keys: list[str]) -> str:
    """The key of the build of ``fmt`` this CPU runs among ``keys`` (ONNX's u8s8 on x86 with VNNI)."""
    from ..devices import DeviceFacts
    from ..formats import device_artifacts

    return device_artifacts(set(keys), DeviceFacts.read()).get(fmt, fmt)


def timed_against_float(builder: Builder, outcome: FormatOutcome, fallback: FormatOutcome,
                        run: PackagingContext) -> FormatOutcome:
    """A mixed artifact timed against its float fallback here (``speed.py``), recorded in its
    details; said when it is slower (the runtime then prefers the fallback on this CPU kind)."""
    from .speed import compare, is_mixed

    if outcome.built is None or fallback.built is None or not is_mixed(outcome.built.artifact.precision):
        return outcome
    with run.progress.step(f"Timing {outcome.name} against {fallback.name}"):
        speed = compare(builder, run.staged, outcome.built, fallback.built, run.data.evaluation)
    if speed is None:
        return outcome
    artifact = outcome.built.artifact
    from ..runtime import FASTER_THAN_FLOAT

    verdict = ("faster" if speed["speedup"] >= FASTER_THAN_FLOAT else
               f"{'no faster' if speed['speedup'] >= 1 else 'slower'}: on this CPU kind the runtime prefers the float "
               "fallback")
    run.progress.say(f"{outcome.name} ({artifact.precision}) runs {speed['speedup']:.2f}x its float fallback "
                 f"{fallback.name} here ({speed['cpu']}, 1 thread): {verdict}; other devices were not measured")
    return replace(outcome, built=replace(outcome.built, artifact=artifact.with_details(speed_vs_float=speed)))


def build_and_measure(builder: Builder, context: BuildContext,
                      run: PackagingContext) -> tuple[BuildResult, Measured | None]:
    """One format's artifact, written into the staging tree, and its measurement."""
    with run.progress.step(f"Calibrating and converting {builder.name} on {run.data.calibration_count} "
                           "samples") as update:
        built = builder.build(context, update)
    written = run.staged / built.artifact.path
    if not written.exists() or (written.is_file() and written.stat().st_size == 0):
        raise ConversionError(f"the {builder.name} converter reported success but wrote no artifact at "
                              f"{built.artifact.path}", hint="rerun with --debug and report the log")
    with run.progress.step(f"Validating {builder.name} against the float model"):
        return built, run.measure(built, builder, context)


def float_fallback(builder: Builder, built: BuildResult, context: BuildContext, run: PackagingContext,
                   remedies: Remedies = Remedies()) -> FormatOutcome | None:
    """The format's float fallback, validated like the INT8 artifact; one that fails a gate is
    left out of the package (it is optional) with a warning saying why."""
    fallback = fallback_result(builder, built, run.staged)
    if fallback is None:
        return None
    key = fallback.artifact.key
    with run.progress.step(f"Validating {key} (float fallback) against the float model"):
        measured = run.measure(fallback, builder, context, quantized=False)
    failures = run.check(key, measured, remedies)
    if failures:
        run.progress.warn(f"{key} (float fallback) left out: it failed validation ({failures[0].what})")
        discard(run.staged / fallback.artifact.path)
        return None
    return FormatOutcome(key, built=fallback, comparison=measured, context=context, remedies=remedies)


def scheme_variants(builder: Builder, context: BuildContext, run: PackagingContext,
                    remedies: Remedies = Remedies(), main_refused: bool = False) -> list[FormatOutcome]:
    """The format's other quantized builds (an INT8 scheme for other CPUs), each validated
    like the main one. They are optional: one that fails to build, or fails a gate (unless
    --allow-accuracy-drop keeps it, recorded as failed, as it keeps the main artifact), is left
    out with a warning; devices that would have used it run the main artifact."""
    outcomes = []
    for variant in builder.variants(context):
        key = f"{builder.name}-{variant.name}"
        variant_context = variant.context(context)
        try:
            with run.progress.step(f"Calibrating and converting {key} ({variant.scheme})"):
                built = builder.build(variant_context)
            with run.progress.step(f"Validating {key} against the float model"):
                measured = run.measure(built, builder, variant_context)
        except EdgekitError as exc:
            run.progress.warn(f"{key} left out: {exc.message}")
            continue
        failures = run.check(key, measured, remedies)
        if failures and not run.options.allow_accuracy_drop:
            instead = (f"the main {builder.name} build was refused too" if main_refused
                       else f"devices that would use it run {builder.name}")
            run.progress.warn(f"{key} left out: it failed validation ({failures[0].what}); {instead}")
            discard(run.staged / built.artifact.path)
            continue
        outcomes.append(FormatOutcome(key, built=built, comparison=measured, context=variant_context,
                                      failures=tuple(failures), remedies=remedies))
    return outcomes


def judge(builder: Builder, context: BuildContext, built: BuildResult, comparison: Measured | None,
          run: PackagingContext, remedies: Remedies = Remedies(), plain_s: float = 0.0,
          shared_s: float = 0.0) -> FormatOutcome:
    """The gates one artifact fails, after the search (unless --no-auto-fix); ``plain_s``: what
    building and measuring it took, ``shared_s``: its share of the steps before any format (the
    search's budget is a multiple of both)."""
    if comparison is None:
        return FormatOutcome(builder.name, built=built, context=context, remedies=remedies)
    candidate = Candidate(context, built, comparison, run.check(builder.name, comparison, remedies))
    attempts: list[dict[str, Any]] = []
    if candidate.failures and run.options.auto_fix and run.data.unrepresentative:
        run.progress.warn(f"{builder.name}: no search: the held-out data lie far outside the calibration data (said "
                      "above), so every range the calibration gave is suspect; keeping layers in float would hide "
                      "that, not fix it: calibrate on data like what the model will see")
    elif candidate.failures and run.options.auto_fix:
        candidate, attempts = search(builder, candidate, run, remedies, plain_s, shared_s)
    note = saturation_note(builder.name, candidate.measured, remedies)
    if note:
        run.progress.warn(note)
    if candidate.context.plan:  # the plan built, as a file a later run takes again (--precision-plan)
        artifact = candidate.built.artifact.with_details(precision_plan=candidate.context.plan.to_dict())
        candidate = replace(candidate, built=replace(candidate.built, artifact=artifact))
    return FormatOutcome(builder.name, built=candidate.built, comparison=candidate.measured,
                         context=candidate.context, failures=tuple(candidate.failures), fixes=tuple(attempts),
                         remedies=remedies)


def assemble(plan: Plan, loaded: LoadedSource, run: PackagingContext, builders: list[Builder],
             context: BuildContext, outcomes: list[FormatOutcome]) -> PackageResult:
    """Manifest, gates, signature and publication of the staged package."""
    options, data, reference, staged, progress = run.options, run.data, run.reference, run.staged, run.progress
    kinds = run.judging.kinds
    refused = refused_formats(outcomes, options.allow_accuracy_drop, options.allow_partial)  # a partial package
    built = [o for o in outcomes if o.built is not None and not any(o is r for r in refused)]
    measured = {o.name: o.comparison for o in built}
    failed = [{"format": o.name, "target": o.name, "error": o.error.message, "hint": o.error.hint}
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
    validation = validation.with_auto_fix({o.name: list(o.fixes) for o in built if o.fixes})
    methods = {b.name: b.range_method(next((o.context for o in built if o.name == b.name and o.context),
                                                 context)) for b in builders}
    manifest = make_manifest(plan.name, options, loaded.kind, loaded.described, data,
                             [o.built.artifact for o in built], validation, failed, methods)
    failed_gates = [f for o in built for f in o.failures]
    if len(outcomes) > 1 or any(o.fixes for o in outcomes):
        for line in summary_lines(outcomes, options.allow_accuracy_drop, refused, data.evaluation_count):
            progress.say(line)
    if failed_gates and not options.allow_accuracy_drop:
        tried = {o.name: {str(a.get("change")) for a in o.fixes if not a.get("stage")} for o in built} \
            if options.auto_fix else None
        searched = {o.name: sum(1 for a in o.fixes if a.get("stage") == "layer search") for o in built}
        passed = [o.name for o in built if o.name in FORMATS and not o.failures and o.comparison is not None]
        hint = failure_hint(tried, searched, passed, any(f.fixes for f in failed_gates))
        raise AccuracyDropError(failure_message(failed_gates, tried),
                                hint=hint + ship_now(outcomes) if not passed else hint)
    for f in failed_gates:
        progress.warn(f"{f.format} failed validation (kept because of --allow-accuracy-drop): {f.what}")
    write_package_files(staged, manifest, data.labels, options.sign_key)
    publish_package(staged, plan.destination, options.force)
    summaries = {name: m.summary if m is not None else None for name, m in measured.items()}
    return PackageResult(plan.destination, manifest, plan.archive, summaries, progress.warnings, failed)


__all__ = ["PackageOptions", "PackageResult", "build_package", "package", "partial_error"]
