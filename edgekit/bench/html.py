"""One self-contained HTML file with charts for ``edgekit compare --html``.

No external scripts, fonts or styles: inline SVG drawn here, so the file opens anywhere (an
air-gapped lab, a CI artifact). What a fleet engineer reads first comes first: a matrix with
one row per configuration and one column per device (p50 and speedup vs the baseline). Then
the latency distribution per configuration on a logarithmic axis (devices differ by 10-100x,
and one slow whisker must not squash every box into the first pixels), p50/p90 bars with a
labelled scale, accuracy vs latency when the reports carry accuracy, latency (and other
processes' CPU use) over time for sustained runs, and the run context of every device with
the conditions that differ between them. SVGs scale to the
window (viewBox + max-width), labels are sized from their text and never clipped. A small
inline script counts the rendered charts into ``data-charts-rendered`` on <body> (what the
browser test checks).
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np

from .compare import Comparison, matrix, matrix_cell, shown_table
from .context import unreadable_signals
from .stats import DEFAULT_MARGIN_PCT

PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"]
WIDTH = 960
CHAR_PX = 6.6  # average width of a 12px system-ui character, for sizing label columns
MAX_LABEL_CHARS = 60


def _esc(text: Any) -> str:
    return html.escape(str(text))


def _short(label: str) -> str:
    return label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…"


def _label_width(labels: list[str]) -> float:
    return min(MAX_LABEL_CHARS, max((len(lbl) for lbl in labels), default=10)) * CHAR_PX + 16


def _svg_open(name: str, width: float, height: float, label: str) -> str:
    return (f'<svg class="chart" data-chart="{name}" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
            f'height="{height:.0f}" preserveAspectRatio="xMinYMin meet" role="img" aria-label="{_esc(label)}">')


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks per decade between ``low`` and ``high`` (both > 0), at most ~12."""
    ticks: list[float] = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for mantissa in (1, 2, 5):
            value = mantissa * 10.0**exponent
            if low <= value <= high:
                ticks.append(value)
    if len(ticks) > 12:
        ticks = [t for t in ticks if str(t).lstrip("0.").startswith("1")]
    return ticks or [low, high]


