"""``edgekit compare`` (benchmark reports and latency cards across devices) and ``edgekit cards``
(the cards a package stores)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .commands import command, group, positive_float


def add_compare(commands: Any) -> None:
    p = command(commands, "compare", _compare,
                "compare benchmark REPORTS (files or folders of them) across devices, formats and precisions")
    p.add_argument("reports", nargs="+", help="report files, or folders of them")
    p.add_argument("--baseline", default=None,
                   help="report file name (without .json) or device name to compare against (default: the first report)")
    p.add_argument("--html", dest="html_path", type=Path, default=None,
                   help="write a self-contained HTML report with charts")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--csv", dest="csv_path", type=Path, default=None, help="write the summary as CSV")
    p.add_argument("--margin", type=positive_float(0), default=None, metavar="PCT",
                   help="equivalence margin: a difference is stated only when it is significant (bootstrap 95%% CI of "
                        "the ratio of medians, from the raw samples) and larger than PCT percent (default: 5, or "
                        "--fail-on-regression's PCT when only that is given)")
    p.add_argument("--fail-on-regression", type=positive_float(0), default=None, metavar="PCT",
                   help="exit 1 if any configuration is significantly slower than the baseline by more than PCT "
                        "percent (independent of --margin, which decides what the table calls a difference)")
    p.add_argument("--strict", action="store_true",
                   help="fail on files that are not readable reports instead of skipping them")
    p.add_argument("--allow-different-models", action="store_true", help="compare reports of different models")


def _cards_among(paths: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Latency cards among ``paths`` (card files, folders of them, packages holding them, each
    stored card checked against its manifest) and the paths left to read as reports (none when
    only cards were given)."""
    from ..device.card_files import CARD_SUFFIX, card_files, read_card
    from ..bench.compare import holds_reports
    from ..device.stored_cards import is_package, stored_cards
    from ..device.package_io import open_package

    packages = [path for path in paths if is_package(path)]
    cards = [card for package in packages for card in stored_cards(*open_package(package))]
    others = [path for path in paths if path not in packages]
    cards += [read_card(path) for path in card_files(others)]
    if not cards:
        return [], others
    left = [path for path in others if not str(path).endswith(CARD_SUFFIX)]
    return cards, (left if holds_reports(left) else [])


def _show_cards(cards: list[dict[str, Any]], html_path: Path | None) -> None:
    """Cards side by side; ``html_path``: also a page of them alone (no reports to chart)."""
    if not cards:
        return
    from ..bench.card import side_by_side
    from ..fsutil import write_text_atomic

    print(side_by_side(cards), end="")
    if html_path is not None:
        from ..bench.html import render_cards

        write_text_atomic(html_path, render_cards(cards))
        print(f"html: {html_path}")


def _print_comparison(comparison: Any) -> None:
    """The comparison as terminal tables: every configuration, then p50 per configuration and device."""
    from rich.table import Table

    from ..bench.compare import matrix, matrix_cell, shown_table
    from .console import stdout_console

    console = stdout_console(250)  # logs and files: no wrapping
    table = Table(title=f"baseline: {comparison.baseline}", title_justify="left")
    headers, rows = shown_table(comparison)
    for header in headers:
        table.add_column(header, justify="left" if header in ("device", "artifact", "backend", "precision") else "right")
    for cells in rows:
        table.add_row(*cells)
    console.print(table)
    grid = matrix(comparison)
    if len(grid.devices) > 1:
        across = Table(title="p50 per configuration and device (speedup vs baseline)", title_justify="left")
        across.add_column("configuration")
        for device in grid.devices:
            across.add_column(device, justify="right")
        for config in grid.configs:
            across.add_row(config, *(matrix_cell(comparison, grid.cells.get((config, d))) for d in grid.devices))
        console.print(across)


