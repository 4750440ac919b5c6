"""Every command of the README's tour runs as written, in order, from a folder laid out as the
checkout is (``models/`` beside it): what a new user copies must work."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import exec_here
from tests.tour import checkout_like, run_command, tour_blocks, tour_commands, tour_package

SERVE_READY_S = 120


def serve_until_ready(command: str, cwd: Path) -> str:
    """``edgekit serve`` as written, until its REST endpoint says ready; then stopped."""
    port = re.search(r"--port (\d+)", command)
    url = f"http://127.0.0.1:{port.group(1) if port else 8080}/v2/health/ready"
    process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    try:
        deadline = time.monotonic() + SERVE_READY_S
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return "ready"
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"{command} was not ready after {SERVE_READY_S} s")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.mark.slow
def test_every_tour_command_runs_as_written(tmp_path_factory, tmp_path):
    built = tour_package(tmp_path_factory)
    work = checkout_like(tmp_path / "checkout")
    shutil.copytree(built / "dist", work / "dist", symlinks=True)
    for command in tour_commands()[1:]:
        if command.startswith("edgekit serve"):
            serve_until_ready(command, work)
            continue
        result = run_command(command, work)
        assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-3000:])
        assert "Traceback" not in result.stderr, (command, result.stderr[-3000:])


@pytest.mark.slow
def test_the_tour_python_snippet_runs_as_written(tmp_path):
    (snippet,) = [block for language, block in tour_blocks() if language == "python"]
    exec_here(snippet, checkout_like(tmp_path / "checkout"))  # raises what the snippet raises
