"""The gates a package must pass, and what to do when one fails.

Every output of every artifact is judged, labels or not:

1. outputs that carry no signal (constant) always fail;
2. an output whose kind has a task (``kinds.py``: inferred from the graph and values, labels,
   or ``--output-kind``) is judged by the task's rule: top-1 agreement for classes, argmax
   peak within one bin and its height for bins, per-label decisions for multilabel, detection
   recall/precision/class agreement, IoU, cosine;
3. every other output (values) needs SQNR >= ``--min-sqnr`` (20 dB by default); each quantity
   the graph joins into one output (a Concat of box rows and sigmoid score rows) needs it too,
   task metric or not (collapsed scores may still pick the right class, but not rank);
4. a ``--metric`` function that returns ``passed`` decides for the whole artifact (it replaces
   rule 3, since the user's task measure is the better judge).

Why 20 dB: SQNR 20 dB is a quantization noise RMS of 10% of the signal's RMS. Healthy INT8
artifacts of the reference and test models measure 28-62 dB; the broken ones this gate exists
for measured 0.3-11.5 dB (a collapsed score block, an audio model at 53% onset recall, an
artifact on saturating x86 int8 kernels). 20 dB sits between the two with margin on both sides.
"""

from __future__ import annotations

import numpy as np

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, NamedTuple

from ..formats.building import Fix, float_fix, int16_fix
from ..formats.plan import FLOAT, INT16
from ..kinds import OutputKind, show_value
from .validate import Measured

DEFAULT_MIN_SQNR_DB = 20.0
SATURATION_GAP_DB = 3.0  # fused kernels this much worse than the quantization itself: they saturate


@dataclass(frozen=True)
class GateFailure:
    """One failed gate: where (format, output, slice), what was measured, and what fixes it."""

    format: str
    output: str | None  # None: the artifact as a whole (a --metric function)
    cause: str  # degenerate | task | sqnr | slice | metric
    what: str
    fixes: tuple[Fix, ...]
    saturated: bool = False  # this CPU's fused int8 kernels measured well below the quantization itself
    channels: tuple[int, int] | None = None  # the collapsed slice (start, stop) along ``axis``, for cause "slice"
    axis: int | None = None
    # the failing gate's own number relative to its floor (negative: below it): SQNR dB minus the
    # floor, or the task metric's worst gated value minus its floor. --auto-fix compares these.
    margin: float = float("-inf")

    @property
    def key(self) -> tuple[Any, ...]:
        """Which gate this is, the same across rebuilds: output, cause and slice."""
        return (self.output, self.cause, self.channels)

    @property
    def flags(self) -> tuple[str, ...]:
        """Its fixes as a user would pass them."""
        return tuple(f.flag for f in self.fixes)

    def to_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["fixes"] = list(self.flags)
        found["margin"] = round(self.margin, 4) if math.isfinite(self.margin) else None
        return found


class Remedies(NamedTuple):
    """What can fix one format's failed gates: its own rebuilds (``Builder.fixes``), and what its
    route honours (``edgekit.routing.routes``): the plan's precisions per layer, --explain."""

    fixes: tuple[Fix, ...] = ()
    saturation: str = ""  # why its fused kernels can saturate (Builder.saturation_explanation)
    layers: tuple[str, ...] = ()  # what its route honours (plan.FLOAT, plan.INT16, base.EXPLAIN)

    @property
    def floats(self) -> bool:
        """Whether its route keeps a layer in float (a plan edit the search may make)."""
        return FLOAT in self.layers

    def builds(self, *precisions: str) -> bool:
        """Whether its route builds any of these per-layer precisions."""
        return bool(set(precisions) & set(self.layers))