def _compare(args: argparse.Namespace) -> int:
    reports, baseline, html_path, markdown = args.reports, args.baseline, args.html_path, args.markdown
    csv_path, margin, fail_on_regression = args.csv_path, args.margin, args.fail_on_regression
    strict, allow_different_models = args.strict, args.allow_different_models

    from ..bench.compare import compare
    from ..bench.compare import markdown as to_markdown
    from ..fsutil import ensure_writable, write_text_atomic

    for path, what in ((html_path, "HTML report"), (csv_path, "CSV")):
        if path is not None:
            ensure_writable(path, what)
    from ..bench.stats import DEFAULT_MARGIN_PCT

    threshold = margin if margin is not None else (fail_on_regression if fail_on_regression is not None
                                                   else DEFAULT_MARGIN_PCT)
    given = list(reports)
    cards, reports = _cards_among(reports)
    if not cards and not reports:  # packages that hold no cards: nothing to compare, said
        from ..errors import EdgekitError

        raise EdgekitError(f"{', '.join(given)}: no latency cards and no benchmark reports to compare (a package "
                           "holds cards only once `edgekit card` stored them)",
                           hint="measure first: edgekit card PACKAGE (stores a card in it), or python -m edgekit.run "
                                "PACKAGE --bench --report FILE, then compare those")
    _show_cards(cards, None if reports else html_path)
    if not reports:
        return 0
    comparison = compare(list(reports), baseline, threshold, strict, allow_different_models)
    for skipped in comparison.skipped:
        print(f"warning: skipped {skipped}", file=sys.stderr)
    for note in comparison.notes:
        print(f"note: {note}", file=sys.stderr)
    from ..bench.conditions import condition_sections

    differ, _ = condition_sections(comparison.reports, comparison.baseline_source)
    for warning in comparison.warnings:  # a report's own conditions differ from nothing
        print(f"WARNING: {'conditions differ' if warning in differ else 'run conditions'}: {warning}",
              file=sys.stderr)
    if fail_on_regression is not None and not comparison.compared:
        from ..errors import InputError

        raise InputError(
            f"--fail-on-regression compared nothing: no report's configuration matches one of the baseline "
            f"{comparison.baseline!r} ({sum(1 for r in comparison.rows if comparison.is_baseline(r))} baseline "
            f"row(s), {len(comparison.rows)} in all)",
            hint="give reports of the same artifact, backend, threads and batch as the baseline's, and at least one "
                 "report besides it (--baseline names one report file or device)")
    failing = [] if fail_on_regression is None else [
        row for row in comparison.compared  # significantly slower (CI above 1) by more than PCT, whatever --margin
        if row.verdict["ci_low"] > 1 and row.verdict["ratio"] > 1 + fail_on_regression / 100]
    for row in failing:  # the table says what the gate says, never "no change" beside a REGRESSION line
        if row.verdict["verdict"] != "regression":
            row.verdict = {**row.verdict, "verdict": "regression",
                           "reason": f"{100 * (row.verdict['ratio'] - 1):.1f}% slower: past --fail-on-regression "
                                     f"{fail_on_regression:g}, inside --margin {threshold:g}"}
    if markdown:
        print(to_markdown(comparison), end="")
    else:
        _print_comparison(comparison)
    if csv_path:
        from ..bench.compare import gather
        from ..bench.report import to_csv

        found, _ = gather(list(reports), strict)
        write_text_atomic(csv_path, to_csv([r for _, r in found]))
        print(f"csv: {csv_path}")
    if html_path:
        from ..bench.html import render as render_html

        write_text_atomic(html_path, render_html(comparison, cards=cards))
        print(f"html: {html_path}")
    for row in failing:
        v = row.verdict
        print(f"REGRESSION: {row.label} is {100 * (v['ratio'] - 1):.1f}% slower than {v['baseline']} "
              f"(95% CI {100 * (v['ci_low'] - 1):.1f}% to {100 * (v['ci_high'] - 1):.1f}%; "
              f"--fail-on-regression {fail_on_regression:g})", file=sys.stderr)
    return 1 if failing else 0


def add_cards(commands: Any) -> None:
    cards_commands = group(commands, "cards", "latency cards stored in a package (edgekit card measures them)")
    add = command(cards_commands, "add", _cards_add,
                  "store CARD files (NAME.ARTIFACT.DEVICE.card.json from `edgekit card`) in PACKAGE, one per device "
                  "and artifact")
    add.add_argument("package", help="a NAME.edgekit directory or NAME.ekpkg")
    add.add_argument("cards", nargs="+", type=Path, help="card files, or folders of them")
    add.add_argument("--sign", type=Path, default=None, metavar="KEY",
                     help="sign the package again with this Ed25519 private key (needed when it is signed)")
    show = command(cards_commands, "show", _cards_show,
                   "print PACKAGE's stored cards side by side (each checked against its sha256 in the manifest)")
    show.add_argument("package")
    show.add_argument("--markdown", action="store_true", help="print each card's whole page instead of the table")


def _cards_add(args: argparse.Namespace) -> None:
    from ..device.card_files import CardError, card_files, read_card
    from ..bench.package_cards import store_cards

    files = card_files(args.cards)
    if not files:
        raise CardError(f"no card files (*.card.json) in {', '.join(str(p) for p in args.cards)}")
    for line in store_cards(args.package, [read_card(path) for path in files], args.sign):
        print(f"stored {line}")


def _cards_show(args: argparse.Namespace) -> None:
    from ..bench.card import markdown, side_by_side
    from ..device.stored_cards import stored_cards
    from ..device.package_io import open_package

    root, manifest = open_package(args.package)
    cards = stored_cards(root, manifest)
    if not cards:
        print(f"package {manifest.name} holds no latency cards (store them with `edgekit card PACKAGE --eval DATA "
              "--store` on the device, or `edgekit cards add PACKAGE CARD...`)")
        return
    print("\n".join(markdown(card) for card in cards) if args.markdown else side_by_side(cards), end="")
