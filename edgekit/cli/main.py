"""The ``edgekit`` command line: ``package`` (build side), the device commands, and the tools
around them.

argparse, as ``python -m edgekit.run`` uses (a CLI framework would cost the device's cold start
more than argparse does): one library for both entry points, so their usage errors read the
same (one ``error:`` line and a ``fix:`` line, exit 2). ``edgekit run``, ``bench``, ``tune`` and
``serve`` hand their arguments to the device parsers unchanged.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..version import __version__
from .options import ArgumentParser, HelpFormatter, at_least
from .tools import EXIT_STATUS_HELP, guarded, split_debug

PROG = "edgekit"


def _run(argv: list[str], command: str) -> int:
    from .run import main as run_main

    extra = {"bench": ["--bench"], "tune": ["--tune"]}.get(command, [])
    return run_main([*argv, *extra], prog=f"edgekit {command}")


def _card(argv: list[str], command: str) -> int:
    """``edgekit card PACKAGE --eval DATA -o DIR``: the benchmark with ``--card DIR``."""
    from .run import card_parser
    from .run import main as run_main
    from .tools import split_debug

    card_parser().parse_args(split_debug(argv)[0])  # its own options only: --help, and a usage error for others
    given = ["--card" if arg in ("-o", "--output") else "--card=" + arg.split("=", 1)[1]
             if arg.startswith("--output=") else arg for arg in argv]
    if not any(arg == "--card" or arg.startswith("--card=") for arg in given):
        given += ["--card", "."]
    return run_main([*given, "--bench"], prog="edgekit card")


def _serve(argv: list[str], command: str) -> int:
    from .serve import main as serve_main

    return serve_main(argv)


# commands whose options are the device parsers' (python -m edgekit.run, edgekit serve)
DELEGATED: dict[str, tuple[Callable[[list[str], str], int], str]] = {
    "run": (_run, "predict on this device: same as `python -m edgekit.run` (see `edgekit run --help`)"),
    "bench": (_run, "benchmark on this device: same as `python -m edgekit.run SOURCE --bench`"),
    "tune": (_run, "measure which artifact, runtime and thread count is fastest here and remember it"),
    "card": (_card, "benchmark on this device and write a latency card per artifact (-o DIR: Markdown and JSON)"),
    "serve": (_serve, "serve packages over KServe v2 with dynamic batching (see `edgekit serve --help`)"),
}


# --- argument types: a bad value is a usage error naming the option ----------------------------


def _positive_float(minimum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or not value >= minimum:
            raise argparse.ArgumentTypeError(f"must be a finite number of at least {minimum:g}, got {text}")
        return value

    return parse


def _help(text: str, default: Any) -> str:
    return f"{text} (default: {default})"


# --- the parser ----------------------------------------------------------------------------


def parser() -> ArgumentParser:
    """Every ``edgekit`` command (the command reference is generated from this)."""
    p = ArgumentParser(prog=PROG, formatter_class=HelpFormatter,
                       description="Package trained models as calibrated INT8 artifacts and run them on edge devices: "
                                   "`edgekit package model.keras --format all --calibration data/ -o dist/`, then "
                                   "`edgekit run dist/model.edgekit --input cat.jpg`.", epilog=EXIT_STATUS_HELP)
    p.add_argument("--version", action="version", version=f"edgekit {__version__}")
    p.add_argument("--debug", action="store_true", help="show full tracebacks (anywhere on the line; also EDGEKIT_DEBUG=1)")
    commands = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    commands.required = True
    _add_package(commands)
    for name, (_, summary) in DELEGATED.items():
        commands.add_parser(name, help=summary, add_help=False)  # listed here; parsed by the device parsers
    _add_compare(commands)
    _add_keys(commands)
    _add_cards(commands)
    _add_export(commands)
    profiles = _command(commands, "profiles", _profiles,
                        "list device profiles, which one matches this machine, and why; then the formats and "
                        "runtimes here")
    profiles.add_argument("--root", default=None, help="read device facts below this directory instead of / (tests)")
    targets = commands.add_parser("targets", formatter_class=HelpFormatter)  # the former name of profiles, unlisted
    targets.add_argument("--root", default=None)
    targets.set_defaults(handler=_profiles, parser=targets)
    _command(commands, "routes", _routes,
             "list how each kind of model reaches each format: the conversion steps, and which of --keep-float "
             "and --explain each route honours")
    _add_cache(commands)
    return p


def _routes(args: argparse.Namespace) -> None:
    from ..routing.routes import ROUTE_OPTIONS, table

    for route in table():
        honours = ", ".join(ROUTE_OPTIONS[o] for o in route.honours) or "no per-layer options"
        print(f"{route.describe():<58} {honours}")


def _command(commands: Any, name: str, handler: Callable[[argparse.Namespace], Any], summary: str,
             description: str | None = None) -> ArgumentParser:
    sub = commands.add_parser(name, help=summary, description=description or summary[0].upper() + summary[1:] + ".",
                              formatter_class=HelpFormatter, epilog=EXIT_STATUS_HELP)  # every command's exit statuses
    sub.set_defaults(handler=handler, parser=sub)
    return sub


def _group(commands: Any, name: str, summary: str) -> Any:
    """A command with sub-commands (``edgekit keys generate``): its sub-command table."""
    group = commands.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                                formatter_class=HelpFormatter)
    table = group.add_subparsers(dest=f"{name}_command", metavar="COMMAND", title="commands")
    table.required = True
    return table


def _add_package(commands: Any) -> None:
    p = _command(commands, "package", _package, "convert MODEL into a validated INT8 package for every --format",
                 "Convert MODEL into a validated INT8 package for every --format. MODEL: Keras .keras/.h5, a TF "
                 "SavedModel directory, .onnx, or PyTorch (.pt2 from torch.export, a TorchScript .pt, or "
                 "file.py:factory returning an nn.Module); each reaches tflite, onnx and coreml (routes: "
                 "docs/formats.md). Every artifact is calibrated on --calibration, then checked against the float "
                 "model on held-out data; the measured accuracy, top-1 agreement, cosine similarity and SQNR are "
                 "printed and recorded in the package's manifest.json.")
    p.add_argument("model", type=Path, help="the trained model (see above)")
    for group in PACKAGE_HELP_GROUPS:  # every option as PackageOptions declares it, in its part of the help
        _declared_options(p, group)
    _format_options(p)


# the parts of `edgekit package --help`, in order (each option's Declared.group)
PACKAGE_HELP_GROUPS = ("formats", "data", "gates", "output", "input", "build")


def _format_options(p: argparse.ArgumentParser) -> None:
    """Each format's own options (``Format.options``), as flags."""
    from ..formats import build_options

    own = p.add_argument_group("format options (each read by one format)")
    for _, option in build_options():
        if option.kind is bool:
            own.add_argument(option.flag, dest=option.name, action="store_true", default=option.default,
                             help=option.help)
        elif option.choices:
            own.add_argument(option.flag, dest=option.name, choices=list(option.choices), default=option.default,
                             help=_help(option.help, option.default))
        elif option.kind is int:
            own.add_argument(option.flag, dest=option.name, type=at_least(option.minimum or 0),
                             default=option.default, metavar=option.metavar or "N", help=option.help)
        else:
            own.add_argument(option.flag, dest=option.name, default=option.default, metavar=option.metavar,
                             help=option.help)


