"""Helpers that build ``edgekit``'s sub-commands: each command's parser with its summary and exit
statuses, command groups, and argument types whose bad value is a usage error naming the option."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from .options import ArgumentParser, HelpFormatter
from .tools import EXIT_STATUS_HELP


def positive_float(minimum: float) -> Callable[[str], float]:
    """An argument type: a finite number of at least ``minimum``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or not value >= minimum:
            raise argparse.ArgumentTypeError(f"must be a finite number of at least {minimum:g}, got {text}")
        return value

    return parse


def with_default(text: str, default: Any) -> str:
    """An option's help with its default, as every command words it."""
    return f"{text} (default: {default})"


def command(commands: Any, name: str, handler: Callable[[argparse.Namespace], Any], summary: str,
            description: str | None = None) -> ArgumentParser:
    """A sub-command's parser, run by ``handler``; its help ends with the exit statuses."""
    sub = commands.add_parser(name, help=summary, description=description or summary[0].upper() + summary[1:] + ".",
                              formatter_class=HelpFormatter, epilog=EXIT_STATUS_HELP)  # every command's exit statuses
    sub.set_defaults(handler=handler, parser=sub)
    return sub


def group(commands: Any, name: str, summary: str) -> Any:
    """A command with sub-commands (``edgekit keys generate``): its sub-command table."""
    group = commands.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                                formatter_class=HelpFormatter)
    table = group.add_subparsers(dest=f"{name}_command", metavar="COMMAND", title="commands")
    table.required = True
    return table
