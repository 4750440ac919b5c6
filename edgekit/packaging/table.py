"""The validation table printed after packaging: one row per artifact, measured vs the float model."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..manifest import Manifest
from ..validation_record import ArtifactRecord, ValidationRecord
from ..kinds import show_value


def _pct(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{100 * value:.2f}%"  # NaN: not applicable


def _size(size: int) -> str:
    return f"{size / 1024:.1f} KiB" if size < 1 << 20 else f"{size / (1 << 20):.2f} MiB"


def _num(value: Any, fmt: str) -> str:
    return "n/a" if value is None or value != value else format(value, fmt)


def _slice_notes(target: str, metrics: ArtifactRecord) -> list[str]:
    """Quantities the graph joins into one output: the worst one's numbers, per output."""
    notes = []
    for name, values in metrics.metrics.per_output().items():
        worst = values.get("worst_slice")
        if not worst:
            continue
        start, end = worst["channels"]
        low, high = worst["range"]
        sqnr = worst.get("sqnr_db")
        where = f"output {name!r} " if name else ""
        axis = worst.get("axis", -1)
        notes.append(f"{target}: {where}rows {start}..{end - 1} of axis {axis} ({worst.get('what', 'value')} rows, "
                     f"values {low:.3g}..{high:.3g}, the worst of {worst['groups']} joined quantities): SQNR "
                     f"{'inf' if sqnr is None else format(sqnr, '.1f')} dB, {worst['distinct_values']} distinct values")
    return notes


def _task_notes(target: str, metrics: ArtifactRecord, quantized_source: bool = False) -> list[str]:
    """Task metrics (per output, and the --metric function's) with their verdicts and rules; a
    quantized source is named as the reference it is, never "float"."""
    notes = []
    measured = metrics.metrics
    results = list(measured.task_records().items())
    if measured.metric:
        results.append(("", measured.metric))
    for name, task in results:
        shown = ", ".join(f"{'source_accuracy' if quantized_source and k == 'float_accuracy' else k} "
                          f"{show_value(k, v)}" for k, v in task["values"].items())
        verdict = {True: "passes", False: "FAILS", None: "not gated"}[task.get("passed")]
        if verdict == "passes" and not metrics.decided:  # its floor met on too few samples: not a pass yet
            verdict = "meets its floor, NOT DECIDABLE on this sample"
        where = f"output {name!r} " if name else ""
        rule = task["rule"].replace("with float", "with the source") if quantized_source else task["rule"]
        notes.append(f"{target}: {where}{task['task']}: {shown}: {verdict} ({rule})")
    return notes


def _quantization_note(target: str, metrics: ArtifactRecord) -> list[str]:
    """Both arithmetics of a fusing runtime (ONNX), and which one the verdict is on."""
    measured = metrics.metrics
    q = measured.quantization
    if not q:
        return []
    here = measured.on_this_cpu
    fused = here.get("sqnr_db") if here else measured.sqnr_db
    judged = measured.judged_by
    return [f"{target}: SQNR {_num(q.get('sqnr_db'), '.1f')} dB as quantized (QDQ graph run without int8 kernel "
            f"fusion), {_num(fused, '.1f')} dB on this CPU's fused int8 kernels"
            + (f"; judged {judged}" if judged else "")]


def _conversion_line(validation: ValidationRecord) -> str | None:
    """The float conversion of each format vs the source: where a loss happened before INT8."""
    parts = []
    for target, metrics in validation.artifacts.items():
        conversion = metrics.metrics.float_conversion
        if conversion:
            value = conversion.get("sqnr_db")
            parts.append(f"{target} {'inf' if value is None else format(value, '.1f')} dB")
    if not parts:
        return None
    return ("float conversion vs the source, before quantization (SQNR): " + ", ".join(parts)
            + "; the INT8 SQNR above includes it")