def _declared_options(p: argparse.ArgumentParser, group: str) -> None:
    """The packaging options of one help group, as ``PackageOptions`` declares them (flag, help,
    range, how its text is read): each flag's value lands under ``FIELD.KEY`` (``_declared_values``)."""
    from ..packaging.options import declarations

    for found, how in declarations(group):
        if how.negatable:
            text = _help(how.help, found.default) if how.show_default and found.default not in (None, False) \
                else how.help
            p.add_argument(how.flag, dest=f"{found.name}.", action=argparse.BooleanOptionalAction,
                           default=found.default, help=text)
        elif how.low is not None:
            text = _help(how.help, found.default) if how.show_default and found.default is not None else how.help
            p.add_argument(how.flag, *how.aliases, dest=f"{found.name}.", type=_number(how.low, how.high, how.whole),
                           default=found.default, metavar=how.metavar or found.name.upper(), help=text)
        elif found.default is False:
            p.add_argument(how.flag, dest=f"{found.name}.", action="store_true", help=how.help)
        else:
            for flag in how.parts():
                _add_flag(p, found.name, flag, how.required)


def _add_flag(p: argparse.ArgumentParser, field: str, flag: Any, required: bool) -> None:
    """One flag of a declared option; its value lands under ``FIELD.KEY``."""
    text = flag.help() if callable(flag.help) else flag.help
    dest, metavar = f"{field}.{flag.key}", flag.metavar or (flag.key or field).upper()
    if flag.switch:
        p.add_argument(*flag.names, dest=dest, action="store_true", help=text)
        return
    p.add_argument(*flag.names, dest=dest, action="append" if flag.repeat else "store", type=flag.parse,
                   choices=list(flag.choices) if flag.choices else None, default=None, required=required,
                   metavar=flag.metavar or (None if flag.choices else metavar), help=text)


