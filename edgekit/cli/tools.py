"""How every edgekit command line ends: one clear error line, an exit code, a traceback only with --debug.

Both entry points (``edgekit`` and ``python -m edgekit.run``) are argparse parsers; their usage
errors are printed by ``cliopts.ArgumentParser``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import EdgekitError

EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as shells report a process SIGTERM ended

# every status a command line ends with, as --help, the command reference and the README list them
EXIT_STATUS_HELP = (
    "exit status: 0 done; 1 an edgekit error (one `error:` line and a `fix:` line; with several formats, one that "
    "failed: the package is partial); 2 a usage error; 3 --fail-on-fallback: a delegate or execution provider left "
    "ops to the CPU; 4 package written, its pass not decidable on so few held-out samples; 5 package written, its "
    "only INT8 artifacts built and never measured here; 70 an internal error (report it with --debug's traceback); "
    "130 interrupted (Ctrl-C); 143 terminated (SIGTERM: timeout, systemd, docker stop), cleaned up as for "
    "Ctrl-C. When several apply, the first of 2, 1, 4, 5 wins (a failed format is reported before a "
    "verdict).")


def closed_pipe() -> int:
    """The reader of stdout went away (``| head -1``): it has what it asked for, so the command
    ends quietly with status 0. Later writes, and the interpreter's flush at exit, go to /dev/null."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
    return 0


def finish(code: int) -> None:
    """Exit with ``code`` after flushing stdout, a closed pipe then being a quiet 0 (``closed_pipe``)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = closed_pipe()
    sys.exit(code)


def split_debug(argv: Sequence[str] | None) -> tuple[list[str], bool]:
    """``--debug`` may appear anywhere on a command line (or EDGEKIT_DEBUG=1).

    Seen once, it is kept in the environment so nested commands (``edgekit run`` forwarding to
    ``python -m edgekit.run``) and converter children show tracebacks too.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("EDGEKIT_DEBUG") == "1"
    if debug:
        os.environ["EDGEKIT_DEBUG"] = "1"
    return [a for a in args if a != "--debug"], debug


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that every ``with``
    on the way out runs: staging folders and temp folders are removed, children are stopped."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def _on_sigterm() -> Any:
    """SIGTERM raises ``Terminated`` while a command runs (the main thread only: a signal handler
    cannot be set elsewhere); the previous handler, to put back, or None where none was set."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _terminate)


def guarded(body: Callable[[], Any], debug: bool, verbose: bool = False) -> int:
    """Run ``body``; map failures to messages and exit codes, and edgekit warnings to ``warning:`` lines."""
    import signal
    import warnings

    configure_logging(debug, verbose)
    previous = warnings.showwarning
    warnings.showwarning = _show_warning
    sigterm = _on_sigterm()
    try:
        result = body()
        return result if isinstance(result, int) else 0
    except EdgekitError as exc:
        return _report(exc, debug)
    except Terminated:
        print("terminated (SIGTERM): stopped and cleaned up", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return closed_pipe()
    except (OSError, MemoryError, RuntimeError) as exc:
        from ..errors import resource_error, storage_error

        # a full or read-only disk, or an exhausted machine, is its state, not an edgekit bug
        found = (storage_error(exc) if isinstance(exc, OSError) else None) or resource_error(exc)
        if found is not None:
            return _report(found, debug)
        return _internal(exc, debug)
    except Exception as exc:
        from ..errors import missing_module_error

        missing = missing_module_error(exc)
        return _report(missing, debug) if missing is not None else _internal(exc, debug)
    finally:
        warnings.showwarning = previous
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)


def configure_logging(debug: bool, verbose: bool = False) -> None:
    """edgekit's library diagnostics (loggers under "edgekit"): quiet by default, -v for what was
    chosen (INFO), --debug for everything (DEBUG). Only edgekit's own loggers are touched; at the
    default level ``logging`` is configured when the first warning needs it (``edgekit.logs``)."""
    from ..logs import configure

    configure("DEBUG" if debug else "INFO" if verbose else "WARNING")


def _show_warning(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """edgekit's own warnings as one ``warning:`` line; others as Python prints them."""
    if category.__module__.startswith("edgekit"):
        print(relative_to_cwd(f"warning: {message}"), file=sys.stderr)
        return
    import warnings

    print(warnings.formatwarning(message, category, filename, lineno, line), file=file or sys.stderr, end="")


def _report(exc: EdgekitError, debug: bool) -> int:
    if debug:
        log = getattr(exc, "child_log", "")
        if log:
            print("---- converter log ----\n" + log.rstrip() + "\n---- end of converter log ----", file=sys.stderr)
        child = getattr(exc, "child_traceback", "")
        if child:
            print(child, file=sys.stderr)
        import traceback  # here: only --debug pays for it

        traceback.print_exc()
    print(relative_to_cwd(exc.render()), file=sys.stderr)
    return exc.exit_code


def relative_to_cwd(text: str) -> str:
    """``text`` with paths below the working directory as the user typed them (``bad.onnx``,
    not ``/home/me/project/bad.onnx``): the sources resolve every path they read."""
    import os

    cwd = os.getcwd()
    return text if cwd == os.sep else text.replace(cwd + os.sep, "")


def _internal(exc: BaseException, debug: bool) -> int:
    if debug:  # a bug in edgekit: say so plainly
        import traceback

        traceback.print_exc()
    print(f"error: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    print("  fix: rerun with --debug and report the traceback", file=sys.stderr)
    return EXIT_INTERNAL
