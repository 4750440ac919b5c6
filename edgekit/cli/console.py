"""The rich console edgekit's commands print tables with: a closed pipe (``| head -1``) reaches
the command's error handling as ``BrokenPipeError`` and ends it quietly with status 0
(``tools.closed_pipe``), where rich's own handling would exit 1."""

from __future__ import annotations

from rich.console import Console


class PipeConsole(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def stdout_console(width_when_not_a_terminal: int) -> Console:
    """A console on stdout: the terminal's width, or ``width_when_not_a_terminal`` for logs and files."""
    return PipeConsole(width=None if Console().is_terminal else width_when_not_a_terminal)