def _declared_values(args: argparse.Namespace) -> dict[str, Any]:
    """Every declared option's value from its flags (several flags combined as declared); one
    not given is left to its field's default."""
    from ..packaging.options import declarations

    values = {}
    for found, how in declarations():
        given = {name.split(".", 1)[1]: value for name, value in vars(args).items()
                 if name.startswith(f"{found.name}.")}
        value = how.value(given)
        if value is not None:
            values[found.name] = value
    return values


def _number(low: float, high: float | None, whole: bool) -> Callable[[str], float]:
    """An argparse type for a declared number: finite and from ``low`` to ``high``."""
    def parse(text: str) -> float:
        try:
            value: float = int(text) if whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if whole else 'a number'}, got {text!r}") \
                from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low:g}, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:g}, got {text}")
        return value

    return parse


def _package(args: argparse.Namespace) -> int:
    from ..formats import FORMATS, build_options
    from ..packaging import PackageOptions, build_package, partial_error
    from ..progress import Progress
    from ..packaging.table import render, render_explanations
    from .console import stdout_console

    given = _declared_values(args)
    explain, allow_partial = given["explain"], given["allow_partial"]  # read again after building
    options = PackageOptions(
        model=str(args.model), **given,
        format_options={option.name: getattr(args, option.name) for _, option in build_options()},
    )
    result = build_package(options, Progress())
    render(result.manifest, stdout_console(120))
    if explain:
        render_explanations(result.manifest, stdout_console(120))
    for artifact in result.manifest.artifacts:
        fmt = FORMATS.get(artifact.format)
        for note in fmt.notes(artifact.details) if fmt is not None and fmt.notes is not None else ():
            print(f"{'warning' if note.warning else 'note'}: {artifact.key}: {note.text}",
                  file=sys.stderr if note.warning else sys.stdout)
        float_ops = [] if artifact.precision.startswith("float") else artifact.float_ops  # a float artifact: all of it
        tail = [op for op in float_ops if op.get("tail")]
        inner = [op for op in float_ops if not op.get("tail")]
        if inner:
            print(f"note: {artifact.key} keeps these ops in float: {_package_float_ops(inner)}")
        if tail:
            ops = _package_float_ops(tail)
            print(f"note: {artifact.key} computes its output tail in float after the last INT8 op: {ops} "
                       "(as ONNX Runtime and CoreML run it; the label says int8+float tail)")
    print(f"package: {result.path}")
    if result.archive:
        print(f"archive: {result.archive}")
    from ..validation_record import Verdict

    if result.manifest.validation.state is Verdict.UNVERIFIED:
        print("warning: no artifact of this package could be measured here: it has no verdict (its manifest says "
              "passed: null, state: not measured)", file=sys.stderr)
    elif result.manifest.validation.state is Verdict.REFUSED:
        print("warning: validation failed (see above); the package was kept because of --allow-accuracy-drop "
                   "and its manifest says passed: false", file=sys.stderr)
    if result.failed and not allow_partial:
        raise partial_error(result)
    return _verdict_exit(result.manifest)


