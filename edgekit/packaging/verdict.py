"""The verdict's three outcomes: an artifact *passes* when every gate's point estimate meets its
floor and the sample can support it; it is *refused* when a gate's point estimate misses its floor
(``gates.check``); it is *not decidable* when the estimates meet their floors but the sample is
too small to tell (docs/validation.md, "How much evidence a verdict needs").

Too small means:

* a rate gate (top-1 agreement, recall, decoded-sequence equality, ...) on fewer units than it
  takes to allow one disagreement (``kinds.Rate.needed``: 100 for a 99% gate, 10 for 90%): there
  a single flip moves the estimate past the floor, so a perfect score says nothing about the gate;
* any gate on fewer than ``MIN_SAMPLES_FOR_A_PASS`` validation samples.

Not decidable is not a refusal: the package is written, the artifact is recorded with
``passed: null`` and ``verdict: "not decidable"``, ``edgekit package`` exits ``EXIT_NOT_DECIDED``
and the runtime warns when it loads it.
"""

from __future__ import annotations

import math

from ..validation_record import Undecided, samples_to_decide
from .validate import Measured

MIN_SAMPLES_FOR_A_PASS = 20  # the search's halves need as many; below it no gate's pass is evidence
EXIT_NOT_DECIDED = 4  # `edgekit package`: written, but no artifact's pass could be decided on this sample
EXIT_UNVERIFIED = 5  # `edgekit package`: written, but its only INT8 artifacts were built and never measured


def undecided(measured: Measured | None, samples: int) -> tuple[Undecided, ...]:
    """The gates whose pass ``measured`` cannot support on ``samples`` validation samples (an
    empty tuple: the verdict stands). Only a pass is qualified: a refusal is decided by the miss."""
    if measured is None:
        return ()
    found = []
    if samples < MIN_SAMPLES_FOR_A_PASS:
        found.append(Undecided(None, "samples", samples, MIN_SAMPLES_FOR_A_PASS, "samples", MIN_SAMPLES_FOR_A_PASS))
    for output, task in measured.tasks.items():
        if task.passed is not True:
            continue
        for rate in task.undecidable:
            needed = rate.needed or 0
            per_sample = rate.n / samples if samples and rate.n else 1.0
            found.append(Undecided(output, rate.name, rate.n, needed, rate.unit,
                                   max(MIN_SAMPLES_FOR_A_PASS, int(math.ceil(needed / per_sample)))))
    return tuple(found)


def undecided_line(key: str, found: tuple[Undecided, ...] | list[Undecided]) -> str:
    """How a not-decidable artifact reads in the summary and on the CLI's last line."""
    return (f"{key}: not decidable on this sample ({'; '.join(u.text() for u in found)}): "
            f"{samples_to_decide(found)} held-out samples would decide it (--eval)")

