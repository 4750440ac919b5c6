"""A format's bound in the command's time: one slow format never stops the others from shipping.

``edgekit package`` with several formats lets each format in turn use what ``--time-limit``
leaves, less a minimum for each format after it (``packaging/each_format.py``): an outer bound
only, since a format's work is counted in builds. Every child step started inside
``within`` is ended at the share's end (``worker.call`` bounds its timeout by ``bound``), and the
error it raises then is a ``TimeShareError``, which ends that format, not the command: the format is
recorded as not built with the reason, and the next one starts. Searches read ``left`` to stop
their tries before the share binds, so a format that found a plan still ships it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from ..errors import TimeShareError


@dataclass(frozen=True)
class Share:
    """The moment a format's share ends, and how it was set (for the error)."""

    ends: float  # time.monotonic()
    seconds: float
    what: str  # "tflite", for the message
    why: str  # "an equal share of what --time-limit 600 s left"


_current: ContextVar[Share | None] = ContextVar("edgekit_time_share", default=None)


@contextmanager
def within(seconds: float | None, what: str, why: str) -> Iterator[Share | None]:
    """Child steps started in this block end at most ``seconds`` from now (None: no share)."""
    if seconds is None:
        yield None
        return
    share = Share(time.monotonic() + max(0.0, seconds), seconds, what, why)
    token = _current.set(share)
    try:
        yield share
    finally:
        _current.reset(token)


def left() -> float | None:
    """Seconds left in the current share (None: none is set)."""
    share = _current.get()
    return None if share is None else share.ends - time.monotonic()


def bound(timeout: float | None) -> float | None:
    """A child step's timeout cut to what the share leaves; raises at once when nothing is left."""
    remaining = left()
    if remaining is None:
        return timeout
    if remaining <= 0:
        raise ended()
    return remaining if timeout is None else min(timeout, remaining)


def ended() -> TimeShareError:
    """The error of a format whose share ended."""
    share = _current.get()
    assert share is not None
    return TimeShareError(f"{share.what} ran past its share of the command's time ({share.seconds:.0f} s: {share.why})"
                          " and was ended; the other formats are built and written")


def past() -> bool:
    """Whether a share is set and has ended (a timeout then is the share's, not the step's)."""
    remaining = left()
    return remaining is not None and remaining <= 0.05