def _verdict_exit(manifest: Any) -> int:
    """The exit status of a written package whose verdict is not a pass: not decidable (too few
    held-out samples: EXIT_NOT_DECIDED), or INT8 only built, never measured (EXIT_UNVERIFIED)."""
    from ..packaging.verdict import EXIT_NOT_DECIDED, EXIT_UNVERIFIED
    from ..validation_record import Verdict

    validation = manifest.validation
    if validation.state is Verdict.NOT_DECIDABLE:
        open_gates = {a.key: validation.artifact(a.key).undecided for a in manifest.artifacts
                      if not validation.artifact(a.key).decided}
        needed = max((int(u.get("samples_needed") or 0) for gates in open_gates.values() for u in gates), default=0)
        for key, gates in open_gates.items():
            counts = "; ".join(f"{u.get('gate')}: {u.get('have')} {u.get('unit')}, {u.get('needed')} needed"
                               for u in gates)
            print(f"{key}: not decidable ({counts})", file=sys.stderr)
        print(f"not decidable: the package was written, but its gates were met on too few held-out samples to decide "
              f"a pass (manifest: passed null, state not decidable); {needed} held-out samples would decide it "
              f"(--eval DATA with {needed}+ samples) [exit {EXIT_NOT_DECIDED}]", file=sys.stderr)
        return EXIT_NOT_DECIDED
    integer = [a for a in manifest.artifacts if a.precision != "float" and not a.precision.startswith("float")]
    verified = [a for a in integer if validation.artifact(a.key).verdict is Verdict.PASSED]
    unverified = [a for a in integer if not validation.artifact(a.key).measured]
    if unverified and not verified:
        for artifact in unverified:
            print(f"{artifact.key}: built, unverified {artifact.precision}: "
                  f"{validation.artifact(artifact.key).reason or 'not measured here'}", file=sys.stderr)
        print("unverified: no INT8 artifact of this package was measured against the float model here; measure it "
              "where its runtime runs (on macOS for CoreML: python -m edgekit.run PACKAGE --artifact "
              f"{unverified[0].format} --eval DATA) before shipping it [exit {EXIT_UNVERIFIED}]", file=sys.stderr)
        return EXIT_UNVERIFIED
    return 0


def _add_compare(commands: Any) -> None:
    p = _command(commands, "compare", _compare,
                 "compare benchmark REPORTS (files or folders of them) across devices, formats and precisions")
    p.add_argument("reports", nargs="+", help="report files, or folders of them")
    p.add_argument("--baseline", default=None,
                   help="report file name (without .json) or device name to compare against (default: the first report)")
    p.add_argument("--html", dest="html_path", type=Path, default=None,
                   help="write a self-contained HTML report with charts")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--csv", dest="csv_path", type=Path, default=None, help="write the summary as CSV")
    p.add_argument("--margin", type=_positive_float(0), default=None, metavar="PCT",
                   help="equivalence margin: a difference is stated only when it is significant (bootstrap 95%% CI of "
                        "the ratio of medians, from the raw samples) and larger than PCT percent (default: 5, or "
                        "--fail-on-regression's PCT when only that is given)")
    p.add_argument("--fail-on-regression", type=_positive_float(0), default=None, metavar="PCT",
                   help="exit 1 if any configuration is significantly slower than the baseline by more than PCT "
                        "percent (independent of --margin, which decides what the table calls a difference)")
    p.add_argument("--strict", action="store_true",
                   help="fail on files that are not readable reports instead of skipping them")
    p.add_argument("--allow-different-models", action="store_true", help="compare reports of different models")