def _fix_notes(target: str, metrics: ArtifactRecord) -> list[str]:
    """One line per try of the search: what changed, the failing gates' margins before -> after."""
    notes = []
    for attempt in metrics.auto_fix:
        if attempt.get("error"):
            notes.append(f"{target}: search {attempt['change']}: failed to build ({attempt['error']})")
            continue
        if attempt.get("after") is None:
            notes.append(f"{target}: search {attempt['change']}: did not build")
            continue
        before = (attempt.get("before") or {}).get("gates") or {}
        after = attempt["after"].get("gates") or {}
        changes = "; ".join(f"{gate} {_margin(value)} -> {_margin(after[gate]) if gate in after else 'passes'}"
                            for gate, value in before.items())
        left = len(attempt["after"].get("failed_gates") or ())
        notes.append(f"{target}: search {attempt['change']}: failing gates' margin vs floor {changes or 'n/a'}, "
                     f"{'every gate passes' if not left else f'{left} gate(s) still fail'}"
                     f"{'' if attempt.get('kept') else ' (not kept)'}")
    return notes


def _count(metrics: ArtifactRecord, name: str) -> str:
    """`` (k/n)`` behind a rate shown in the table, where a task counted it."""
    for task in metrics.metrics.task_records().values():
        for rate in task.get("evidence") or ():
            if rate.get("name") == name:
                return f" ({rate.get('k')}/{rate.get('n')})"
    return ""


def _evidence_notes(target: str, metrics: ArtifactRecord) -> list[str]:
    """Each rate gate's count and 95% interval, and what a pass the sample cannot support lacks."""
    notes = []
    for output, task in metrics.metrics.task_records().items():
        counts = []
        for rate in task.get("evidence") or ():
            low, high = rate.get("ci95") or (0, 1)
            counts.append(f"{rate.get('name')} {rate.get('k')}/{rate.get('n')} {rate.get('unit')} "
                          f"(95% CI {100 * low:.1f}-{100 * high:.1f}%, floor {100 * float(rate.get('floor', 0)):.1f}%)")
        if counts:
            notes.append(f"{target}: {output or 'output'} evidence: " + "; ".join(counts))
    for gate in metrics.undecided:
        where = f"{gate.output!r} " if gate.output else ""
        notes.append(f"{target}: NOT DECIDABLE {where}{gate.gate}: {gate.have} {gate.unit}, "
                     f"{gate.needed} needed to allow one disagreement ({gate.samples_needed} held-out "
                     "samples would decide it)" if gate.gate != "samples" else
                     f"{target}: NOT DECIDABLE: {gate.have} validation samples, {gate.needed} needed "
                     "for any pass")
    return notes


def _float_reference_notes(target: str, metrics: ArtifactRecord) -> list[str]:
    """A quantized source's artifact against the float model given beside it (--float-reference):
    each output's SQNR and task numbers, as the table shows them against the source."""
    against = metrics.metrics.against_float_reference
    if not against:
        return []
    tasks = against.task_records()
    only = next(iter(tasks), "") if len(tasks) == 1 else ""  # one output: its numbers are the summary's
    outputs = against.outputs or {only: against.summary}
    parts = []
    for name, values in outputs.items():
        task = tasks.get(name)
        shown = ", ".join(f"{k} {show_value(k, v)}" for k, v in (task or {}).get("values", {}).items())
        parts.append(f"{name or 'output'} SQNR {values.get('sqnr_db', float('nan')):.1f} dB" + (f", {shown}" if shown else ""))
    return [f"{target}: against the float reference: " + "; ".join(parts)]


def _margin(value: Any) -> str:
    return "-inf" if value is None else f"{value:+.3g}"


