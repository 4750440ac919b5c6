"""One format's part of ``edgekit package``: its route (falling back to the next when the preferred
one cannot convert the model), its build and measurement, the verdict and the search when a gate
fails, the float fallback, its scheme variants and the mixed build's speed against float; then
what to say when every INT8 build is refused. ``packaging/__init__.py`` conducts the stages and
calls ``build_formats`` once for every planned format."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..conversion import deadline
from ..errors import OTHER_ROUTES, ConversionError, EdgekitError, RouteError, TimeShareError
from ..formats import FORMATS, Builder, BuildContext, BuildResult
from ..formats.building import QuantGrid
from ..progress import Progress
from ..routing.routes import Route, fallback_route, model_form, other_routes, route_limits
from ..sources.description import SourceDescription
from ..steps import StepContext
from .context import PackagingContext
from .fallback import discard, fallback_result
from .gates import GateFailure, Remedies, saturation_note
from .partial import passed_fallbacks
from .plan_read_back import plan_record, source_plan
from .search import Candidate, search
from .search.mode import SearchMode
from .search.shared_plan import Simulated, for_format, simulated_plan
from .search.trial import Trial
from .validate import Measured


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
        remedies = self.remedies._replace(layers=tuple(other.honours))
        return replace(self, route=other, remedies=remedies,
                       fell_back=(*self.fell_back, {"route": self.route.describe(), "because": because}))

    def next_route(self, op_types: Iterable[str] = (), inputs: int = 0) -> Route | None:
        """The next route to this format not tried yet that converts such a model, or None."""
        tried = {f["route"] for f in self.fell_back} | {self.route.describe()}
        return fallback_route(self.route, [r for r in self.alternatives if r.describe() not in tried], op_types,
                              inputs)


@dataclass(frozen=True)
class FormatOutcome:
    """One format's result: built (and measured, with the gates it fails), or failed with the reason."""

    name: str
    built: BuildResult | None = None
    comparison: Measured | None = None
    error: EdgekitError | None = None
    context: BuildContext | None = None  # what built it (after --auto-fix: the fixes kept)
    failures: tuple[GateFailure, ...] = ()
    fixes: tuple[Trial, ...] = ()  # the search's tries (the manifest's auto_fix records)
    remedies: Remedies = Remedies()  # what its format and route can do about failed gates
    seconds: float = 0.0  # building, measuring and searching it


def build_formats(planned: list[Planned], context: BuildContext, described: SourceDescription,
                  run: PackagingContext) -> list[FormatOutcome]:
    """Each format built, measured and judged in turn (and searched, by default); with one
    format its build failure is the run's error."""
    progress = run.progress
    steps = StepContext(context.workdir, context.timeout_s, context.layer_names)
    planned, blocked = refused_routes(planned, described.op_types, len(described.inputs), progress)
    blocked.update(unable_to_keep_ranges(planned, described))
    simulated = simulated_plan([p for p in planned if p.builder.name not in blocked], context, described, steps, run)
    if simulated is not None and simulated.costs:  # every format's search weighs layers by their compute
        run = replace(run, layer_costs=dict(simulated.costs), layer_links=simulated.links)
    outcomes: list[FormatOutcome] = []
    below = time_limit_below_floor(run.options.time_limit_s, len(planned))
    if below:
        progress.warn(below)
    began = time.monotonic() - run.setup_s  # about when the command started
    for done, format_plan in enumerate(planned):
        share = format_share(run.options.time_limit_s, time.monotonic() - began, len(planned) - done) \
            if len(planned) > 1 else None
        started = time.monotonic()
        try:
            with deadline.within(share, format_plan.builder.name, f"what --time-limit {run.options.time_limit_s:g} s "
                                 f"left, less {MIN_SHARE_S:g} s for each of the {len(planned) - done - 1} formats "
                                 "after it"):
                outcomes += one_format(format_plan, context, described, steps, run, simulated, blocked, len(planned))
        except TimeShareError as exc:  # ended at its share: recorded as not built, the next format starts
            progress.warn(f"{format_plan.builder.name} failed: {exc.message}")
            outcomes = [o for o in outcomes if o.name != format_plan.builder.name
                        and not o.name.startswith(f"{format_plan.builder.name}-")]
            outcomes.append(FormatOutcome(format_plan.builder.name, error=exc, seconds=time.monotonic() - started))
            shutil.rmtree(run.staged / format_plan.builder.name, ignore_errors=True)
    if not any(o.built for o in outcomes):
        details = "; ".join(f"{o.name}: {o.error.message}" for o in outcomes if o.error)
        raise EdgekitError(f"no target could be built (every requested format failed: {details})",
                           hint=final_hint(planned, outcomes))
    return outcomes


