"""A ``.pte`` program proven loadable before this process loads it.

ExecuTorch's runtime trusts the program it is given: a corrupt file (a package whose manifest
digest was rewritten to match, unsigned) can segfault or abort inside its C++ loader, taking the
process down with no message, where LiteRT and ONNX Runtime raise an error. So the first load of
each program's bytes happens in a child process: the program loaded, its ``forward`` method
loaded and run once on zeros. A crash there is a clear ``PackageError`` here; a success is
remembered in the local cache by the file's sha256, so each program pays the check once per
device (about as long as an import of torch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ...errors import PackageError
from ...fsutil import sha256_file

IN_CHILD_ENV = "EDGEKIT_EXECUTORCH_VERIFYING"  # set in the child: it loads directly
CHECK_TIMEOUT_S = 300.0

_CHECK = """
import sys
import numpy as np
from edgekit.errors import EdgekitError
from edgekit.formats.executorch.backend import ExecuTorchBackend
try:
    backend = ExecuTorchBackend(sys.argv[1], threads=1)
    backend.run([np.zeros([d if d > 0 else 1 for d in i.shape], i.dtype) for i in backend.inputs])
except EdgekitError as exc:
    sys.exit(f"error: {exc.message}")
"""


def verified_marker(digest: str) -> Path:
    from ...machine.cache import cache_root

    return cache_root() / "compiled" / "executorch-verified" / digest


def check_loadable(path: str) -> None:
    """Raise ``PackageError`` when loading the program at ``path`` crashes or fails in a child."""
    if os.environ.get(IN_CHILD_ENV):
        return
    digest = sha256_file(path)
    marker = verified_marker(digest)
    if marker.exists():
        return
    try:
        result = subprocess.run([sys.executable, "-c", _CHECK, str(path)], capture_output=True, text=True,
                                timeout=CHECK_TIMEOUT_S, env={**os.environ, IN_CHILD_ENV: "1"})
    except subprocess.TimeoutExpired:
        raise PackageError(f"ExecuTorch did not load {path} within {CHECK_TIMEOUT_S:.0f} s",
                           hint="the program may be corrupt: build the package again") from None
    if result.returncode != 0:
        raise PackageError(f"ExecuTorch cannot load {path}: {_why(result)}",
                           hint="the program is corrupt or was changed after packaging: build or copy the package "
                                "again (a signed package, checked with --require-signature, cannot be changed unseen)")
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:  # a read-only cache: checked again next time, never a failure
        pass


def _why(result: subprocess.CompletedProcess[str]) -> str:
    if result.returncode < 0:
        try:
            name = signal.Signals(-result.returncode).name
        except ValueError:
            name = f"signal {-result.returncode}"
        return f"its runtime crashed ({name}) loading the program"
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("error:")]
    if lines:
        said = lines[-1].removeprefix("error: ")
        return said.split(": ", 1)[1] if said.startswith("ExecuTorch cannot load") and ": " in said else said
    last = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
    return f"its runtime failed loading the program ({last[0][:300]})"
