"""The route table: (source kind, format) -> the steps that convert the model, declared once.

Sources say which forms each of their kinds provides (``Source.provides``), formats which forms
they convert from and which generic options each of those routes honours (``Format.accepts``),
and the conversion steps (``edgekit.steps``) turn one form into another. A route is the first form a format
accepts that the source provides, itself or through one step. Builders receive the form the
route produced (``BuildContext.model``) and never ask what the user's file was; the packager
asks this module, never a format, which options a route can honour, and refuses one it cannot
before anything loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import EdgekitError, RouteError
from ..conversion.forms import ModelForm
from ..formats.base import EXPLAIN
from ..formats.plan import FLAGS, FLOAT, INT16
from ..steps import STEPS, Conversion, StepContext

if TYPE_CHECKING:
    from ..formats import Format
    from ..sources import Source

# options that change what a converter does inside the graph; a route says which it honours
ROUTE_OPTIONS = {FLOAT: FLAGS[FLOAT], INT16: FLAGS[INT16], EXPLAIN: "--explain"}


class Route(NamedTuple):
    source_kind: str
    format: str
    form: str  # the form the format's builder receives
    steps: tuple[Conversion, ...]
    honours: tuple[str, ...]  # ROUTE_OPTIONS keys the format honours on this form
    cannot: tuple[str, ...] = ()  # op types its converter cannot convert (Accepts.cannot)
    max_inputs: int | None = None  # the most model inputs its converter takes (Accepts.max_inputs)
    names_ops: bool = False  # its converter keeps a traced op of a forward in float by name (Accepts.names_ops)
    # the layer names a plan takes on this route (``LayerNames.resolve``'s kind): its converter's, or the
    # names of the last step that renames layers (the ONNX -> PyTorch rebuild's submodules are ONNX nodes)
    names: str = ""

    def describe(self) -> str:
        return " -> ".join([self.source_kind, *(f"{s.name} -> {s.produces}" for s in self.steps)]
                           + ([] if self.steps else [self.form]) + [self.format])


# --- the table ------------------------------------------------------------------------------


def route(source: Source, kind: str, fmt: Format) -> Route | None:
    """How ``fmt`` is built from a ``kind`` model of ``source`` (its preferred route); None when none exists."""
    found = routes(source, kind, fmt)
    return found[0] if found else None


def routes(source: Source, kind: str, fmt: Format) -> list[Route]:
    """Every route from a ``kind`` model of ``source`` to ``fmt``, preferred first: the forms the
    format accepts in its order, each as the source provides it, then through one step. The
    packager builds on the first and falls back to the next when the first cannot convert the
    model (an op its converter lacks, or a conversion failure): PyTorch's LSTM reaches TFLite
    through ONNX when litert-torch has no LSTM. Only where no such route exists, two steps
    (a Keras model reaches a format that takes PyTorch alone through tf2onnx, then the ONNX ->
    PyTorch rebuild), preferred only where no shorter route exists and otherwise the last
    fallback: each step is a conversion that can lose the model, so no format builds on a longer
    route while a shorter one converts it, yet a converter failure on the short one (TF's
    converter on a masked bidirectional GRU) still leaves the long one."""
    provided = source.provides.get(kind, ())
    found: list[Route] = []
    for accepted in fmt.accepts:
        if accepted.form in provided:
            found.append(_route(kind, fmt, accepted, ()))
        step = next((c for c in STEPS.values() if c.produces == accepted.form and c.consumes in provided), None)
        if step is not None:
            found.append(_route(kind, fmt, accepted, (step,)))
    for accepted in fmt.accepts:
        for last in (c for c in STEPS.values() if c.produces == accepted.form):
            first = next((c for c in STEPS.values() if c.produces == last.consumes and c.consumes in provided), None)
            if first is not None and first.consumes != accepted.form and last.consumes not in provided:
                found.append(_route(kind, fmt, accepted, (first, last)))
                break
    return found


def _route(kind: str, fmt: Format, accepted: Any, steps: tuple[Conversion, ...]) -> Route:
    """A route through ``steps``: what it cannot convert is what any step cannot, and what the
    format's converter cannot unless a step rewrites it away."""
    rewritten = {op for step in steps for op in step.rewrites}
    cannot = tuple(dict.fromkeys([*(op for step in steps for op in step.cannot),
                                  *(op for op in accepted.cannot if op not in rewritten)]))
    names = next((step.names for step in reversed(steps) if step.names), accepted.name_kind)
    return Route(kind, fmt.name, accepted.form, steps, tuple(accepted.honours), cannot, accepted.max_inputs,
                 accepted.names_ops, names)


def fallback_route(tried: Route, alternatives: Iterable[Route], op_types: Iterable[str] = (),
                   inputs: int = 0) -> Route | None:
    """The next route after ``tried`` that converts a model with these ops and inputs, or None."""
    ops = set(op_types)
    for candidate in alternatives:
        if candidate == tried or candidate.steps == tried.steps and candidate.form == tried.form:
            continue
        if set(candidate.cannot) & ops or (candidate.max_inputs is not None and inputs > candidate.max_inputs):
            continue
        return candidate
    return None


