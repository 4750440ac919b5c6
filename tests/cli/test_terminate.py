"""SIGTERM (what timeout, systemd, docker stop and CI cancellation send) ends a command as Ctrl-C
does: one line, exit 143, and nothing left behind in ``-o`` or the temp folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.conftest import CALIBRATION, DIGITS_MODEL

WORK_WAIT_S = 120


def test_sigterm_during_package_cleans_up_and_says_so(tmp_path):
    out, temp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    temp.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "edgekit.cli", "package", str(DIGITS_MODEL), "-c", str(CALIBRATION), "-o", str(out),
         "--format", "tflite"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(temp), "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        deadline = time.monotonic() + WORK_WAIT_S
        while not any(temp.iterdir()) and time.monotonic() < deadline:  # the run's work folder
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        time.sleep(2.0)  # into the model's loading or a conversion, a child running
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr[-2000:]
    assert "terminated (SIGTERM)" in stderr and "Traceback" not in stderr
    assert [p.name for p in out.iterdir()] == []
    # LiteRT writes a session id file (.ses) in the temp folder of any process that loads it
    assert [p.name for p in temp.iterdir() if p.name != ".ses"] == []
