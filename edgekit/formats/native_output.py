"""Runtime libraries' own C++ chatter kept out of users' output: LiteRT's "Created TensorFlow Lite
XNNPACK delegate" on every load, ExecuTorch's cpuinfo and thread-pool lines on import and on each
pool reset. Shown with ``-v`` / ``--debug`` (``logs.detail``); errors still reach the caller, as
the libraries raise them as Python exceptions."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """File descriptor 2 pointed at /dev/null for the duration, unless detail was asked for."""
    from ..logs import detail

    if detail():
        yield
        return
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (captured, closed): nothing to hide
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), fd)
        yield
    finally:
        sys.stderr.flush()  # what Python wrote in the meantime goes where fd 2 pointed
        os.dup2(saved, fd)
        os.close(saved)