# with several formats, what --time-limit keeps for each format still to go (a format never starts ended)
MIN_SHARE_S = 60.0


def time_limit_below_floor(limit_s: float, formats: int) -> str:
    """What to say when ``--time-limit`` cannot be honoured: less than ``MIN_SHARE_S`` per format
    (each is still given that much); "" otherwise."""
    floor = MIN_SHARE_S * formats
    if formats < 2 or not 0 < limit_s < floor:
        return ""
    return (f"--time-limit {limit_s:g} s is less than {MIN_SHARE_S:g} s for each of the {formats} formats: each "
            f"format is still given {MIN_SHARE_S:g} s (a build needs that much), so the command may take up to "
            f"{floor:g} s (give --time-limit {floor:g} or more, or fewer formats)")


def format_share(limit_s: float, elapsed_s: float, formats_left: int) -> float | None:
    """The next format's bound: what ``--time-limit`` leaves, less ``MIN_SHARE_S`` for each format
    after it (at least ``MIN_SHARE_S``); None for one format alone, or with no limit (0). An outer
    bound, not a share: a format's work is counted in builds (its search's budget), so on a quiet
    or a loaded machine it makes the same tries; only a command that would run past the limit is
    cut, and that is said."""
    if not limit_s or formats_left < 1:
        return None
    return max(MIN_SHARE_S, limit_s - elapsed_s - MIN_SHARE_S * (formats_left - 1))


def one_format(format_plan: Planned, context: BuildContext, described: SourceDescription, steps: StepContext,
               run: PackagingContext, simulated: Simulated | None, blocked: dict[str, EdgekitError],
               formats: int) -> list[FormatOutcome]:
    """One format's outcomes: its artifact (built with the simulated plan first, where it applies),
    judged and searched, then its float fallback and scheme variants; a failure is its outcome
    (with one format, the run's error)."""
    builder, progress = format_plan.builder, run.progress
    started = time.monotonic()
    try:
        if builder.name in blocked:
            raise blocked[builder.name]
        # the shared plan, where it applies, in the names of this route's form
        first, unnamed = for_format(simulated, context, format_plan.route, builder.grid)
        if simulated is not None:  # the plan is recorded in the source's names
            run = replace(run, layer_names=simulated.names)
        if simulated is not None and simulated.costs:  # its own search weighs layers in its names too
            costs, links = simulated.costs_for(format_plan.route)
            run = replace(run, layer_costs=costs, layer_links=links)
        if unnamed:
            progress.say(f"{builder.name}: the simulated plan's {', '.join(unnamed)} belong to no PyTorch module this "
                         "route can name (ops written in a forward): built without them, and its own search, on its "
                         "usual budget, goes on from there if that misses")
        # where the plan its grid's search added to does not build (a layer this route cannot
        # name), the shared plan; where that does not build either, plain INT8 and its own search
        attempts = [first]
        for other in (for_format(simulated, context, format_plan.route)[0], context) if first is not context else ():
            if all(other.plan != tried.plan for tried in attempts):
                attempts.append(other)
        for number, attempt in enumerate(attempts):
            try:
                format_plan, own, built, comparison = build_on_routes(format_plan, attempt, described, steps, run,
                                                                      simulated)
                first = attempt
                break
            except EdgekitError as exc:
                if attempt is attempts[-1] or isinstance(exc, TimeShareError):
                    raise
                instead = "plain INT8 and searching on its own" if attempts[number + 1] is context else \
                    f"the shared plan ({source_plan(attempts[number + 1].plan, run.layer_names).describe()})"
                shown = source_plan(attempt.plan, run.layer_names).describe()
                progress.warn(f"{builder.name}: the simulated plan ({shown}) did not build "
                              f"({first_line_of(exc.message)}); building {instead}")
                shutil.rmtree(run.staged / builder.name, ignore_errors=True)
    except EdgekitError as exc:  # one format's failure (converting, or its runtime refusing the result)
        if isinstance(exc, TimeShareError):
            raise
        if exc.hint and OTHER_ROUTES in exc.hint:  # the formats to package instead, from the route table
            exc.hint = exc.hint.replace(OTHER_ROUTES, other_routes(format_plan.route, format_plan.others))
        if formats == 1:
            raise
        progress.warn(f"{builder.name} failed: {exc.message}")
        shutil.rmtree(run.staged / builder.name, ignore_errors=True)  # its half-made files never ship
        return [FormatOutcome(builder.name, error=exc, seconds=time.monotonic() - started)]
    remedies = format_plan.remedies
    # the plan came from the simulation: the shared one (or its grid's), or the equalized graph's,
    # which the route placed on the equalized form it converts (``Simulated.equalized_context``)
    planned = first is not context or (simulated is not None and simulated.builds_equalized(own.model)
                                       and own.plan != context.plan)
    whole = planned and not unnamed and simulated is not None  # a miss continues with a few real tries
    mode = (SearchMode.after_simulation if whole else SearchMode.own)(remedies, time.monotonic() - started,
                                                                       run.setup_s / formats)
    prediction = Prediction(simulated if whole else None, predicted_plain(simulated, planned, own.model, builder.grid),
                            builder.grid if first is attempts[0] else None)
    outcome = judge(builder, FirstBuild(own, built, comparison), run, mode, prediction)
    outcomes = [replace(outcome, seconds=time.monotonic() - started)]
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
    if simulated is not None and simulated.builds_equalized(own.model):
        return [marked_equalized(o, simulated) for o in outcomes + variants]  # built from the equalized graph
    return outcomes + variants