def linear_ticks(high: float, count: int = 5) -> list[float]:
    """Round ticks from 0 to at least ``high``."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(math.ceil(high / step)) + 1)]


def _fmt_ms(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.3g}"
    return f"{value:.2g}"


def matrix_table(comparison: Comparison) -> str:
    grid = matrix(comparison)
    head = "".join(f"<th>{_esc(d)}</th>" for d in grid.devices)
    body = []
    for config in grid.configs:
        cells = []
        for device in grid.devices:
            row = grid.cells.get((config, device))
            text = matrix_cell(comparison, row)
            css = ""
            if row is not None and row.speedup is not None:
                css = ' class="faster"' if row.speedup > 1.05 else (' class="slower"' if row.speedup < 0.95 else "")
            cells.append(f"<td{css}>{_esc(text)}</td>")
        body.append(f"<tr><td>{_esc(config)}</td>{''.join(cells)}</tr>")
    return (f'<table class="matrix"><thead><tr><th>configuration</th>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def distribution_chart(comparison: Comparison) -> str:
    """Box plots on a log axis: box p25-p75, thick line p50, dashed p90, whiskers p1-p99."""
    rows = comparison.rows
    labels = [_short(r.label) for r in rows]
    left = _label_width(labels)
    right = WIDTH - 30
    row_h = 30
    height = 74 + row_h * len(rows)
    stats = [np.percentile(r.samples, [1, 25, 50, 75, 90, 99]) for r in rows]
    low = max(min(float(s[0]) for s in stats), 1e-6) / 1.25
    high = max(float(s[5]) for s in stats) * 1.25
    if high / low < 10:  # at least a decade, centred on the data
        middle = math.sqrt(low * high)
        low, high = middle / math.sqrt(10), middle * math.sqrt(10)

    def sx(value: float) -> float:
        value = min(max(value, low), high)
        return left + (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low)) * (right - left)

    parts = [_svg_open("latency-distribution", WIDTH, height, "latency distribution per configuration")]
    for tick in log_ticks(low, high):
        x = sx(tick)
        parts.append(f'<line x1="{x:.1f}" y1="18" x2="{x:.1f}" y2="{height - 44}" stroke="#e5e7eb"/>'
                     f'<text x="{x:.1f}" y="{height - 28}" font-size="11" text-anchor="middle">{_fmt_ms(tick)}</text>')
    parts.append(f'<text x="{(left + right) / 2:.1f}" y="{height - 8}" font-size="11" text-anchor="middle">'
                 "latency, ms (logarithmic)</text>")
    for i, (row, label, (p1, p25, p50, p75, p90, p99)) in enumerate(zip(rows, labels, stats)):
        y = 24 + i * row_h
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<text x="{left - 8:.1f}" y="{y + 14}" font-size="12" text-anchor="end">{_esc(label)}'
                     f"<title>{_esc(row.label)}</title></text>")
        parts.append(f'<line x1="{sx(p1):.1f}" y1="{y + 10}" x2="{sx(p99):.1f}" y2="{y + 10}" stroke="{color}"/>')
        parts.append(f'<rect class="box" x="{sx(p25):.1f}" y="{y}" width="{max(sx(p75) - sx(p25), 1.5):.1f}" height="20" '
                     f'fill="{color}" fill-opacity="0.25" stroke="{color}"><title>{_esc(row.label)}: '
                     f'p1 {p1:.3f} / p25 {p25:.3f} / p50 {p50:.3f} / p75 {p75:.3f} / p90 {p90:.3f} / p99 {p99:.3f} ms'
                     f'</title></rect>')
        parts.append(f'<line x1="{sx(p50):.1f}" y1="{y - 2}" x2="{sx(p50):.1f}" y2="{y + 22}" stroke="{color}" '
                     'stroke-width="3"/>')
        parts.append(f'<line x1="{sx(p90):.1f}" y1="{y + 2}" x2="{sx(p90):.1f}" y2="{y + 18}" stroke="{color}" '
                     'stroke-dasharray="3 2"/>')
    parts.append("</svg>")
    return "".join(parts)


def bars_chart(comparison: Comparison) -> str:
    """Horizontal p50 (solid) and p90 (light) bars per configuration, with a labelled ms axis."""
    rows = comparison.rows
    labels = [_short(r.label) for r in rows]
    left = _label_width(labels)
    right = WIDTH - 70
    bar_h, row_h = 11, 30
    height = 64 + row_h * len(rows)
    ticks = linear_ticks(max(r.result["latency"]["p90"] for r in rows))
    high = ticks[-1]

    def sx(value: float) -> float:
        return left + value / high * (right - left)

    parts = [_svg_open("p50-p90-bars", WIDTH, height, "p50 and p90 per device and configuration")]
    for tick in ticks:
        x = sx(tick)
        parts.append(f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{height - 44}" stroke="#e5e7eb"/>'
                     f'<text x="{x:.1f}" y="{height - 28}" font-size="11" text-anchor="middle">{tick:g}</text>')
    parts.append(f'<text x="{(left + right) / 2:.1f}" y="{height - 8}" font-size="11" text-anchor="middle">'
                 "latency, ms (solid: p50, light: p90)</text>")
    for i, (row, label) in enumerate(zip(rows, labels)):
        y = 18 + i * row_h
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<text x="{left - 8:.1f}" y="{y + 15}" font-size="12" text-anchor="end">{_esc(label)}'
                     f"<title>{_esc(row.label)}</title></text>")
        for j, (key, opacity) in enumerate((("p50", "0.9"), ("p90", "0.4"))):
            value = row.result["latency"][key]
            parts.append(f'<rect class="bar" x="{left:.1f}" y="{y + j * bar_h}" width="{max(sx(value) - left, 1):.1f}" '
                         f'height="{bar_h - 1}" fill="{color}" fill-opacity="{opacity}"><title>{_esc(row.label)} '
                         f'{key} {value:.3f} ms</title></rect>')
        p50 = row.result["latency"]["p50"]
        parts.append(f'<text x="{sx(row.result["latency"]["p90"]) + 4:.1f}" y="{y + 15}" font-size="11">'
                     f"{p50:.3g} ms</text>")
    parts.append("</svg>")
    return "".join(parts)


def scatter_chart(comparison: Comparison) -> str | None:
    points = [(r, (r.result.get("accuracy") or {}).get("accuracy")) for r in comparison.rows]
    points = [(r, a) for r, a in points if a is not None]
    if not points:
        return None
    height, left, right, top, bottom = 340, 70, WIDTH - 220, 20, 290
    lat = [r.result["latency"]["p50"] for r, _ in points]
    acc = [a for _, a in points]
    lat_ticks = linear_ticks(max(lat) * 1.15)
    lat_hi = lat_ticks[-1]
    spread = max(max(acc) - min(acc), 0.02)  # one point, or equal accuracies: a readable 2-point window
    acc_lo = max(0.0, min(acc) - spread / 2)
    acc_hi = min(1.0, max(acc) + spread / 2)
    if acc_hi - acc_lo < 0.02:
        acc_lo = max(0.0, acc_hi - 0.02)

    def sx(value: float) -> float:
        return left + value / lat_hi * (right - left)

    def sy(value: float) -> float:
        return bottom - (value - acc_lo) / (acc_hi - acc_lo) * (bottom - top)

    parts = [_svg_open("accuracy-vs-latency", WIDTH, height, "accuracy vs latency"),
             f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#9ca3af"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#9ca3af"/>',
             f'<text x="{(left + right) / 2}" y="{height - 8}" font-size="11" text-anchor="middle">p50 latency (ms)</text>',
             f'<text x="14" y="{(top + bottom) / 2}" font-size="11" text-anchor="middle" '
             f'transform="rotate(-90 14 {(top + bottom) / 2})">accuracy</text>']
    for tick in lat_ticks:
        parts.append(f'<text x="{sx(tick):.1f}" y="{bottom + 16}" font-size="10" text-anchor="middle">{tick:g}</text>')
    for tick in np.linspace(acc_lo, acc_hi, 5):
        parts.append(f'<line x1="{left}" y1="{sy(tick):.1f}" x2="{right}" y2="{sy(tick):.1f}" stroke="#f3f4f6"/>'
                     f'<text x="{left - 6}" y="{sy(tick) + 3:.1f}" font-size="10" text-anchor="end">{100 * tick:.1f}%</text>')
    for i, (row, a) in enumerate(points):
        x, y = sx(row.result["latency"]["p50"]), sy(a)
        parts.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{PALETTE[i % len(PALETTE)]}">'
                     f'<title>{_esc(row.label)}: {100 * a:.2f}% at {row.result["latency"]["p50"]:.3f} ms</title></circle>'
                     f'<text x="{x + 9:.1f}" y="{y + 4 - 12 * (i % 3 - 1):.1f}" font-size="10">{_esc(_short(row.label))}'
                     "</text>")
    parts.append("</svg>")
    return "".join(parts)


def _line_chart(name: str, label: str, series: list[tuple[str, list[tuple[float, float]]]], y_title: str,
                css: str) -> str:
    """Lines over time (x: seconds from the run's start) with labelled linear axes."""
    height, left, right, top, bottom = 300, 64, WIDTH - 24, 16, 246
    x_hi = linear_ticks(max(t for _, points in series for t, _ in points) or 1.0)
    y_hi = linear_ticks(max(v for _, points in series for _, v in points) * 1.1 or 1.0)

    def sx(value: float) -> float:
        return left + value / x_hi[-1] * (right - left)

    def sy(value: float) -> float:
        return bottom - value / y_hi[-1] * (bottom - top)

    parts = [_svg_open(name, WIDTH, height + 22 * len(series), label),
             f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#9ca3af"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#9ca3af"/>',
             f'<text x="{(left + right) / 2}" y="{bottom + 34}" font-size="11" text-anchor="middle">seconds from the start '
             "of the run</text>",
             f'<text x="14" y="{(top + bottom) / 2}" font-size="11" text-anchor="middle" '
             f'transform="rotate(-90 14 {(top + bottom) / 2})">{_esc(y_title)}</text>']
    for tick in x_hi:
        parts.append(f'<text x="{sx(tick):.1f}" y="{bottom + 16}" font-size="10" text-anchor="middle">{tick:g}</text>')
    for tick in y_hi:
        parts.append(f'<line x1="{left}" y1="{sy(tick):.1f}" x2="{right}" y2="{sy(tick):.1f}" stroke="#f3f4f6"/>'
                     f'<text x="{left - 6}" y="{sy(tick) + 3:.1f}" font-size="10" text-anchor="end">{tick:g}</text>')
    for i, (title, points) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in points)
        parts.append(f'<polyline class="{css}" points="{path}" fill="none" stroke="{color}" stroke-width="2">'
                     f"<title>{_esc(title)}</title></polyline>")
        y = height + 22 * i
        parts.append(f'<line x1="{left}" y1="{y - 4}" x2="{left + 24}" y2="{y - 4}" stroke="{color}" stroke-width="3"/>'
                     f'<text x="{left + 30}" y="{y}" font-size="12">{_esc(_short(title))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_chart(comparison: Comparison) -> str | None:
    """p50 per window of every sustained configuration: where a device throttles or is shared."""
    series = []
    for row in comparison.rows:
        windows = (row.result.get("sustained") or {}).get("windows") or []
        if len(windows) >= 2:
            series.append((row.label, [(w["t_s"], w["p50"]) for w in windows]))
    if not series:
        return None
    return _line_chart("latency-over-time", "p50 per window over time", series, "p50 per window, ms", "timeline")


def load_chart(comparison: Comparison) -> str | None:
    """Other processes' CPU use over each sustained run, per device (from /proc/stat)."""
    series = []
    for name, report in comparison.reports:
        points = [(p["t_s"], p["other_cores"]) for p in (report.get("context") or {}).get("timeline") or []
                  if p.get("other_cores") is not None]
        if len(points) >= 2:
            series.append((f"{report['device'].get('name', name)}: other processes", points))
    if not series:
        return None
    return _line_chart("load-over-time", "other processes' CPU use over time", series, "cores used by other processes",
                       "load")


CONTEXT_HEADERS = ["device", "governor", "CPU MHz (allowed)", "hottest °C", "throttled", "other processes (cores)",
                   "power", "power mode", "runtimes", "not readable"]


def _context_cells(name: str, report: dict[str, Any]) -> list[str]:
    context = report.get("context") or {}
    conditions = context.get("conditions") or {}
    policies = (context.get("cpu_frequency") or {}).get("policies") or []
    mhz = ", ".join(f"{p.get('min_mhz') or '?'}-{p.get('max_mhz') or '?'}" for p in policies)
    throttled = conditions.get("throttled")
    versions = context.get("versions") or report["device"].get("libraries") or {}
    return [
        report["device"].get("name", name),
        str(conditions.get("governor") or "unknown"),
        mhz or "unknown",
        "unknown" if conditions.get("max_c") is None else f"{conditions['max_c']:.0f}",
        "unknown" if throttled is None else ("yes: " + "; ".join(conditions.get("throttle_reasons") or []) if throttled
                                             else "no"),
        "unknown" if conditions.get("other_cores") is None else f"{conditions['other_cores']:.2f}",
        str(conditions.get("power_source") or "unknown"),
        str(conditions.get("power_mode") or "-"),
        ", ".join(f"{k} {v}" for k, v in versions.items() if k not in ("edgekit", "python", "numpy")),
        ", ".join(unreadable_signals(context)) or ("run context not recorded" if "unreadable" in context else ""),
    ]


def context_table(comparison: Comparison) -> str:
    rows = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in _context_cells(name, report)) + "</tr>"
                   for name, report in comparison.reports)
    head = "".join(f"<th>{_esc(h)}</th>" for h in CONTEXT_HEADERS)
    return f'<table class="context"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def cards_section(cards: list[dict[str, Any]]) -> str:
    """Latency cards (``card.py``) as one table, devices and artifacts as columns: the warning about
    unlike conditions first, each card's own warnings under the table."""
    from .card import card_table

    if not cards:
        return ""
    warning, header, rows = card_table(cards)
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    said = "".join(f"<li>{_esc(c['device']['name'])} · {_esc(c['artifact']['key'])}: {_esc(w)}</li>"
                   for c in cards for w in c["warnings"])
    return ('<section class="cards"><h2>Latency cards (one artifact on one device each)</h2>'
            + (f'<p class="warning"><strong>Warning:</strong> {_esc(warning)}</p>' if warning else "")
            + f'<div class="scroll"><table class="cards"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
            + (f'<p>Warnings on the cards:</p><ul class="conditions">{said}</ul>' if said else "") + "</section>")


