"""How every edgekit command line ends: one clear error line, an exit code, a traceback only with --debug.

Kept free of click at import time: ``python -m edgekit.run`` uses argparse to start fast.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from .errors import EdgekitError

EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def split_debug(argv: Sequence[str] | None) -> tuple[list[str], bool]:
    """``--debug`` may appear anywhere on a command line (or EDGEKIT_DEBUG=1)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("EDGEKIT_DEBUG") == "1"
    return [a for a in args if a != "--debug"], debug


def guarded(body: Callable[[], Any], debug: bool) -> int:
    """Run ``body``; map failures to messages and exit codes."""
    try:
        result = body()
        return result if isinstance(result, int) else 0
    except EdgekitError as exc:
        if debug:
            child = getattr(exc, "child_traceback", "")
            if child:
                print(child, file=sys.stderr)
            traceback.print_exc()
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if type(exc).__module__.startswith("click"):
            return _click_failure(exc)
        if debug:  # a bug in edgekit: say so plainly
            traceback.print_exc()
        print(f"error: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("  fix: rerun with --debug and report the traceback", file=sys.stderr)
        return EXIT_INTERNAL


def _click_failure(exc: Exception) -> int:
    import click

    if isinstance(exc, click.exceptions.Abort):
        print("aborted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if isinstance(exc, click.ClickException):
        exc.show()
        return exc.exit_code
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code
    raise exc


def invoke(command: Any, argv: Sequence[str] | None = None, prog_name: str = "edgekit") -> int:
    """Run a click command with edgekit's error handling."""
    args, debug = split_debug(argv)
    return guarded(lambda: command.main(args=args, prog_name=prog_name, standalone_mode=False), debug)


def float_list(text: str | None) -> list[float] | None:
    import click

    if text is None:
        return None
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {text!r}") from None