def marked_equalized(outcome: FormatOutcome, simulated: Simulated) -> FormatOutcome:
    """An outcome built from the equalized graph, its artifact's ``details.equalized`` saying so."""
    if outcome.built is None:
        return outcome
    equalized = {"pairs": len(simulated.equalized["pairs"]), "largest_factor": simulated.equalized["largest_factor"],
                 "how": "cross-layer equalization of the float model (the float function unchanged)"}
    return replace(outcome, built=replace(outcome.built, artifact=outcome.built.artifact.with_details(
        equalized=equalized)))


def unable_to_keep_ranges(planned: list[Planned], described: SourceDescription) -> dict[str, EdgekitError]:
    """A quantized source's formats that cannot build it with its learned ranges, each refused with
    its route and the formats that can (their ``Format.keeps_learned_ranges``)."""
    from ..formats import FORMATS

    if not described.precision.learned:
        return {}
    keeps = described.precision.scheme.get("format")
    able = [name for name, fmt in FORMATS.items() if keeps in fmt.keeps_learned_ranges]
    instead = f"package it for {' and '.join(able)} ({' '.join('--format ' + name for name in able)})"
    return {p.builder.name: RouteError(
        f"the route {p.route.describe()} cannot keep a quantized model's learned ranges: it would quantize the model "
        f"a second time with ranges chosen again (refused before converting; {instead})", hint=instead)
        for p in planned if keeps not in FORMATS[p.builder.name].keeps_learned_ranges}


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
    built = [o.name for o in outcomes if o.built is not None and o.name not in FORMATS]
    now = (f"; ship now: the float fallbacks that passed ({', '.join(fallbacks)}): --allow-partial writes them, "
           "every INT8 recorded as refused" if fallbacks else "; no float fallback passed either" if built
           else "; no float fallback was built (--no-also-float, or a quantized source, which has none)")
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
                    run: PackagingContext, simulated: Simulated | None = None,
                    ) -> tuple[Planned, BuildContext, BuildResult, Measured | None]:
    """The format built on its route; when that route's conversion fails, on the next route that
    converts the model (said out loud and recorded in the artifact's ``details.route``). Where the
    simulation repaired plain INT8 by equalizing the graph this route converts, the route converts
    the equalized graph (``Simulated.model_for``; recorded in ``details.equalized``)."""
    while True:
        try:
            form = model_form(format_plan.route, described.forms, steps)
            own = replace(context, model=simulated.model_for(form) if simulated is not None else form)
            if own.model is not form and simulated is not None:  # the equalized graph, with its own plan
                own = simulated.equalized_context(own, run.options.plan, format_plan.route, format_plan.builder.grid)
            built, comparison = build_and_measure(format_plan.builder, own, run)
        except ConversionError as exc:
            if isinstance(exc, TimeShareError):  # the format's time is up: not a reason to try another route
                raise
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
    from ..machine.facts import DeviceFacts
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
    from ..device.runtime import FASTER_THAN_FLOAT

    verdict = ("faster" if speed["speedup"] >= FASTER_THAN_FLOAT else
               f"{'no faster' if speed['speedup'] >= 1 else 'slower'}: on this CPU kind the runtime prefers another "
               "format's INT8 where the package has one, then this float fallback")
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
                built = with_plan_record(builder, builder.build(variant_context), variant_context, run)
            with run.progress.step(f"Validating {key} against the float model"):
                measured = run.measure(built, builder, variant_context)
        except TimeShareError:
            raise
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


