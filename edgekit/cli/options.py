"""Command-line options shared by ``python -m edgekit.run`` (predict, --bench, --serve) and
``edgekit serve``: defined once so their names, choices and checks never drift apart.

argparse, not click: the device entry point must start fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn


class HelpFormatter(argparse.HelpFormatter):
    """argparse's own formatter, given the terminal width: argparse would import shutil (and with
    it bz2 and lzma) for it on every ``add_argument``, a cost every cold start paid."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _terminal_columns() - 2 if width is None else width)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with edgekit's usage errors: one ``error:`` line and a ``fix:`` line naming
    ``--help``, exit 2, as ``edgekit``'s commands print them (argparse prints its whole usage
    block, 25 lines for ``python -m edgekit.run``, before the one line that matters)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # what was declared, kept here because argparse keeps its own tables private: every option
        # (the command reference reads them), each dest's first flag (for messages), each group's dests
        # by title (which mode reads them), and the sub-commands
        self.actions: list[argparse.Action] = []
        self.flags: dict[str, str] = {}
        self.groups: dict[str, list[str]] = {}
        self.commands: dict[str, ArgumentParser] = {}
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, usage_error(message, f"{self.prog} --help"))

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        return self._declared(super().add_argument(*args, **kwargs))

    def group(self, title: str) -> Any:
        """An argument group whose options are remembered by title (``groups``) and flag (``flags``)."""
        found = self.add_argument_group(title)
        dests = self.groups.setdefault(title, [])
        add = found.add_argument

        def add_argument(*args: Any, **kwargs: Any) -> argparse.Action:
            action = self._declared(add(*args, **kwargs))
            dests.append(action.dest)
            return action

        found.add_argument = add_argument
        return found

    def add_subparsers(self, **kwargs: Any) -> Any:
        table = super().add_subparsers(**kwargs)
        add = table.add_parser

        def add_parser(name: str, **more: Any) -> ArgumentParser:
            made = add(name, **more)
            self.commands[name] = made
            return made

        table.add_parser = add_parser
        return table

    def _declared(self, action: argparse.Action) -> argparse.Action:
        self.actions.append(action)
        if action.option_strings:
            self.flags.setdefault(action.dest, action.option_strings[0])
        return action


def usage_error(message: str, help_command: str) -> str:
    """How both entry points word a usage error."""
    return f"error: {message}\n  fix: see `{help_command}`\n"


def _terminal_columns() -> int:
    """What ``shutil.get_terminal_size().columns`` says: $COLUMNS, else the terminal's, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def positive_int(text: str) -> int:
    return at_least(1)(text)


def between(minimum: int, maximum: int, why: str):  # noqa: ANN201 - an argparse type
    """A whole number in ``minimum..maximum``; ``why`` says what the upper bound protects."""
    low = at_least(minimum)

    def parse(text: str) -> int:
        value = low(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {text} ({why})")
        return value

    return parse


def at_least(minimum: int):  # noqa: ANN201 - an argparse type
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def bounded(minimum: int, maximum: int):  # noqa: ANN201 - an argparse type
    def parse(text: str) -> int:
        value = at_least(minimum)(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    return parse


def worker_count(text: str) -> int:
    """Server processes: bounded like threads (a few per core), so a typo cannot fork thousands."""
    from ..device.devices import THREADS_PER_CORE_LIMIT, max_threads

    value = positive_int(text)
    limit = max_threads()
    if value > limit:
        raise argparse.ArgumentTypeError(f"must be at most {limit} on this device ({limit // THREADS_PER_CORE_LIMIT} "
                                         f"cores, at most {THREADS_PER_CORE_LIMIT} workers each), got {value}")
    return value


def thread_count(text: str) -> int:
    """A runtime thread count this device can hold (at most a few per core)."""
    from ..device.devices import check_threads
    from ..errors import EdgekitError

    value = positive_int(text)
    try:
        return check_threads(value)
    except EdgekitError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def number_list(kind: type, what: str, minimum: float | None = None):  # noqa: ANN201 - an argparse type
    """Comma-separated numbers of ``kind`` (``--mean 0.5,0.4,0.4``, ``--sweep-batch 1,8``), each at
    least ``minimum`` when given; ``what`` names them in the error."""

    def parse(text: str) -> list:
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None
        if not values and minimum is None:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}")
        if minimum is not None and (not values or any(v < minimum for v in values)):
            raise argparse.ArgumentTypeError(f"values must be at least {minimum:g}")
        return values

    return parse


def thread_counts(text: str) -> list[int]:
    """Comma-separated thread counts (``1,2,4``), each one ``thread_count``."""
    values = [thread_count(v.strip()) for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated thread counts, got {text!r}")
    return values


def artifact_key(text: str) -> str:
    """A format name or an artifact key (``onnx-float32``); the package says whether it has it."""
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,40}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an artifact key (a format such as onnx, or a key such as "
                                         "onnx-float32)")
    return text


def add_load_options(p: argparse.ArgumentParser) -> None:
    """How a package is loaded on this device: profile, artifact, backend, threads, trust."""
    from ..formats import FORMATS, backends

    p.add_argument("--profile", "--target", dest="profile", default="auto",
                   help="device profile (see `edgekit profiles`), or auto to detect this device (default); "
                        "--target is its former name")
    p.add_argument("--artifact", "--format", dest="artifact", type=artifact_key, default=None, metavar="ARTIFACT",
                   help=f"artifact to run: a format ({', '.join(FORMATS)}: its best INT8 artifact for this device, "
                        f"e.g. {'; '.join(e for f in FORMATS.values() if (e := f.device_rules.artifact_example))}) "
                        "or any artifact key of the package, such as a float fallback (default: the fastest passing "
                        "artifact measured when the package was made, on a CPU of this kind; elsewhere the profile's "
                        "first choice this device can run among those that passed validation; -v says which)")
    p.add_argument("--backend", choices=list(backends()), default=None,
                   help="runtime to use (default: the profile's first choice that is installed)")
    p.add_argument("--threads", type=thread_count, default=None, help="runtime threads (default: the profile's)")
    p.add_argument("--require-signature", action="store_true", default=None,
                   help="refuse packages not signed by a key in --trusted-keys")
    p.add_argument("--trusted-keys", default=None, metavar="DIR", help="folder of trusted KEY.pub files")
    p.add_argument("--debug", action="store_true", help="show full tracebacks (anywhere on the line)")


def refuse_mixed_modes(p: ArgumentParser, args: argparse.Namespace, modes: dict[str, list[str]]) -> None:
    """Options of a mode that is not active are an error, not silently ignored (``--serve --runs 5``).

    ``modes`` maps a mode ("--bench") to the dests only it reads; the active mode is the one whose
    flag is set, or "predict".
    """
    active = next((mode for mode in modes if mode != "predict" and getattr(args, mode.lstrip("-"), False)), "predict")
    for mode, dests in modes.items():
        if mode == active:
            continue
        given = [d for d in dests if getattr(args, d, None) != p.get_default(d)]
        if given:
            flags = ", ".join(p.flags.get(d, d) for d in given)
            where = "predicting" if mode == "predict" else mode
            p.error(f"{flags} applies to {where} only, not to {active if active != 'predict' else 'predicting'}")

