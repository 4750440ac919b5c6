"""The command reference (``docs/reference/cli.md``), generated from the command-line parsers
themselves so that it cannot go stale: every ``edgekit`` command (click) and the device entry
point ``python -m edgekit.run`` with ``edgekit run/bench/tune/serve`` (argparse), each with the
``--help`` text its parser prints. ``python -m edgekit.cli_reference`` rewrites the file; a test
checks that the committed file is what this prints and that it names every option."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WIDTH = 100
DELEGATED = {"run", "bench", "tune", "serve"}  # click commands that hand their arguments to an argparse parser


def click_commands() -> Iterator[tuple[str, Any, Any]]:
    """(command path, click command, its context) for every visible edgekit command, depth first."""
    import click

    from .cli import cli

    def walk(command: click.Command, path: str, parent: click.Context | None) -> Iterator[tuple[str, Any, Any]]:
        context = click.Context(command, info_name=path.split()[-1], parent=parent, terminal_width=WIDTH,
                                max_content_width=WIDTH)
        yield path, command, context
        if isinstance(command, click.Group):
            for name in sorted(command.commands):
                sub = command.commands[name]
                if not sub.hidden and name not in DELEGATED:
                    yield from walk(sub, f"{path} {name}", context)

    yield from walk(cli, "edgekit", None)


def argparse_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    from .run import parser as run_parser
    from .server.cli import parser as serve_parser

    return [("python -m edgekit.run", run_parser()), ("edgekit serve", serve_parser())]


def option_strings() -> set[str]:
    """Every option flag of every command: what the reference must name."""
    found: set[str] = set()
    for _, command, _ in click_commands():
        for param in command.params:
            found.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("-"))
    for _, parser in argparse_parsers():
        for action in parser._actions:  # noqa: SLF001 - argparse keeps its option table here
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
             "Generated from the parsers by `python -m edgekit.cli_reference` (a test keeps it current).",
             "`edgekit run`, `edgekit bench` and `edgekit tune` take the options of `python -m edgekit.run`",
             "(with `--bench` or `--tune` implied); `edgekit serve` has its own.", ""]
    for path, command, context in click_commands():
        lines += [f"## `{path}`", "", "```text", command.get_help(context).rstrip(), "```", ""]
    for path, parser in argparse_parsers():
        lines += [f"## `{path}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs/reference/cli.md"
    from .fsutil import write_text_atomic

    write_text_atomic(target, render())
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