def _cards_among(paths: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Latency cards among ``paths`` (card files, folders of them, packages holding them, each
    stored card checked against its manifest) and the paths left to read as reports (none when
    only cards were given)."""
    from ..bench.card import CARD_SUFFIX, card_files, read_card
    from ..bench.compare import holds_reports
    from ..bench.stored_cards import is_package, stored_cards
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
        from ..bench.report import to_csv
        from ..bench.compare import gather

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


def _add_keys(commands: Any) -> None:
    keys_commands = _group(commands, "keys", "signing keys for packages (Ed25519)")
    generate = _command(keys_commands, "generate", _keys_generate,
                        "write a private KEY (mode 0600) and its public KEY.pub (give KEY.pub to devices)")
    generate.add_argument("key", type=Path, help="where to write the private key")
    generate.add_argument("--force", action="store_true", help="overwrite an existing key")
    sign = _command(commands, "sign", _sign, "sign PACKAGE (a NAME.edgekit directory or NAME.ekpkg) with KEY")
    sign.add_argument("package", type=Path)
    sign.add_argument("--key", required=True, type=Path, help="Ed25519 private key")
    verify = _command(commands, "verify", _verify,
                      "check PACKAGE's signature and every artifact's sha256 against its manifest")
    verify.add_argument("package")
    verify.add_argument("--trusted-keys", type=Path, default=None,
                        help="folder of trusted KEY.pub files (default: accept any valid signature)")
    verify.add_argument("--allow-unsigned", action="store_true", help="check the artifacts of an unsigned package")


def _add_cards(commands: Any) -> None:
    cards_commands = _group(commands, "cards", "latency cards stored in a package (edgekit card measures them)")
    add = _command(cards_commands, "add", _cards_add,
                   "store CARD files (NAME.ARTIFACT.DEVICE.card.json from `edgekit card`) in PACKAGE, one per device "
                   "and artifact")
    add.add_argument("package", help="a NAME.edgekit directory or NAME.ekpkg")
    add.add_argument("cards", nargs="+", type=Path, help="card files, or folders of them")
    add.add_argument("--sign", type=Path, default=None, metavar="KEY",
                     help="sign the package again with this Ed25519 private key (needed when it is signed)")
    show = _command(cards_commands, "show", _cards_show,
                    "print PACKAGE's stored cards side by side (each checked against its sha256 in the manifest)")
    show.add_argument("package")
    show.add_argument("--markdown", action="store_true", help="print each card's whole page instead of the table")


def _cards_add(args: argparse.Namespace) -> None:
    from ..bench.card import CardError, card_files, read_card
    from ..bench.package_cards import store_cards

    files = card_files(args.cards)
    if not files:
        raise CardError(f"no card files (*.card.json) in {', '.join(str(p) for p in args.cards)}")
    for line in store_cards(args.package, [read_card(path) for path in files], args.sign):
        print(f"stored {line}")


def _cards_show(args: argparse.Namespace) -> None:
    from ..bench.card import markdown, side_by_side
    from ..bench.stored_cards import stored_cards
    from ..device.package_io import open_package

    root, manifest = open_package(args.package)
    cards = stored_cards(root, manifest)
    if not cards:
        print(f"package {manifest.name} holds no latency cards (store them with `edgekit card PACKAGE --eval DATA "
              "--store` on the device, or `edgekit cards add PACKAGE CARD...`)")
        return
    print("\n".join(markdown(card) for card in cards) if args.markdown else side_by_side(cards), end="")


def _keys_generate(args: argparse.Namespace) -> None:
    from ..device.signing import generate_keys

    private, public, kid = generate_keys(args.key, args.force)
    print(f"private key: {private}\npublic key:  {public}\nkey id: {kid}")


def _verdict_warning(package: Any, doing: str) -> None:
    """A package whose verdict is not a pass (not decidable, failed and kept, not measured) is said
    before it is signed or handed on: the signature vouches for its bytes, not for a pass."""
    from ..device.package_io import open_package

    from ..validation_record import Verdict

    _, manifest = open_package(package)
    state = manifest.validation.state
    if state is Verdict.PASSED:
        return
    why = {Verdict.NOT_DECIDABLE: "its gates were met on too few held-out samples to decide a pass",
           Verdict.REFUSED: "it failed its gates and was kept with --allow-accuracy-drop",
           Verdict.UNVERIFIED: "none of its artifacts could be measured where it was built"}[state]
    print(f"warning: {doing} a package whose verdict is {state.value.upper()} ({why}; manifest validation.state: "
          f"{state.value!r}); measure it before shipping: python -m edgekit.run {package} --eval DATA", file=sys.stderr)


def _sign(args: argparse.Namespace) -> None:
    from ..device.package_io import sign_package

    _verdict_warning(args.package, "signing")
    print(f"signed {args.package} with key {sign_package(args.package, args.key)}")


def _verify(args: argparse.Namespace) -> None:
    from ..device.package_io import verify_package

    for line in verify_package(args.package, str(args.trusted_keys) if args.trusted_keys else None,
                               args.allow_unsigned):
        print(line)


def _add_export(commands: Any) -> None:
    export_commands = _group(commands, "export", "hand a package to other serving systems")
    p = _command(export_commands, "triton", _export_triton,
                 "write PACKAGE as a Triton model repository entry",
                 "Write PACKAGE as a Triton model repository entry: config.pbtxt + 1/model.onnx for Triton's "
                 "onnxruntime backend, or config.pbtxt + 1/model.py + 1/package/ for its Python backend.")
    p.add_argument("package")
    p.add_argument("--output", "-o", required=True, type=Path, help="Triton model repository directory")
    p.add_argument("--max-batch-size", type=at_least(1), default=8, help=_help("Triton's max_batch_size", 8))
    p.add_argument("--max-queue-delay-us", type=at_least(0), default=500,
                   help=_help("Triton's dynamic batching delay, microseconds", 500))
    p.add_argument("--instances", type=at_least(1), default=1, help=_help("model instances", 1))
    p.add_argument("--gpu", action="store_true", help="KIND_GPU instances with the TensorRT accelerator (INT8)")
    p.add_argument("--kserve", dest="kserve_uri", default=None, metavar="STORAGE_URI",
                   help="also write a KServe InferenceService manifest serving the repository from STORAGE_URI")
    p.add_argument("--backend", choices=["onnxruntime", "python"], default="onnxruntime",
                   help=_help("onnxruntime: Triton runs the ONNX artifact; python: Triton's Python backend runs the "
                              "package with edgekit's runtime (any artifact)", "onnxruntime"))
    p.add_argument("--artifact", default=None, help="--backend python: the artifact to run (default: the best here)")
    p.add_argument("--threads", type=at_least(1), default=None, help="--backend python: runtime threads")
    p.add_argument("--python-path", default=None, metavar="DIRS",
                   help="--backend python: where edgekit is installed if the backend's Python lacks it (e.g. a "
                        "venv's site-packages; os.pathsep-separated)")
    p.add_argument("--force", action="store_true", help="replace an existing model directory")


def _export_triton(args: argparse.Namespace) -> None:
    from ..export.triton import export_triton

    _verdict_warning(args.package, "exporting")

    path = export_triton(args.package, str(args.output), args.max_batch_size, args.gpu, args.instances,
                         args.max_queue_delay_us, args.kserve_uri, args.force, backend=args.backend,
                         artifact=args.artifact, threads=args.threads, python_path=args.python_path)
    print(f"triton model: {path}")
    if args.kserve_uri:
        print(f"kserve: {args.output / (path.name + '.inferenceservice.yaml')}")


def _profiles(args: argparse.Namespace) -> None:
    root = args.root

    from ..device.devices import DeviceFacts, detect, load_profiles, profile_dirs
    from ..formats import FORMATS

    facts = DeviceFacts.read(root)
    profiles = load_profiles()
    chosen = detect(facts, profiles)
    runs_here = [said for f in FORMATS.values() if (said := f.device_rules.describe_device(facts))]
    print(f"this machine: {facts.os}/{facts.arch}, {facts.cpu_count} cores, "
               f"device-tree model {facts.device_tree_model or '(none)'}, "
               f"Jetson {'yes' if facts.nv_tegra_release else 'no'}, NVIDIA driver {'yes' if facts.cuda else 'no'}"
               + "".join(f", {said}" for said in runs_here))
    for profile in sorted(profiles.values(), key=lambda p: (-p.priority, p.name)):
        matched, reasons = profile.match(facts)
        mark = "*" if profile.name == chosen.name else ("+" if matched else " ")
        prefer = ", ".join(f"{a}/{b}" for a, b in profile.prefer)
        print(f"{mark} {profile.name:<18} priority {profile.priority:<3} {profile.description}")
        builds = "".join(f"{name} builds {', '.join(b)}; " for name, b in profile.quantization.items())
        print(f"    prefers {prefer}; threads {profile.threads or 'all'}; {builds}{profile.path}")
        for reason in reasons:
            print(f"    {reason}")
    print(f"selected: {chosen.name}" + ("" if chosen.name in profiles else f" ({chosen.description})"))
    print("profiles are read from: " + ", ".join(str(d) for d in profile_dirs()))

    print("formats:")
    for fmt in FORMATS.values():
        runtimes = ", ".join(f"{b.name} ({b.available() or 'not installed: ' + fmt.extra})" for b in fmt.backends)
        print(f"  {fmt.name:<8} {fmt.description}; runs on {runtimes}")


def _add_cache(commands: Any) -> None:
    cache_commands = _group(commands, "cache", "inspect and manage the local cache (EDGEKIT_CACHE_DIR)")
    _command(cache_commands, "ls", _cache_ls, "list cache entries, least recently used first")
    _command(cache_commands, "verify", _cache_verify,
             "check every entry's checksums; remove the ones that fail (they are rebuilt on next use)")
    _command(cache_commands, "clear", _cache_clear, "remove every cache entry")


def _cache_ls(args: argparse.Namespace) -> None:
    import time

    from ..machine import cache

    found = sorted(cache.entries(), key=lambda e: e.last_used)
    for entry in found:
        age = time.time() - entry.last_used
        print(f"{entry.kind:<9} {entry.key[:40]:<40} {entry.bytes / 1024:>10.1f} KiB  used {age / 60:.0f} min ago")
    total = sum(e.bytes for e in found)
    print(f"{len(found)} entries, {total / (1 << 20):.1f} MiB of {cache.max_bytes() / (1 << 20):.0f} MiB "
          f"in {cache.cache_root()}")


def _cache_verify(args: argparse.Namespace) -> None:
    from ..device.cache_verify import verify_all

    from ..device.profile_store import CACHE_NAME, verify_cache

    bad = [(f"{entry.kind}/{entry.key}", problem) for entry, problem in verify_all()]
    profiles = verify_cache()
    bad += [(CACHE_NAME, profiles)] if profiles else []
    for name, problem in bad:
        print(f"removed {name}: {problem}")
    print(f"{len(bad)} bad entries removed" if bad else "all entries verified")


def _cache_clear(args: argparse.Namespace) -> None:
    from ..machine import cache

    print(f"removed {cache.clear()} entries from {cache.cache_root()}")


# options whose values may begin with "-" (a preset named -1..1): argparse takes such a value for an
# option unless it is joined with "=", so "--preprocessing -1..1", as --help lists it, is joined here
DASH_VALUE_OPTIONS = ("--preprocessing",)


def joined_dash_values(args: list[str]) -> list[str]:
    """``--preprocessing -1..1`` as ``--preprocessing=-1..1``."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in DASH_VALUE_OPTIONS and i + 1 < len(args) and args[i + 1].startswith("-") \
                and not args[i + 1].startswith("--"):
            out.append(f"{args[i]}={args[i + 1]}")
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


def run(argv: Sequence[str] | None = None) -> int:
    """``edgekit ARGS`` in this process: the exit code (0, 1 for an edgekit error, 2 for a usage error)."""
    args_list, debug = split_debug(argv)
    if args_list and args_list[0] in DELEGATED:
        handler, _ = DELEGATED[args_list[0]]
        return handler(args_list[1:] + (["--debug"] if debug else []), args_list[0])
    try:
        args = parser().parse_args(joined_dash_values(args_list))
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 0
    clash = contradictory_flags(args_list)
    return guarded(lambda: _refuse(clash) if clash else args.handler(args), debug)


# flags that say opposite things besides the --X / --no-X pairs
OPPOSITES = (("--allow-float-ops", "--full-integer"),)


def contradictory_flags(arguments: Sequence[str]) -> str:
    """Two flags of one command line that say opposite things (``--also-float --no-also-float``,
    ``--allow-float-ops --full-integer``), which argparse settles silently by taking the last;
    "" when there are none."""
    given = {a.split("=", 1)[0] for a in arguments if a.startswith("--")}
    pairs = [(f"--{flag[5:]}", flag) for flag in sorted(given) if flag.startswith("--no-")] + list(OPPOSITES)
    return "; ".join(f"{a} and {b}" for a, b in pairs if a in given and b in given)


def _refuse(clash: str) -> int:
    from ..errors import OptionError

    raise OptionError(f"{clash} say opposite things", hint="give one of them")


def _package_float_ops(ops: list[dict]) -> str:
    """Float ops by op and layer, at most ``LISTED_OPS`` of them (an unrolled loop has thousands)."""
    named = sorted({f"{op['op']} ({op['layer']})" for op in ops})
    more = len(named) - LISTED_OPS
    return ", ".join(named[:LISTED_OPS]) + (f" and {more} more (the manifest's float_ops lists each)" if more > 0 else "")


LISTED_OPS = 20


def main() -> None:
    """The console script."""
    from .tools import finish

    finish(run())


if __name__ == "__main__":
    main()
