"""The command reference (``docs/reference/cli.md``), generated from the command-line parsers
themselves so that it cannot go stale: every ``edgekit`` command and the device entry point
``python -m edgekit.run`` (which ``edgekit run/bench/tune`` hand their arguments to) and
``edgekit serve``, each with the ``--help`` text its parser prints. ``python -m edgekit.cli.reference`` rewrites the file; a test
checks that the committed file is what this prints and that it names every option."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .options import ArgumentParser

WIDTH = 100
DELEGATED = {"run", "bench", "tune", "card", "serve"}  # commands that hand their arguments to the device parsers


HIDDEN = {"targets"}  # former names, still accepted, not documented


def edgekit_commands() -> Iterator[tuple[str, ArgumentParser]]:
    """(command path, parser) for every documented ``edgekit`` command, depth first."""
    from .main import parser

    def walk(path: str, command: ArgumentParser) -> Iterator[tuple[str, ArgumentParser]]:
        yield path, command
        for name, sub in command.commands.items():  # cliopts.ArgumentParser keeps what it declared
            if name not in DELEGATED and name not in HIDDEN:
                yield from walk(f"{path} {name}", sub)

    yield from walk("edgekit", parser())


def argparse_parsers() -> list[tuple[str, ArgumentParser]]:
    """The device parsers that ``edgekit run/bench/tune/serve`` hand their arguments to."""
    from .run import card_parser
    from .run import parser as run_parser
    from .serve import parser as serve_parser

    return [("python -m edgekit.run", run_parser()), ("edgekit card", card_parser()), ("edgekit serve", serve_parser())]


def option_strings() -> set[str]:
    """Every option flag of every command: what the reference must name."""
    found: set[str] = set()
    for _, parser in [*edgekit_commands(), *argparse_parsers()]:
        for action in parser.actions:
            found.update(action.option_strings)
    return found


def render() -> str:
    import os

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps help at the terminal's width: make it fixed
    try:
        return _render()
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def _render() -> str:
    lines = ["# Command reference", "",
             "Generated from the parsers by `python -m edgekit.cli.reference` (a test keeps it current).",
             "`edgekit run`, `edgekit bench` and `edgekit tune` take the options of `python -m edgekit.run`",
             "(with `--bench` or `--tune` implied); `edgekit card` and `edgekit serve` have their own.", ""]
    for path, parser in [*edgekit_commands(), *argparse_parsers()]:
        lines += [f"## `{path}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def main() -> None:
    """``python -m edgekit.cli.reference [FILE]``: write the reference (default: docs/reference/cli.md)."""
    if len(sys.argv) > 1 and sys.argv[1].startswith("-"):  # --help: a flag is never taken for the file to write
        print("usage: python -m edgekit.cli.reference [FILE]  (default: docs/reference/cli.md in the checkout)")
        sys.exit(0 if sys.argv[1] in ("-h", "--help") else 2)
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs/reference/cli.md"
    from ..fsutil import write_text_atomic

    write_text_atomic(target, render())
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