class FirstBuild(NamedTuple):
    """A format's first artifact, as built and measured (``comparison`` None: not measurable here)."""

    context: BuildContext
    built: BuildResult
    comparison: Measured | None


class Prediction(NamedTuple):
    """What the simulation said of a format's first build. ``built_whole``: the shared plan it was
    built with, whole (a miss continues from it with a few real tries); ``passes_plain``: the
    simulation predicted this plain build passes; either way the gap is recorded. ``grid``: the
    format grid whose outcome was built (None: the shared plan, where its grid's did not build)."""

    built_whole: Simulated | None = None
    passes_plain: Simulated | None = None
    grid: QuantGrid | None = None

    @property
    def simulated(self) -> Simulated | None:
        return self.built_whole or self.passes_plain


def predicted_plain(simulated: Simulated | None, planned: bool, model: object,
                    grid: QuantGrid | None) -> Simulated | None:
    """``simulated`` where the format built plain INT8 of ``model`` (its form, of ``grid``) and the
    simulation predicted that passes: the prediction's gap is on record too."""
    return simulated if simulated is not None and not planned and simulated.predicts(model, grid) else None


def judge(builder: Builder, first: FirstBuild, run: PackagingContext, mode: SearchMode,
          prediction: Prediction = Prediction()) -> FormatOutcome:
    """The gates one artifact fails, after the search ``mode`` chose (unless --no-auto-fix: its
    remedies, and what the first build took, which bounds its budget), with the simulation's
    prediction of it recorded beside the real margins."""
    context, built, comparison = first
    remedies = mode.remedies
    if comparison is None:
        return FormatOutcome(builder.name, built=built, context=context, remedies=remedies)
    candidate = Candidate(context, built, comparison, run.check(builder.name, comparison, remedies))
    from .search.trial import margins

    first_build = margins(candidate)  # the build the simulation predicted, before any search of its own
    first_float = list(built.artifact.about.precision.get("float_layers") or [])
    attempts: tuple[Trial, ...] = ()
    if candidate.failures and run.options.auto_fix and run.data.unrepresentative:
        run.progress.warn(f"{builder.name}: no search: the held-out data lie far outside the calibration data (said "
                          "above), so every range the calibration gave is suspect; keeping layers in float would hide "
                          "that, not fix it: calibrate on data like what the model will see")
    elif candidate.failures and run.options.auto_fix and context.source_precision.learned:
        run.progress.warn(f"{builder.name}: no search: the source is already quantized and its learned ranges are "
                          "kept; a per-layer move or another scheme would quantize it again (train it with the failing "
                          "layers excluded from quantization, or package the float model)")
    elif candidate.failures and run.options.auto_fix:
        if prediction.built_whole is not None:
            run.progress.say(f"{builder.name}: the simulated plan misses on its artifact ({candidate.failures[0].what}); "
                             f"continuing from it with at most {run.search.real_tries_after_simulation} real tries")
        candidate, attempts = search(builder, candidate, run, mode)
    simulated = prediction.simulated
    if simulated is not None:  # the simulation's margins beside the artifact's: the gap between them
        artifact = candidate.built.artifact.with_details(
            simulation=simulated.record(first_build, shipped=margins(candidate), grid=prediction.grid,
                                        equalized=simulated.builds_equalized(context.model), built_float=first_float))
        candidate = replace(candidate, built=replace(candidate.built, artifact=artifact))
    note = saturation_note(builder.name, candidate.measured, remedies)
    if note:
        run.progress.warn(note)
    candidate = replace(candidate, built=with_plan_record(builder, candidate.built, candidate.context, run))
    return FormatOutcome(builder.name, built=candidate.built, comparison=candidate.measured,
                         context=candidate.context, failures=tuple(candidate.failures), fixes=attempts,
                         remedies=remedies)


def with_plan_record(builder: Builder, built: BuildResult, context: BuildContext, run: PackagingContext) -> BuildResult:
    """``built`` with the plan it was built with recorded (``details.precision_plan``, read back from
    the artifact: a file a later run takes again with --precision-plan); unchanged without a plan.
    The main artifact and each scheme variant built on its plan record it alike."""
    if not context.plan:
        return built
    artifact = built.artifact.with_details(precision_plan=plan_record(builder, built.artifact, context.plan,
                                                                      run.layer_names, run.progress))
    return replace(built, artifact=artifact)