def render_cards(cards: list[dict[str, Any]], title: str = "edgekit latency cards") -> str:
    """A page of latency cards alone (``edgekit compare CARDS --html``, no reports given)."""
    return _page(title, f"<h1>{_esc(title)}</h1>\n{cards_section(cards)}")


def render(comparison: Comparison, title: str = "edgekit benchmark comparison",
           cards: list[dict[str, Any]] | None = None) -> str:
    headers, rows = shown_table(comparison)
    table = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>" for cells in rows)
    charts = [("Latency distribution (box: p25–p75, thick: p50, dashed: p90, whiskers: p1–p99; log axis)",
               distribution_chart(comparison)),
              ("p50 and p90 per device and configuration", bars_chart(comparison))]
    scatter = scatter_chart(comparison)
    if scatter:
        charts.append(("Accuracy vs latency", scatter))
    over_time = timeline_chart(comparison)
    if over_time:
        charts.append(("Latency over time (sustained runs: p50 per window)", over_time))
    busy = load_chart(comparison)
    if busy:
        charts.append(("Other processes' CPU use over time", busy))
    warnings = "".join(f"<li>{_esc(w)}</li>" for w in comparison.warnings)
    notes = "".join(f"<li>{_esc(s)}</li>" for s in comparison.skipped)
    sections = "".join(f"<section><h2>{_esc(name)}</h2>{svg}</section>" for name, svg in charts)
    margin = DEFAULT_MARGIN_PCT if comparison.threshold_pct is None else comparison.threshold_pct
    threshold = f": a difference only when significant and larger than the {margin:g}% equivalence margin"
    return _page(title, f"""<h1>{_esc(title)}</h1>
<p>Baseline: {_esc(comparison.baseline)}. Speedup = baseline p50 / p50, only between identical configurations
(artifact, backend, threads, batch). Verdicts from a bootstrap 95% CI of the ratio of medians over the raw
samples{threshold}.</p>
<section><h2>p50 per configuration and device (speedup vs baseline)</h2>
<div class="scroll">{matrix_table(comparison)}</div></section>
<section><h2>Every measured configuration</h2>
<div class="scroll"><table><thead><tr>{''.join(f'<th>{_esc(h)}</th>' for h in headers)}</tr></thead>
<tbody>{table}</tbody></table></div></section>
<section><h2>Run context per device</h2>
<div class="scroll">{context_table(comparison)}</div>
{f'<p>Conditions (read before trusting a speedup):</p><ul class="conditions">{warnings}</ul>' if warnings else ''}
</section>
{cards_section(cards or [])}
{f'<p>Skipped files:</p><ul>{notes}</ul>' if notes else ''}
{sections}""")


def _page(title: str, body: str) -> str:
    """The self-contained HTML page around ``body``: styles, and a count of the rendered charts."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #111827; max-width: 1200px; }}
table {{ border-collapse: collapse; font-size: 13px; }}
.scroll {{ overflow-x: auto; }}
td, th {{ border-bottom: 1px solid #e5e7eb; padding: 4px 8px; text-align: right; white-space: nowrap; }}
td:first-child, th:first-child {{ text-align: left; }}
td.faster {{ color: #166534; }} td.slower {{ color: #991b1b; }}
section {{ margin-top: 28px; }} h2 {{ font-size: 15px; }}
p.warning {{ color: #991b1b; }}
svg.chart {{ max-width: 100%; height: auto; }}
</style></head>
<body data-charts-rendered="0">
{body}
<script>
document.body.dataset.chartsRendered = String(
  Array.from(document.querySelectorAll("svg.chart")).filter(s => s.getBBox().width > 0).length);
</script>
</body></html>
"""
