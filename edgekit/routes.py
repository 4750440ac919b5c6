"""The route table: (source kind, format) -> the steps that convert the model, declared once.

Sources say which forms each of their kinds provides (``Source.provides``), formats which forms
they convert from and which generic options each of those routes honours (``Format.accepts``),
and the conversion steps below turn one form into another. A route is the first form a format
accepts that the source provides, itself or through one step. Builders receive the form the
route produced (``BuildContext.model``) and never ask what the user's file was; the packager
asks this module, never a format, which options a route can honour, and refuses one it cannot
before anything loads.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from . import forms
from .errors import ConversionError, EdgekitError, RouteError, UnsupportedOpError
from .forms import ModelForm

if TYPE_CHECKING:
    from .formats import Format
    from .sources import Source

# options that change what a converter does inside the graph; a route says which it honours
ROUTE_OPTIONS = {"keep_float": "--keep-float", "int16": "--int16-activations", "explain": "--explain"}


class StepContext(NamedTuple):
    """What a conversion step reads: scratch space, the time it may take, layer names for errors."""

    workdir: Path
    timeout_s: float | None = None
    layer_names: tuple[str, ...] = ()


class Conversion(NamedTuple):
    """One step from a form to another (run in a child process or as a tool, never in the parent)."""

    name: str
    consumes: str
    produces: str
    run: Callable[[ModelForm, StepContext], ModelForm]
    cannot: tuple[str, ...] = ()  # ONNX op types it has no conversion for (refused before it runs)


class Route(NamedTuple):
    source_kind: str
    format: str
    form: str  # the form the format's builder receives
    steps: tuple[Conversion, ...]
    honours: tuple[str, ...]  # ROUTE_OPTIONS keys the format honours on this form
    cannot: tuple[str, ...] = ()  # op types its converter cannot convert (Accepts.cannot)

    def describe(self) -> str:
        return " -> ".join([self.source_kind, *(f"{s.name} -> {s.produces}" for s in self.steps)]
                           + ([] if self.steps else [self.form]) + [self.format])


# --- conversion steps -----------------------------------------------------------------------

TF2ONNX_OPSET = 17  # what tf2onnx writes (the ONNX format quantizes opset 13 and later)


def tf2onnx(form: ModelForm, context: StepContext) -> ModelForm:
    """SavedModel -> float ONNX with tf2onnx in its own process, once per packaging run (the
    result and tf2onnx's version stay in the workdir)."""
    from . import worker

    output = Path(context.workdir) / "model.float.onnx"
    version_file = output.with_suffix(".tf2onnx-version")
    if not (output.exists() and version_file.exists()):
        command = [
            sys.executable, "-m", "tf2onnx.convert", "--saved-model", form.path, "--tag", "serve",
            "--signature_def", "serving_default", "--opset", str(TF2ONNX_OPSET), "--output", str(output),
        ]
        proc = worker.run_tool(command, "tf2onnx conversion", context.timeout_s)
        # tf2onnx exits 0 even when it leaves ops it cannot convert in the graph: read its log too
        if proc.returncode != 0 or not output.exists() or "Unsupported ops:" in proc.stderr:
            raise explain_tf2onnx_failure(proc.stderr, list(context.layer_names))
        match = re.search(r"tf2onnx=([\w.]+)", proc.stderr)
        version_file.write_text(match.group(1) if match else "")
    version = version_file.read_text()
    return ModelForm(forms.ONNX_GRAPH, str(output), via=f"tf2onnx {version}".strip())


def explain_tf2onnx_failure(log: str, layer_names: list[str] | None = None) -> EdgekitError:
    from .formats.building import layer_of

    if "No module named tf2onnx" in log:
        return ConversionError("tf2onnx is not installed", hint="pip install 'edgekit[package]'")
    ops = re.findall(r"Tensorflow op \[([^\]]+)\] is not supported", log)
    counted = re.search(r"Unsupported ops: Counter\(\{(.*?)\}\)", log)
    if ops or counted:
        names = sorted({op.split(": ")[-1] for op in ops} | set(re.findall(r"'(\w+)'", counted.group(1) if counted else "")))
        paths = [op.split(": ")[0] for op in ops]
        layers = sorted({layer_of("/".join(p.split("/")[1:]), layer_names or []) for p in paths if "/" in p})
        where = f" (in {', '.join(layers[:5])})" if layers else ""
        return UnsupportedOpError(
            f"tf2onnx cannot convert op(s) {', '.join(names)}{where} to ONNX opset {TF2ONNX_OPSET}",
            hint="replace the layer with ONNX-convertible ops; other targets are not affected",
        )
    lines = [line for line in log.splitlines() if "ERROR" in line or "Error" in line]
    detail = lines[-1].strip() if lines else (log.strip().splitlines() or ["no output"])[-1]
    return ConversionError(f"tf2onnx failed: {detail}")


def onnx_to_torch(produces: str) -> Callable[[ModelForm, StepContext], ModelForm]:
    """ONNX -> a PyTorch module rebuilt from the graph (``edgekit.sources.onnx_torch``), loaded
    by the converter that needs it: nothing runs until then."""

    def step(form: ModelForm, context: StepContext) -> ModelForm:
        return ModelForm(produces, form.path, loader="edgekit.sources.onnx_torch:load_module",
                         via="edgekit ONNX -> PyTorch module")

    return step


CONVERSIONS: tuple[Conversion, ...] = (
    Conversion("tf2onnx", forms.TF_GRAPH, forms.ONNX_GRAPH, tf2onnx),
    # edgekit's ONNX -> PyTorch converter has no recurrent layers
    Conversion("onnx-to-torch", forms.ONNX_GRAPH, forms.TORCH_PROGRAM, onnx_to_torch(forms.TORCH_PROGRAM),
               forms.RECURRENT_OPS),
    Conversion("onnx-to-torch", forms.ONNX_GRAPH, forms.TORCH_MODULE, onnx_to_torch(forms.TORCH_MODULE),
               forms.RECURRENT_OPS),
)


# --- the table ------------------------------------------------------------------------------


def route(source: Source, kind: str, fmt: Format) -> Route | None:
    """How ``fmt`` is built from a ``kind`` model of ``source``; None when no route exists."""
    provided = source.provides.get(kind, ())
    for accepted in fmt.accepts:
        if accepted.form in provided:
            return Route(kind, fmt.name, accepted.form, (), tuple(accepted.honours), tuple(accepted.cannot))
        step = next((c for c in CONVERSIONS if c.produces == accepted.form and c.consumes in provided), None)
        if step is not None:
            return Route(kind, fmt.name, accepted.form, (step,), tuple(accepted.honours),
                         tuple(dict.fromkeys([*step.cannot, *accepted.cannot])))
    return None


def refuse_ops(route: Route, op_types: Iterable[str], others: Iterable[Route] = ()) -> None:
    """A ``RouteError`` when the model holds an op the route's converter cannot convert (known
    after the model is described, before converting: a recurrent layer on litert-torch's route
    used to convert for minutes, then fail), naming the routes that take it."""
    blocked = sorted(set(route.cannot) & set(op_types))
    if not blocked:
        return
    able = [r for r in others if r.format != route.format and not set(r.cannot) & set(blocked)]
    instead = (f"package it for {' and '.join(r.format for r in able)} (--format "
               f"{' --format '.join(r.format for r in able)})" if able
               else "package it for a format whose converter takes them (edgekit routes)")
    raise RouteError(
        f"the route {route.describe()} cannot convert {', '.join(blocked)}: its converter has no "
        f"{'/'.join(blocked)} (refused before converting; {instead})", hint=instead)


def table(sources: Iterable[Source] | None = None, formats: Iterable[Format] | None = None) -> list[Route]:
    """Every route, source kind by source kind (the docs' routes table is this)."""
    from .formats import FORMATS
    from .sources import SOURCES

    return [r for s in (SOURCES if sources is None else sources) for kind in s.provides
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
    from .formats import FORMATS

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
