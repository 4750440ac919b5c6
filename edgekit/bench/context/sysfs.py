"""Reading the device's own files below a root (``EDGEKIT_SYSROOT`` or ``/``) and its vendor tools.

Every context reader goes through here, so tests fake a Raspberry Pi, a Jetson or a bare VM
with a folder of files (and a shell script for ``vcgencmd`` / ``nvpmodel``, named by
``EDGEKIT_VCGENCMD`` / ``EDGEKIT_NVPMODEL``). A file that is missing or unreadable reads as
"" and the reader says what it could not read; nothing here raises.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ...machine.facts import SYSROOT_ENV


def root() -> Path:
    return Path(os.environ.get(SYSROOT_ENV) or "/")


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip().strip("\x00")
    except OSError:
        return ""


def read_int(path: Path) -> int | None:
    text = read(path)
    try:
        return int(text)
    except ValueError:
        return None


def tool(env: str, name: str, *args: str) -> str | None:
    """A vendor tool's standard output, or None when it is absent or fails (5 s at most)."""
    executable = os.environ.get(env) or shutil.which(name)
    if not executable:
        return None
    try:
        result = subprocess.run([executable, *args], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def unreadable(reason: str) -> dict[str, str]:
    """How a signal this machine does not expose is written in a report: said, never invented."""
    return {"unreadable": reason}
