"""``edgekit compare``: many reports (devices, formats, precisions) in one table.

Reports are gathered from files and folders (a fleet's reports copied into one folder is the
cross-device comparison). Each result row gets a speedup against the row of the baseline
report with the same configuration (artifact, backend, threads, batch) and, from the raw
samples, a bootstrap verdict: a difference ("regression", "improvement") only when it is
significant (the 95% confidence interval of the ratio of medians excludes 1) and larger than
the equivalence margin (5% unless stated), so run-to-run noise is "no change". A row whose
configuration the baseline did not measure gets no speedup: comparing unlike configurations
(batch 8 against batch 1) would print a number that means nothing.
"""

from __future__ import annotations

import warnings as _warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EdgekitError
from .conditions import condition_warnings
from .report import ReportError, read_report
from .stats import DEFAULT_MARGIN_PCT, regression_verdict


@dataclass
class Row:
    report: str  # file stem: what --baseline names
    device: str
    model: str
    config: dict[str, Any]
    result: dict[str, Any]
    throttled: bool
    samples: np.ndarray
    speedup: float | None = None
    verdict: dict[str, Any] | None = None
    tuned: bool = False  # the configuration `edgekit tune` chose on that device (a tune report)
    source: int = 0  # which report it came from (reports may share a file name or a device)

    @property
    def key(self) -> tuple[Any, ...]:
        c = self.config
        return (c.get("artifact"), c.get("backend"), c.get("threads"), c.get("batch"))

    @property
    def config_label(self) -> str:
        """The model and configuration: one row of the device matrix (two models never share one)."""
        c = self.config
        return f"{self.model} {c.get('artifact')}/{c.get('backend')} t{c.get('threads')} b{c.get('batch')}"

    @property
    def label(self) -> str:
        """Device, model and configuration: what names this row in every chart and message."""
        return f"{self.device} {self.config_label}"


@dataclass
class Comparison:
    rows: list[Row]
    baseline: str | None
    skipped: list[str] = field(default_factory=list)
    threshold_pct: float | None = None
    baseline_source: int = 0  # the one report every other row is compared with
    notes: list[str] = field(default_factory=list)  # how the baseline was chosen, when it needed choosing
    warnings: list[str] = field(default_factory=list)  # conditions that differ between reports (conditions.py)
    reports: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict and r.verdict["verdict"] == "regression"]

    @property
    def compared(self) -> list[Row]:
        """Rows that were compared with a baseline row (a CI gate that compared none proves nothing)."""
        return [r for r in self.rows if r.verdict is not None]

    def is_baseline(self, row: Row) -> bool:
        return row.source == self.baseline_source


@dataclass
class Matrix:
    """What a fleet engineer reads first: one row per configuration, one column per device."""

    devices: list[str]
    configs: list[str]
    cells: dict[tuple[str, str], Row]  # (config, device) -> row


def matrix(comparison: Comparison) -> Matrix:
    """Columns by device; two reports of one device (an A/B run on one board) each keep a column,
    named ``device (report)``, never one dropped for the other."""
    ordered = sorted(comparison.rows, key=lambda r: not comparison.is_baseline(r))  # the baseline's column first
    sources: dict[str, set[int]] = {}
    for row in comparison.rows:
        sources.setdefault(row.device, set()).add(row.source)

    def column(row: Row) -> str:
        return row.device if len(sources[row.device]) == 1 else f"{row.device} ({row.report})"

    devices = list(dict.fromkeys(column(r) for r in ordered))
    configs = list(dict.fromkeys(r.config_label for r in comparison.rows))
    cells = {}
    for row in comparison.rows:
        cells.setdefault((row.config_label, column(row)), row)
    return Matrix(devices=devices, configs=configs, cells=cells)


def matrix_cell(comparison: Comparison, row: Row | None) -> str:
    """"p50 ms (speedup)" for one device and configuration."""
    if row is None:
        return "not measured"
    text = f"{row.result['latency']['p50']:.3f} ms"
    if comparison.is_baseline(row):
        return text + " (baseline)"
    if row.speedup is None:
        return text + " (no baseline)"
    return text + f" ({row.speedup:.2f}x)"


def holds_reports(paths: list[str]) -> bool:
    """Whether ``paths`` name a file or a folder holding a JSON file other than a latency card."""
    for item in paths:
        path = Path(item)
        if path.is_dir() and any(not p.name.endswith(".card.json") for p in path.rglob("*.json")):
            return True
        if not path.is_dir():
            return True  # a file (or a missing path, which gather names)
    return False


