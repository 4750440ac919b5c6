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
from .commands import command, with_default
from .compare import add_cards, add_compare
from .handing_on import add_export, add_keys
from .options import ArgumentParser, HelpFormatter, at_least
from .this_machine import add_cache, show_profiles
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
    add_compare(commands)
    add_keys(commands)
    add_cards(commands)
    add_export(commands)
    profiles = command(commands, "profiles", show_profiles,
                       "list device profiles, which one matches this machine, and why; then the formats and "
                       "runtimes here")
    profiles.add_argument("--root", default=None, help="read device facts below this directory instead of / (tests)")
    targets = commands.add_parser("targets", formatter_class=HelpFormatter)  # the former name of profiles, unlisted
    targets.add_argument("--root", default=None)
    targets.set_defaults(handler=show_profiles, parser=targets)
    command(commands, "routes", _routes,
            "list how each kind of model reaches each format: the conversion steps, and which of --keep-float "
            "and --explain each route honours")
    add_cache(commands)
    return p


def _routes(args: argparse.Namespace) -> None:
    from ..routing.routes import ROUTE_OPTIONS, table

    for route in table():
        honours = ", ".join(ROUTE_OPTIONS[o] for o in route.honours) or "no per-layer options"
        print(f"{route.describe():<58} {honours}")


def _add_package(commands: Any) -> None:
    p = command(commands, "package", _package, "convert MODEL into a validated INT8 package for every --format",
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
                             help=with_default(option.help, option.default))
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
            text = with_default(how.help, found.default) if how.show_default and found.default not in (None, False) \
                else how.help
            p.add_argument(how.flag, dest=f"{found.name}.", action=argparse.BooleanOptionalAction,
                           default=found.default, help=text)
        elif how.low is not None:
            text = with_default(how.help, found.default) if how.show_default and found.default is not None else how.help
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
    from ..packaging.table import render, render_explanations
    from ..progress import Progress
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
    from ..validation_record import Verdict, samples_to_decide

    validation = manifest.validation
    if validation.state is Verdict.NOT_DECIDABLE:
        open_gates = {a.key: validation.artifact(a.key).undecided for a in manifest.artifacts
                      if not validation.artifact(a.key).decided}
        needed = samples_to_decide([u for gates in open_gates.values() for u in gates])
        for key, gates in open_gates.items():
            counts = "; ".join(u.counted() for u in gates)
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
