"""The search's time: one budget per format for the whole search (named fixes, the per-layer
report, every layer try and the rebuild of the plan kept), so a search costs a known multiple
of the plain build. A try starts only when the time left covers it and the rebuild; one that
overruns anyway is said out loud."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# Without --search-budget: this many times the plain build (its conversion, quantization and
# measurement, with its share of what every format needs first: loading the model, the data, the
# float reference), at least MIN_AUTO_S. The rebuild of the kept plan comes out of the same budget.
# Less starves real models: their per-layer report costs most of a plain build, and the rebuild
# up to one; a search that ends early (most do) costs less.
AUTO_FACTOR = 3.0
MIN_AUTO_S = 45.0
REBUILD_TRIES = 4.0  # the rebuild of the kept plan, in typical tries (a full build measured on every sample: 4.5 on the bytes classifier)


@dataclass
class Budget:
    """Seconds for one format's search, and what its tries have cost so far."""

    seconds: float
    rebuild_s: float  # what building the kept plan again for the package costs (the plain build's time)
    why: str = ""  # how the budget was set, for messages and the manifest
    started: float = field(default_factory=time.monotonic)
    tries: list[float] = field(default_factory=list)
    heavier: list[float] = field(default_factory=list)  # builds that cost more than a try (the per-layer report)
    # a count of builds the search may make (None: seconds alone): an outcome that is the same on any
    # machine, with the seconds only an outer bound
    max_tries: int | None = None

    @classmethod
    def for_search(cls, given_s: float | None, plain_s: float, shared_s: float = 0.0) -> Budget:
        """``--search-budget`` when given, else ``AUTO_FACTOR`` times the plain build with its
        share of the command's common steps (``shared_s``)."""
        if given_s is not None:
            return cls(float(given_s), plain_s, f"--search-budget {given_s:g} s")
        seconds = max(MIN_AUTO_S, AUTO_FACTOR * (plain_s + shared_s))
        share = f" and its share of loading and the float reference ({shared_s:.0f} s)" if shared_s >= 0.5 else ""
        return cls(seconds, plain_s, f"{AUTO_FACTOR:g}x the plain build ({plain_s:.0f} s){share}, at least "
                                     f"{MIN_AUTO_S:g} s")

    def spent(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.seconds - self.spent()

    def typical_try(self) -> float:
        """What the next try is expected to cost: the median of those so far; before any, the
        cheapest heavier build (a try costs less than the per-layer report's), else the plain
        build's time."""
        if not self.tries:
            return min([self.rebuild_s, *self.heavier])
        ordered = sorted(self.tries)
        return ordered[len(ordered) // 2]

    def rebuild_estimate(self) -> float:
        """What rebuilding the kept plan into the package is expected to cost: a full build (its
        companions and scheme variants too) measured on every sample, so a few tries' worth, never
        more than the plain build (which also converted the source once, and tries reuse that)."""
        return min(self.rebuild_s, REBUILD_TRIES * self.typical_try())

    def allows_try(self, reserved: int = 0) -> bool:
        """Whether a try fits in the time left with the rebuild after it (and ``reserved`` more
        tries a later stage needs)."""
        if self.max_tries is not None and len(self.tries) + len(self.heavier) + 1 + reserved > self.max_tries:
            return False
        return self.left() >= (1 + reserved) * self.typical_try() + self.rebuild_estimate()

    def capped(self, tries: int) -> Budget:
        """This budget with at most ``tries`` builds (a format's real tries after a simulated plan)."""
        from dataclasses import replace

        return replace(self, max_tries=tries, why=f"{self.why}; at most {tries} real tries after the simulated plan")

    def within_share(self, left_s: float | None, after_s: float) -> Budget:
        """This budget ended before its format's share of ``--time-limit`` (``left_s``; None: no
        share), with ``after_s`` kept for what follows the search (the float fallback, the variants),
        so a format that found a plan still ships it rather than being ended mid-search."""
        if left_s is None or left_s - 2 * after_s >= self.seconds:
            return self
        from dataclasses import replace

        return replace(self, seconds=max(0.0, left_s - 2 * after_s),
                       why=f"{self.why}; cut to what its share of --time-limit leaves")

    def record(self, seconds: float, typical: bool = True) -> None:
        """A build's time: a try's (``typical``), or one that costs more than a try."""
        (self.tries if typical else self.heavier).append(seconds)

    def to_dict(self) -> dict[str, object]:
        return {"seconds": round(self.seconds, 1), "spent_s": round(self.spent(), 1), "set_by": self.why,
                "tries": len(self.tries), **({"max_tries": self.max_tries} if self.max_tries is not None else {})}
