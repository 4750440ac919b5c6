"""How every edgekit command line ends: one clear error line, an exit code, a traceback only with --debug."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

import click

from .errors import EdgekitError

EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def invoke(command: click.Command, argv: Sequence[str] | None = None, prog_name: str = "edgekit") -> int:
    """Run a click command; map failures to messages and exit codes (``--debug`` anywhere shows tracebacks)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("EDGEKIT_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    try:
        result = command.main(args=args, prog_name=prog_name, standalone_mode=False)
        return result if isinstance(result, int) else 0
    except EdgekitError as exc:
        if debug:
            child = getattr(exc, "child_traceback", "")
            if child:
                print(child, file=sys.stderr)
            traceback.print_exc()
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug in edgekit: say so plainly
        if debug:
            traceback.print_exc()
        print(f"error: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("  fix: rerun with --debug and report the traceback", file=sys.stderr)
        return EXIT_INTERNAL


def float_list(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {text!r}") from None
