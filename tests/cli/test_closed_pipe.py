"""A reader that closes the pipe (``| head -1``) ends a command quietly: status 0, nothing on
stderr, never ``BrokenPipeError`` or an internal error (exit 70)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import EVAL, ROOT


def _piped_to_a_closed_reader(command: list[str]) -> tuple[int, str]:
    """``COMMAND | true``: the reader is gone before the first line is written."""
    quoted = " ".join(f"'{part}'" for part in command)
    result = subprocess.run(["bash", "-c", f"{quoted} 2>err.txt | true; echo ${{PIPESTATUS[0]}}"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    status = int(result.stdout.strip().splitlines()[-1])
    err = (ROOT / "err.txt").read_text()
    (ROOT / "err.txt").unlink()
    return status, err


def test_run_and_compare_end_quietly_when_the_reader_goes_away(digits_package, tmp_path):
    report = tmp_path / "r.bench.json"
    made = subprocess.run([sys.executable, "-m", "edgekit.run", str(digits_package), "--bench", "--runs", "20",
                           "--min-seconds", "0", "--no-launch", "--report", str(report)],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    for command in ([sys.executable, "-m", "edgekit.run", str(digits_package), "--input", str(EVAL), "--top-k", "1"],
                    [sys.executable, "-m", "edgekit.cli", "compare", str(report)]):
        status, err = _piped_to_a_closed_reader(command)
        assert status == 0 and "BrokenPipe" not in err and "internal error" not in err, (command, status, err)
