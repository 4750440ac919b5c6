"""Progress for long steps: a live spinner with elapsed time on a terminal, silence elsewhere.

Warnings are always printed (to stderr): they matter in CI logs too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

from rich.console import Console


def interactive() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


class Progress:
    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = interactive() if enabled is None else enabled
        self.console = Console(stderr=True)
        self.warnings: list[str] = []
        self.notes: list[str] = []

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[Callable[[int, int], None]]:
        """A long step; the yielded ``update(done, total)`` shows how far it is."""
        if not self.enabled:
            yield lambda done, total: None
            return
        started = time.perf_counter()
        with self.console.status(f"{text}...") as status:

            def update(done: int, total: int) -> None:
                status.update(f"{text}... {done}/{total}")

            yield update
        self.console.print(f"[green]✓[/green] {text} ({time.perf_counter() - started:.1f} s)")

    def say(self, text: str) -> None:
        """A fact the user should see before a long step (e.g. the preprocessing that will be used):
        part of the command's report, on stdout (stderr keeps warning:/error: lines only)."""
        self.notes.append(text)
        print(text, flush=True)

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        print(f"warning: {text}", file=sys.stderr)