def gather(paths: list[str], strict: bool = False) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(name, report) for every readable report under ``paths``; unreadable ones skipped with a reason."""
    files: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():  # latency cards beside reports are not reports (``card.py``)
            files.extend(sorted(p for p in path.rglob("*.json") if p.is_file() and not p.name.endswith(".card.json")))
        elif path.exists():
            files.append(path)
        else:
            raise EdgekitError(f"{path} does not exist", hint="pass report files or folders of them")
    reports, skipped = [], []
    for file in files:
        try:
            reports.append((file.stem.removesuffix(".bench"), read_report(file)))
        except ReportError as exc:
            if strict:
                raise
            skipped.append(exc.message)
    if not reports:
        raise EdgekitError("no edgekit benchmark reports found" + (f" ({'; '.join(skipped)})" if skipped else ""),
                           hint="create one with: python -m edgekit.run PACKAGE --bench --report FILE")
    return reports, skipped


def compare(
    paths: list[str],
    baseline: str | None = None,
    threshold_pct: float | None = None,
    strict: bool = False,
    allow_different_models: bool = False,
) -> Comparison:
    reports, skipped = gather(paths, strict)
    models = sorted({r["model"].get("name", "?") for _, r in reports})
    if len(models) > 1 and not allow_different_models:
        raise EdgekitError(
            f"the reports are for different models ({', '.join(models)})",
            hint="compare reports of one model, or pass --allow-different-models",
        )
    rows = [
        Row(report=name, device=r["device"].get("name", "?"), model=r["model"].get("name", "?"),
            config=res["config"], result=res, throttled=bool((r.get("thermal") or {}).get("throttled")),
            samples=np.asarray(res["latency"]["samples_ms"], dtype=np.float64), tuned=_is_tuned(r, res["config"]),
            source=index)
        for index, (name, r) in enumerate(reports) for res in r["results"]
    ]
    source, notes = baseline_report(reports, baseline)
    base_rows = [r for r in rows if r.source == source]
    for row in rows:
        if row.source == source:
            continue  # the baseline itself
        match = next((b for b in base_rows if b.key == row.key and b.model == row.model), None)
        if match is None:
            continue  # the baseline did not measure this configuration (of this model): no speedup to state
        row.speedup = float(np.median(match.samples) / np.median(row.samples))
        row.verdict = regression_verdict(match.samples, row.samples,
                                         DEFAULT_MARGIN_PCT if threshold_pct is None else threshold_pct)
        row.verdict["baseline"] = match.label
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        return Comparison(rows=rows, baseline=reports[source][0], skipped=skipped, threshold_pct=threshold_pct,
                          baseline_source=source, notes=notes, warnings=condition_warnings(reports, source),
                          reports=reports)


def baseline_report(reports: list[tuple[str, dict[str, Any]]], baseline: str | None) -> tuple[int, list[str]]:
    """The one report the others are compared with: the first given, or the one ``--baseline``
    names by file name, or the oldest of a device's reports (an A/B run on one board gives that
    device several reports: each must be compared, not all taken as the baseline)."""
    if baseline is None:
        return 0, []
    by_name = [i for i, (name, _) in enumerate(reports) if name == baseline]
    by_device = [i for i, (_, r) in enumerate(reports) if r["device"].get("name") == baseline]
    found = by_name or by_device
    if not found:
        names = sorted({name for name, _ in reports} | {r["device"].get("name", "?") for _, r in reports})
        raise EdgekitError(f"--baseline {baseline!r} matches no report",
                           hint="use a report file name or device name: " + ", ".join(names))
    if len(found) == 1:
        return found[0], []
    oldest = min(found, key=lambda i: (str(reports[i][1].get("created") or ""), i))
    what = "report files" if by_name else "reports of that device"
    return oldest, [f"--baseline {baseline!r} matches {len(found)} {what}: the oldest, {reports[oldest][0]} "
                    f"({reports[oldest][1].get('created') or 'no date'}), is the baseline and the others are "
                    "compared with it (name a report file to choose another)"]


def _is_tuned(report: dict[str, Any], config: dict[str, Any]) -> bool:
    decision = (report.get("tuning") or {}).get("decision") or {}
    return bool(decision) and (decision.get("artifact"), decision.get("backend"), decision.get("threads")) == (
        config.get("artifact"), config.get("backend"), config.get("threads"))


def table_rows(comparison: Comparison) -> list[list[str]]:
    out = []
    several_models = len({row.model for row in comparison.rows}) > 1  # --allow-different-models
    baseline_models = {r.model for r in comparison.rows if comparison.is_baseline(r)}
    for row in comparison.rows:
        latency, result = row.result["latency"], row.result
        accuracy = (result.get("accuracy") or {}).get("accuracy")
        if comparison.is_baseline(row):
            verdict = "baseline"
        elif row.model not in baseline_models:
            verdict = "another model: no speedup stated"
        else:
            verdict = (f"{row.verdict['verdict']} ({row.verdict['reason']})" if row.verdict
                       else "no matching baseline configuration")
        out.append([
            row.device + (f" / {row.model}" if several_models else "") + (" (throttled)" if row.throttled else ""),
            str(row.config.get("artifact")) + (" (tuned)" if row.tuned else ""),
            str(row.config.get("backend")),
            str(row.config.get("precision", "")),
            str(row.config.get("threads")),
            str(row.config.get("batch")),
            f"{result.get('size_bytes', 0) / 1024:.0f} KiB",
            f"{latency['p50']:.3f}",
            f"{latency['p90']:.3f}",
            f"{latency['p99']:.3f}" if isinstance(latency.get("p99"), (int, float)) else "",
            f"{(result.get('throughput') or {}).get('per_s', 0):.0f}/s",
            f"{result.get('peak_rss_mib', 0):.0f} MiB",
            launch_cell(result),
            f"{result['first_inference_ms']:.2f}" if isinstance(result.get("first_inference_ms"), (int, float)) else "",
            over_time_cell(result),
            placement_cell(result),
            "" if accuracy is None else f"{100 * accuracy:.2f}%",
            "" if row.speedup is None else f"{row.speedup:.2f}x",
            verdict,
        ])
    return out


HEADERS = ["device", "artifact", "backend", "precision", "threads", "batch", "size", "p50 ms", "p90 ms", "p99 ms",
           "throughput", "RSS", "launch ms", "1st inf ms", "over time", "placement", "accuracy", "speedup", "vs baseline"]


ALWAYS_SHOWN = {"device", "artifact", "backend", "precision", "threads", "batch", "p50 ms", "vs baseline"}


def launch_cell(result: dict[str, Any]) -> str:
    """"first / relaunch" ms from process start to the first result ("" when not measured)."""
    launch = result.get("launch") or {}
    first, again = (launch.get("first_launch") or {}), (launch.get("relaunch") or {})
    if "process_ms" not in first:
        return ""
    return f"{first['process_ms']:.0f} / {again.get('process_ms', 0):.0f}"


def over_time_cell(result: dict[str, Any]) -> str:
    """A sustained run's first-to-last change and verdict ("" for a short run)."""
    sustained = result.get("sustained") or {}
    if "change_pct" not in sustained:
        return ""
    verdict = sustained["verdict"]
    return f"{sustained['change_pct']:+.0f}% {verdict['verdict']}" + (" (throttled)" if verdict.get("throttled") else "")


