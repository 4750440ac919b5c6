"""edgekit's loggers, without paying for ``logging`` on the device's cold start.

``python -m edgekit.run`` starts in a fraction of a second and ``logging`` (with ``threading``,
``traceback``, ``string``) is a few milliseconds of it. Debug and info records only reach anyone
when the application configured logging, which means it imported the module: ``quiet`` returns
the logger then and None otherwise. Warnings always import it (Python's last-resort handler
prints them to stderr even when nothing is configured).
"""

from __future__ import annotations

import sys
from typing import Any


_pending: str | None = None  # a level the CLI asked for, applied when logging is first needed
_detail = False  # the CLI asked for detail (-v or --debug): runtimes' own load messages are shown too


def configure(level: str) -> None:
    """edgekit's handler on the "edgekit" logger at ``level``; for WARNING (the CLI's default)
    only when a warning is first logged, so a quiet run never imports ``logging``."""
    global _pending, _detail
    _detail = level in ("INFO", "DEBUG")
    if level == "WARNING" and "logging" not in sys.modules:
        _pending = level
        return
    _apply(level)


def _apply(level: str) -> None:
    import logging

    logger = logging.getLogger("edgekit")
    logger.setLevel(level)
    if not any(getattr(h, "_edgekit", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler._edgekit = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False


def detail() -> bool:
    """Whether the command asked for detail (``-v``, ``--debug``): a runtime library's own messages
    (LiteRT's delegate lines) are shown then, hidden otherwise."""
    return _detail


def quiet(name: str) -> Any | None:
    """The logger for debug/info records, or None when nothing could show them."""
    logging = sys.modules.get("logging")
    return logging.getLogger(name) if logging is not None else None


def loud(name: str) -> Any:
    """The logger for warnings, which are shown whether or not logging was configured."""
    global _pending
    import logging

    if _pending is not None:
        level, _pending = _pending, None
        _apply(level)
    return logging.getLogger(name)
