"""The README's five-minute tour as data: its blocks, its shell commands, and its first command
(package the digits model for every format) run once per test run, in a folder laid out as the
checkout is. The tour test runs the rest; ``digits_all_package`` (tests/conftest.py) is that same
package, so the suite builds the digits model for every format once."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, built_once

README = ROOT / "README.md"


def tour_blocks() -> list[tuple[str, str]]:
    """The tour's fenced blocks in order: (language, text)."""
    text = README.read_text()
    tour = text[text.index("## Five-minute tour"):text.index("\n## ", text.index("## Five-minute tour") + 1)]
    return re.findall(r"```(\w+)\n(.*?)```", tour, flags=re.S)


def tour_commands() -> list[str]:
    """Each shell command of the tour, continuation lines joined, as a user pastes it."""
    commands = []
    for language, block in tour_blocks():
        if language != "bash":
            continue
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip() and not command.lstrip().startswith("#"):
                commands.append(command.strip())
    return commands


def checkout_like(folder: Path) -> Path:
    """A working folder where the tour's relative paths resolve as in the checkout."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "models").exists():
        (folder / "models").symlink_to(ROOT / "models")
    return folder


def run_shell(command: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(["bash", "-c", f"set -eo pipefail; {command}"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def tour_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder in which the tour's first command (package for every format) ran, built once."""
    first = tour_commands()[0]
    assert first.startswith("edgekit package models/digits/digits.keras --format all"), first

    def build(folder: Path) -> Path:
        result = run_command(first, checkout_like(folder))
        assert result.returncode == 0, result.stderr[-3000:]
        return folder

    return built_once(tmp_path_factory, "tour", build)


SHELL_SYNTAX = set("$|&;<>()`*?{}\"'")


def run_command(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A tour command as written. ``edgekit package ...`` without shell syntax runs through the
    console script's main in this process (in ``cwd``), on this worker's warm converter children
    instead of a fresh process importing TensorFlow, PyTorch, ExecuTorch and coremltools again; the
    rest through bash, as a user pastes it."""
    from tests.conftest import edgekit_cli

    if command.startswith("edgekit package ") and not SHELL_SYNTAX & set(command):
        program, *argv = shlex.split(command, comments=True)
        return edgekit_cli(*argv, cwd=cwd)
    return run_shell(command, cwd)