def placement_cell(result: dict[str, Any]) -> str:
    """"all on X" or "N/M on CPU" for the requested accelerator ("" when not recorded)."""
    placement = result.get("placement") or {}
    if not placement.get("ops"):
        return ""
    if not placement.get("requested"):
        return ", ".join(f"{count} {target.removesuffix('ExecutionProvider')}"
                         for target, count in (placement.get("by_target") or {}).items())
    if placement.get("missing"):
        return f"{', '.join(placement['missing'])} not active"
    if placement.get("fallback_ops"):
        return f"{placement['fallback_ops']}/{placement['ops']} ops fell back"
    return f"all {placement['ops']} on {', '.join(placement['requested'])}"


def shown_table(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Headers and rows without the columns no report filled (launch, placement, over time and
    accuracy are empty for older or shorter runs): a table that fits a terminal."""
    rows = table_rows(comparison)
    keep = [i for i, header in enumerate(HEADERS) if header in ALWAYS_SHOWN or any(row[i] for row in rows)]
    return [HEADERS[i] for i in keep], [[row[i] for i in keep] for row in rows]


def markdown(comparison: Comparison) -> str:
    headers, rows = shown_table(comparison)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    grid = matrix(comparison)
    if len(grid.devices) > 1:
        lines += ["", "| configuration | " + " | ".join(grid.devices) + " |", "|" + "---|" * (len(grid.devices) + 1)]
        lines += ["| " + config + " | " + " | ".join(matrix_cell(comparison, grid.cells.get((config, d)))
                                                   for d in grid.devices) + " |" for config in grid.configs]
    if comparison.warnings:
        lines += ["", "Conditions (read before trusting a speedup):", ""]
        lines += [f"- {warning}" for warning in comparison.warnings]
    return "\n".join(lines) + "\n"