def check(fmt: str, measured: Measured, min_sqnr_db: float, producers: dict[str, str],
          kinds: dict[str, OutputKind] | None = None, remedies: Remedies = Remedies()) -> list[GateFailure]:
    """Every gate this artifact fails; ``producers`` names the layer that computes each output,
    ``kinds`` what each output is (its task, and the node joining its groups), ``remedies`` what
    the format and its route can do about a failure."""
    kinds = kinds or {}
    failures = []
    user_decides = measured.metric is not None and measured.metric.passed is not None
    saturation = saturated_outputs(measured)
    for name, c in measured.outputs.items():
        saturated = name in saturation
        kind = kinds.get(name)
        where = f"output {name!r}" if len(measured.outputs) > 1 or name else "the output"
        worst = c.worst_slice
        collapsed = worst is not None and worst["sqnr_db"] < min_sqnr_db
        # quantities joined into one tensor share one INT8 scale: the node joining them is the first suspect
        joiner = (kind.joined_by if kind is not None and kind.joined_by else None) or producers.get(name)
        grouped = kind is not None and bool(kind.groups)
        fixes = _fixes(remedies, saturated, joiner if collapsed or grouped else None)
        task = measured.tasks.get(name)
        if c.degenerate:
            figures = f" (SQNR {c.sqnr_db:.1f} dB, {c.distinct_values} distinct values)" if np.isfinite(c.sqnr_db) else ""
            failures.append(GateFailure(fmt, name, "degenerate", f"{where} carries no signal: {c.degenerate}{figures}",
                                        fixes, saturated))
        if task is not None and task.passed is not None:
            if not task.passed:
                shown = ", ".join(f"{k} {show_value(k, v)}" for k, v in task.values.items())
                failures.append(GateFailure(fmt, name, "task", f"{where} ({task.task}): {shown}; needs {task.rule}",
                                            fixes, saturated,
                                            margin=task.margin if task.margin is not None else float("-inf")))
        elif not user_decides and not c.degenerate and c.sqnr_db < min_sqnr_db:
            failures.append(GateFailure(fmt, name, "sqnr", f"{where}: SQNR {c.sqnr_db:.1f} dB < {min_sqnr_db:g} dB "
                                        f"({c.distinct_values} distinct values)", fixes, saturated,
                                        margin=c.sqnr_db - min_sqnr_db))
        if not user_decides and not c.degenerate and collapsed:
            # a collapsed quantity fails even when a task metric passes: scores squeezed to a few
            # values can still pick the right class on the validation set, but they no longer rank
            assert worst is not None
            start, end = worst["channels"]
            low, high = worst["range"]
            joined = f"; {joiner!r} joins {worst['groups']} quantities" if joiner else ""
            failures.append(GateFailure(
                fmt, name, "slice",
                f"{where} rows {start}..{end - 1} of axis {worst.get('axis', -1)} ({worst.get('what', 'value')} rows, "
                f"values {low:.3g}..{high:.3g}, sharing one INT8 scale with {worst['groups'] - 1} other "
                f"quantit{'y' if worst['groups'] == 2 else 'ies'}{joined}): SQNR {worst['sqnr_db']:.1f} dB < "
                f"{min_sqnr_db:g} dB, {worst['distinct_values']} distinct values",
                fixes, saturated, (start, end), worst.get("axis"), margin=worst["sqnr_db"] - min_sqnr_db))
    failures = [_blame_conversion(f, measured, min_sqnr_db) for f in failures]
    if measured.metric is not None and measured.metric.passed is False:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in measured.metric.values.items())
        failures.append(GateFailure(fmt, None, "metric", f"{measured.metric.task}: {shown} (passed: False)",
                                    _fixes(remedies, bool(saturation), None)))
    return failures


def _blame_conversion(failure: GateFailure, measured: Measured, min_sqnr_db: float) -> GateFailure:
    """Say so when the float conversion alone already fails the floor: no INT8 fix will help."""
    conversion = (measured.conversion or {}).get(failure.output) if failure.output is not None else None
    if conversion is None or not conversion.sqnr_db < min_sqnr_db:
        return failure
    what = (f"{failure.what}; the float {failure.format} conversion alone gives {conversion.sqnr_db:.1f} dB: the "
            "converter lost the accuracy before quantization")
    return replace(failure, what=what)


def saturated_outputs(measured: Measured) -> dict[str, float]:
    """Outputs whose SQNR on this CPU's fused int8 kernels is far below the quantization's own
    (ONNX QDQ evaluated without fusion): output -> the quantization's SQNR."""
    if not measured.quantization:
        return {}
    return {name: q.sqnr_db for name, q in measured.quantization.items()
            if name in measured.outputs and q.sqnr_db - measured.outputs[name].sqnr_db > SATURATION_GAP_DB}