def other_routes(route: Route, others: Iterable[Route]) -> str:
    """What to package instead when ``route``'s converter fails: the formats whose routes from
    this model share none of its steps (``errors.OTHER_ROUTES`` in a hint becomes this)."""
    steps = {s.name for s in route.steps}
    able = [r for r in others if r.format != route.format and not steps & {s.name for s in r.steps}]
    if not able:
        return "no other route converts this model (edgekit routes)"
    return (f"package it for {' and '.join(r.format for r in able)} "
            f"({' '.join('--format ' + r.format for r in able)})")


def route_limits(route: Route, op_types: Iterable[str], inputs: int, others: Iterable[Route] = ()) -> RouteError | None:
    """Why the route cannot convert this model, named with the routes that can, or None: an op its
    converter has no conversion for (a recurrent layer on litert-torch's route used to convert for
    minutes, then fail), or more inputs than its converter takes. Known from the model's op types
    and inputs: before loading where the source reads them cheaply (``Source.peek``), else once it
    is described, before any conversion."""
    blocked = sorted(set(route.cannot) & set(op_types))
    too_many = route.max_inputs is not None and inputs > route.max_inputs
    if not blocked and not too_many:
        return None
    able = [r for r in others if r.format != route.format and not set(r.cannot) & set(blocked)
            and (r.max_inputs is None or inputs <= r.max_inputs)]
    instead = (f"package it for {' and '.join(r.format for r in able)} (--format "
               f"{' --format '.join(r.format for r in able)})" if able
               else "package it for a format whose converter takes it (edgekit routes)")
    from ..conversion.forms import QUANTIZED_OPS

    if blocked and set(blocked) <= set(QUANTIZED_OPS):
        why = (f"cannot keep a quantized model's learned ranges ({', '.join(blocked)}): it rebuilds a float model, "
               "which would be quantized a second time with ranges chosen again")
    elif blocked:
        why = f"cannot convert {', '.join(blocked)}: its converter has no {'/'.join(blocked)}"
    else:
        why = (f"takes models with at most {route.max_inputs} input{'s' if route.max_inputs != 1 else ''}; this "
               f"one has {inputs}")
    return RouteError(f"the route {route.describe()} {why} (refused before converting; {instead})", hint=instead)


def table(sources: Iterable[Source] | None = None, formats: Iterable[Format] | None = None) -> list[Route]:
    """Every route, source kind by source kind (the docs' routes table is this)."""
    from ..formats import FORMATS
    from ..sources import SOURCES

    return [r for s in (SOURCES.values() if sources is None else sources) for kind in s.provides
            for f in (FORMATS.values() if formats is None else formats) if (r := route(s, kind, f)) is not None]


def plan(source: Source, kind: str, formats: Iterable[Format], asked: Mapping[str, bool]) -> dict[str, Route]:
    """The route of every requested format, or one clear error before anything loads: a format
    no route reaches, or an option (``asked``: ROUTE_OPTIONS key -> given) a route cannot honour,
    named with the routes that can."""
    formats = list(formats)
    found = {f.name: route(source, kind, f) for f in formats}
    missing = [name for name, r in found.items() if r is None]
    if missing:
        reachable = [name for name, r in found.items() if r is not None]
        raise RouteError(f"no route converts a {kind} model to {', '.join(missing)}",
                           hint=("package it for " + ", ".join(reachable)) if reachable
                           else "export the model to ONNX and package that")
    routes = {name: r for name, r in found.items() if r is not None}
    for option, given in asked.items():
        if not given:
            continue
        unable = [r for r in routes.values() if option not in r.honours]
        if unable:
            able = [r for f in _all_formats() if (r := route(source, kind, f)) is not None and option in r.honours]
            flag = ROUTE_OPTIONS[option]
            raise RouteError(
                f"{flag} is not honoured by the route{'s' if len(unable) > 1 else ''} "
                f"{'; '.join(r.describe() for r in unable)}: the converter there has no per-layer control",
                hint=(f"routes from this model that honour it: {'; '.join(r.describe() for r in able)}; package "
                      f"those with {flag} ({' '.join('--format ' + r.format for r in able)}) and the others "
                      f"without it") if able else f"leave out {flag}: no route from a {kind} model honours it",
            )
    return routes


def _all_formats() -> list[Format]:
    from ..formats import FORMATS

    return list(FORMATS.values())


def model_form(route: Route, provided: Mapping[str, ModelForm], context: StepContext) -> ModelForm:
    """The form ``route``'s builder converts from: from the forms the source provided
    (``SourceDescription.forms``), through the route's steps."""
    start = route.steps[0].consumes if route.steps else route.form
    if start not in provided:
        raise EdgekitError(f"the {route.source_kind} source did not provide the {start} its route needs",
                           hint="report this model: the source's description and its declared forms disagree")
    form = provided[start]
    for step in route.steps:
        form = step.run(form, context)
    return form
