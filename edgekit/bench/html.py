"""One self-contained HTML file with charts for ``edgekit compare --html``.

No external scripts, fonts or styles: inline SVG drawn here, so the file opens anywhere (an
air-gapped lab, a CI artifact). Charts: latency distribution per configuration (box plots of
the raw samples with p50/p90 marks), p50/p90 bars per device and configuration, and accuracy
vs latency when the reports carry accuracy. A small inline script counts the rendered charts
into ``data-charts-rendered`` on <body> (what the browser test checks).
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from .compare import HEADERS, Comparison, table_rows

PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"]
WIDTH = 860


def _esc(text: Any) -> str:
    return html.escape(str(text))


def _scale(value: float, low: float, high: float, start: float, end: float) -> float:
    return start + (value - low) / (high - low or 1.0) * (end - start)


def distribution_chart(comparison: Comparison) -> str:
    rows = comparison.rows
    row_h, left, right = 34, 300, WIDTH - 30
    height = 50 + row_h * len(rows)
    high = max(float(np.percentile(r.samples, 99)) for r in rows) * 1.05
    parts = [f'<svg class="chart" data-chart="latency-distribution" viewBox="0 0 {WIDTH} {height}" '
             f'width="{WIDTH}" height="{height}" role="img" aria-label="latency distribution per configuration">']
    for tick in np.linspace(0, high, 6):
        x = _scale(tick, 0, high, left, right)
        parts.append(f'<line x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{height - 25}" stroke="#e5e7eb"/>'
                     f'<text x="{x:.1f}" y="{height - 8}" font-size="11" text-anchor="middle">{tick:.2f} ms</text>')
    for i, row in enumerate(rows):
        y = 30 + i * row_h
        p1, p25, p50, p75, p90, p99 = np.percentile(row.samples, [1, 25, 50, 75, 90, 99])
        color = PALETTE[i % len(PALETTE)]
        sx = lambda v: _scale(min(v, high), 0, high, left, right)  # noqa: E731
        parts.append(f'<text x="{left - 8}" y="{y + 14}" font-size="12" text-anchor="end">{_esc(row.label)}</text>')
        parts.append(f'<line x1="{sx(p1):.1f}" y1="{y + 10}" x2="{sx(p99):.1f}" y2="{y + 10}" stroke="{color}"/>')
        parts.append(f'<rect class="box" x="{sx(p25):.1f}" y="{y}" width="{max(sx(p75) - sx(p25), 1):.1f}" height="20" '
                     f'fill="{color}" fill-opacity="0.25" stroke="{color}"><title>{_esc(row.label)}: '
                     f'p25 {p25:.3f} / p50 {p50:.3f} / p75 {p75:.3f} / p90 {p90:.3f} / p99 {p99:.3f} ms</title></rect>')
        parts.append(f'<line x1="{sx(p50):.1f}" y1="{y - 2}" x2="{sx(p50):.1f}" y2="{y + 22}" stroke="{color}" stroke-width="3"/>')
        parts.append(f'<line x1="{sx(p90):.1f}" y1="{y + 2}" x2="{sx(p90):.1f}" y2="{y + 18}" stroke="{color}" stroke-dasharray="3 2"/>')
    parts.append("</svg>")
    return "".join(parts)


def bars_chart(comparison: Comparison) -> str:
    rows = comparison.rows
    bar_w, gap, top, bottom = 22, 26, 20, 120
    width = max(WIDTH, 60 + len(rows) * (2 * bar_w + gap))
    height = 340
    high = max(r.result["latency"]["p90"] for r in rows) * 1.1
    parts = [f'<svg class="chart" data-chart="p50-p90-bars" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" role="img" aria-label="p50 and p90 per device and configuration">']
    base = height - bottom
    for i, row in enumerate(rows):
        x = 50 + i * (2 * bar_w + gap)
        for j, (key, opacity) in enumerate((("p50", "0.9"), ("p90", "0.45"))):
            value = row.result["latency"][key]
            h = _scale(value, 0, high, 0, base - top)
            parts.append(f'<rect class="bar" x="{x + j * bar_w}" y="{base - h:.1f}" width="{bar_w - 2}" height="{h:.1f}" '
                         f'fill="{PALETTE[i % len(PALETTE)]}" fill-opacity="{opacity}"><title>{_esc(row.label)} {key} '
                         f'{value:.3f} ms</title></rect>')
        parts.append(f'<text x="{x + bar_w}" y="{base + 12}" font-size="10" text-anchor="end" '
                     f'transform="rotate(-40 {x + bar_w} {base + 12})">{_esc(row.label)}</text>')
    parts.append(f'<line x1="40" y1="{base}" x2="{width - 10}" y2="{base}" stroke="#9ca3af"/>')
    parts.append(f'<text x="40" y="14" font-size="11">ms (solid: p50, light: p90); top = {high:.2f} ms</text></svg>')
    return "".join(parts)


def scatter_chart(comparison: Comparison) -> str | None:
    points = [(r, (r.result.get("accuracy") or {}).get("accuracy")) for r in comparison.rows]
    points = [(r, a) for r, a in points if a is not None]
    if not points:
        return None
    height, left, right, top, bottom = 320, 70, WIDTH - 30, 20, 270
    lat = [r.result["latency"]["p50"] for r, _ in points]
    acc = [a for _, a in points]
    lat_hi = max(lat) * 1.1
    acc_lo, acc_hi = min(acc) - 0.01, min(1.0, max(acc) + 0.01)
    parts = [f'<svg class="chart" data-chart="accuracy-vs-latency" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
             f'height="{height}" role="img" aria-label="accuracy vs latency">',
             f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#9ca3af"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#9ca3af"/>',
             f'<text x="{(left + right) / 2}" y="{height - 8}" font-size="11" text-anchor="middle">p50 latency (ms)</text>',
             f'<text x="14" y="{(top + bottom) / 2}" font-size="11" transform="rotate(-90 14 {(top + bottom) / 2})">accuracy</text>']
    for tick in np.linspace(0, lat_hi, 5):
        x = _scale(tick, 0, lat_hi, left, right)
        parts.append(f'<text x="{x:.1f}" y="{bottom + 14}" font-size="10" text-anchor="middle">{tick:.2f}</text>')
    for tick in np.linspace(acc_lo, acc_hi, 5):
        y = _scale(tick, acc_lo, acc_hi, bottom, top)
        parts.append(f'<text x="{left - 6}" y="{y + 3:.1f}" font-size="10" text-anchor="end">{100 * tick:.1f}%</text>')
    for i, (row, a) in enumerate(points):
        x = _scale(row.result["latency"]["p50"], 0, lat_hi, left, right)
        y = _scale(a, acc_lo, acc_hi, bottom, top)
        parts.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{PALETTE[i % len(PALETTE)]}">'
                     f'<title>{_esc(row.label)}: {100 * a:.2f}% at {row.result["latency"]["p50"]:.3f} ms</title></circle>'
                     f'<text x="{x + 8:.1f}" y="{y - 8 - 11 * (i % 2):.1f}" font-size="10">{_esc(row.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render(comparison: Comparison, title: str = "edgekit benchmark comparison") -> str:
    table = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>" for cells in table_rows(comparison))
    charts = [("Latency distribution (box: p25–p75, thick: p50, dashed: p90, whiskers: p1–p99)",
               distribution_chart(comparison)),
              ("p50 and p90 per device and configuration", bars_chart(comparison))]
    scatter = scatter_chart(comparison)
    if scatter:
        charts.append(("Accuracy vs latency", scatter))
    notes = "".join(f"<li>{_esc(s)}</li>" for s in comparison.skipped)
    sections = "".join(f"<section><h2>{_esc(name)}</h2>{svg}</section>" for name, svg in charts)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #111827; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border-bottom: 1px solid #e5e7eb; padding: 4px 8px; text-align: right; white-space: nowrap; }}
td:first-child, th:first-child {{ text-align: left; }}
section {{ margin-top: 28px; }} h2 {{ font-size: 15px; }}
</style></head>
<body data-charts-rendered="0">
<h1>{_esc(title)}</h1>
<p>Baseline: {_esc(comparison.baseline)}. Speedup = baseline p50 / p50. Verdicts from a bootstrap 95% CI of the
ratio of medians over the raw samples{'' if comparison.threshold_pct is None else f' (regression threshold {comparison.threshold_pct}%)'}.</p>
<table><thead><tr>{''.join(f'<th>{_esc(h)}</th>' for h in HEADERS)}</tr></thead><tbody>{table}</tbody></table>
{f'<p>Skipped files:</p><ul>{notes}</ul>' if notes else ''}
{sections}
<script>
document.body.dataset.chartsRendered = String(
  Array.from(document.querySelectorAll("svg.chart")).filter(s => s.getBBox().width > 0).length);
</script>
</body></html>
"""