def render(manifest: Manifest, console: Console) -> None:
    """The validation table ``edgekit package`` and ``inspect`` print, and ``PackageResult.table``
    returns, onto ``console``."""
    validation = manifest.validation
    data = validation.data
    quantized = manifest.source.get("quantized")  # a QAT or already-quantized source is the reference, not float
    reference = "the quantized source" if quantized else "float"
    table = Table(
        title=f"{manifest.name}: INT8 vs {reference} on {data.samples or '?'} {data.split or 'samples'}",
        title_justify="left",
    )
    columns = ("artifact", "precision", "size", "source acc" if quantized else "float acc", "artifact acc", "change",
               "top-1 agree", "cosine", "SQNR")
    for column in columns:
        table.add_column(column, justify="left" if column in ("artifact", "precision") else "right")
    float_acc = validation.float_accuracy
    notes = []
    for artifact in manifest.artifacts:
        metrics = validation.artifact(artifact.key)
        if not metrics.measured:
            table.add_row(artifact.key, artifact.precision, _size(artifact.bytes), _pct(float_acc),
                          "not measurable here", "", "", "", "")
            notes.append(f"{artifact.key}: {metrics.reason or 'not measured'}")
            continue
        measured = metrics.metrics
        drop = measured.accuracy_drop_pp
        table.add_row(
            artifact.key,
            artifact.precision,
            _size(artifact.bytes),
            _pct(float_acc),
            _pct(measured.accuracy),
            "n/a" if drop is None else f"{0.0 - drop:+.2f} pp",
            _pct(measured.top1_agreement) + _count(metrics, "top1_agreement"),
            _num(measured.cosine, ".5f"),
            _sqnr(measured.sqnr_db, bool(measured)),
        )
        for name, values in (measured.outputs or {}).items():  # every output on its own row
            table.add_row(f"  {name}", "", "", "", "", "", _pct(values.get("top1_agreement")),
                          _num(values.get("cosine"), ".5f"), _sqnr(values.get("sqnr_db"), True))
        notes += _slice_notes(artifact.key, metrics)
        notes += _quantization_note(artifact.key, metrics)
        notes += _task_notes(artifact.key, metrics, bool(quantized))
        notes += _fix_notes(artifact.key, metrics)
        notes += [f"{artifact.key}: FAILED {gate.what}" for gate in metrics.gates]
        notes += _evidence_notes(artifact.key, metrics)
        notes += _float_reference_notes(artifact.key, metrics)
    for failure in manifest.failed:
        table.add_row(failure.target, "failed", "", "", "", "", "", "", "")
        notes.append(f"{failure.target} failed: {failure.error}")
    console.print(table)
    conversion = _conversion_line(validation)
    if conversion:
        notes.insert(0, conversion)
    notes = list(validation.notes) + notes  # the kinds were said before building
    for note in notes:
        console.print(note, highlight=False)
    measured = [a for a in validation.artifacts.values() if a.measured]
    if measured and validation.min_sqnr_db is not None:
        verdict = {"passed": "pass", "not decidable": "NOT DECIDABLE (too few samples, see above)"}.get(
            validation.state, "FAIL")
        console.print(f"gates {verdict}: each output is judged by its kind's task metric (above); values need SQNR >= "
                      f"{validation.min_sqnr_db:g} dB, and so does each quantity joined into one output; labelled "
                      f"class scores may drop at most {validation.max_accuracy_drop_pp} pp", highlight=False)
        if quantized and not quantized.get("float_reference"):
            console.print(unjudged_source_line(), highlight=False)
    elif validation.passed is None:
        console.print("gates NOT MEASURED: no artifact could be run on this machine, so none was compared with the "
                      "float model (the manifest says passed: null); measure them on a device that runs them "
                      "(python -m edgekit.run PACKAGE --eval DATA)", highlight=False)
    elif validation.data.labeled:
        verdict = "within" if validation.passed else "EXCEEDS"
        console.print(f"accuracy drop {verdict} the {validation.max_accuracy_drop_pp} pp limit")


def unjudged_source_line() -> str:
    """What a quantized source's pass means without its float model: the artifacts match the
    source, and nothing here says whether the source itself is any good."""
    return ("the source itself was NOT judged: its artifacts were compared with the quantized source as given, so a "
            "source whose quantization is broken passes with it; pass --float-reference FLOAT_MODEL (the model it was "
            "trained or quantized from) to judge it")


def _sqnr(value: Any, measured: bool) -> str:
    return "inf dB" if value is None and measured else _num(value, ".1f") + " dB"


def render_explanations(manifest: Manifest, console: Console, limit: int = 10) -> None:
    """The worst layers by SQNR for each artifact that has an --explain report."""
    for artifact in manifest.artifacts:
        rows = artifact.about.explain
        if not rows:
            continue
        table = Table(title=f"{artifact.key}: worst layers by SQNR (INT8 vs float activations)", title_justify="left")
        for column in ("layer", "op", "SQNR", "tensor"):
            table.add_column(column, justify="right" if column == "SQNR" else "left", overflow="ellipsis",
                             max_width=60 if column == "tensor" else None)
        for row in rows[:limit]:
            sqnr = row.get("sqnr_db")
            table.add_row(row["layer"], row["op"], "exact" if sqnr is None else f"{sqnr:.1f} dB", row["tensor"])
        console.print(table)
    console.print("keep a layer in float with --keep-float LAYER", highlight=False)