def saturation_note(fmt: str, measured: Measured, remedies: Remedies = Remedies()) -> str | None:
    """What to say when this CPU's int8 kernels lose accuracy the quantization itself does not."""
    if measured.on_this_cpu:  # judged as quantized: this CPU does not run it, but say what it would give
        lost = {name: c.sqnr_db for name, c in measured.on_this_cpu.items()
                if name in measured.outputs and measured.outputs[name].sqnr_db - c.sqnr_db > SATURATION_GAP_DB}
        if not lost:
            return None
        numbers = "; ".join(f"{name or 'output'}: {measured.outputs[name].sqnr_db:.1f} dB as quantized, {v:.1f} dB "
                            f"on this CPU" for name, v in lost.items())
        return (f"{fmt}: judged {measured.judged_by}. This CPU's fused int8 kernels ({measured.kernels}) "
                f"would lose accuracy on it ({numbers}); they are not what runs it")
    found = saturated_outputs(measured)
    if not found:
        return None
    numbers = "; ".join(f"{name or 'output'}: {q:.1f} dB as quantized, {measured.outputs[name].sqnr_db:.1f} dB on "
                        f"this CPU" for name, q in found.items())
    why = f": {remedies.saturation}" if remedies.saturation else ""
    return f"{fmt}: this CPU's fused int8 kernels saturate ({numbers}). It has {measured.kernels}{why}"


def _fixes(remedies: Remedies, saturated: bool, producer: str | None) -> tuple[Fix, ...]:
    """What fixes a failure, most likely first; ``--auto-fix`` tries them in this order."""
    fixes = [int16_fix(producer)] if producer and INT16 in remedies.layers else []  # 16-bit before float
    fixes += [float_fix(producer)] if producer and remedies.floats else []
    fixes += [f for f in remedies.fixes if f.when == "always" or (saturated and f.when == "saturated")
              or (f.when == "no_layers" and not remedies.floats)]
    return tuple(fixes)


REFUSED_PREFIX = "INT8 validation failed: "  # how a refusal by the gates begins (also in a partial package's failed)


def failure_message(failures: list[GateFailure], tried: dict[str, set[str]] | None = None,
                    quantized_source: bool = False) -> str:
    """One line per failed gate with the fixes not yet tried (``tried``: by format, what
    ``--auto-fix`` already rebuilt with; none for a ``quantized_source``, whose ranges are kept, never
    calibrated or searched); the error says no package was written."""
    lines = []
    for f in failures:
        left = [] if quantized_source else [flag for flag in f.flags if flag not in (tried or {}).get(f.format, set())]
        fixes = f" (fix: {' or '.join(left)})" if left else ""
        lines.append(f"{f.format}: {f.what}{fixes}")
    return REFUSED_PREFIX + "; ".join(lines) + "; no package was written"


QUANTIZED_SOURCE_HINT = (
    "the source is already quantized: its learned ranges are kept, so nothing is calibrated or searched, and an "
    "artifact that does not reproduce the source's own arithmetic is refused; ship --format onnx (the graph as given), "
    "check the source's ranges (--float-reference FLOAT_MODEL judges it), or package the float model it came from")


def failure_hint(tried: dict[str, set[str]] | None = None, searched: dict[str, int] | None = None,
                 passed: list[str] | None = None, named_fixes: bool = True, quantized_source: bool = False) -> str:
    """What to do next: the search only when it has not run (``--no-auto-fix``); after it, what
    it tried (``tried``: the named fixes by format; ``searched``: how many layer precision plans).
    ``passed``: the formats whose artifacts passed (offered only when there are some);
    ``named_fixes``: whether the failures above name any fix."""
    rest = ("--explain shows the worst layers for --keep-float; --allow-accuracy-drop keeps the package as it is "
            "(recorded as failed in the manifest)")
    if quantized_source:
        return QUANTIZED_SOURCE_HINT + (f"; or package the formats that passed "
                                        f"({' '.join('--format ' + f for f in passed)})" if passed else "")
    if tried is None:
        what = "the fixes listed above and " if named_fixes else ""
        return (f"without --no-auto-fix, edgekit searches: it tries {what}the layers' precision where the route "
                "honours it, and keeps what passes; " + rest)
    if not any(tried.values()) and not any((searched or {}).values()):
        return ("the search did not run (the warnings above say why: calibration data unlike the held-out data, or "
                "too few validation samples); " + rest)
    parts = []
    for fmt in dict.fromkeys([*tried, *(searched or {})]):
        flags = ", ".join(sorted(tried.get(fmt, set())))
        plans = (searched or {}).get(fmt, 0)
        done = " and ".join(x for x in (flags, f"{plans} layer precision plans" if plans else "") if x)
        if done:
            parts.append(f"{fmt}: {done}")
    others = (f"; or package the formats that passed ({' '.join('--format ' + f for f in passed)})" if passed
              else "")
    return (f"the search already tried {'; '.join(parts) or 'every fix it had'} without passing every gate "
            "(the tries are listed above and in the manifest); " + rest + others)
