"""The search's work: one budget per format for the whole search (named fixes, the per-layer
report, every layer try and the rebuild of the plan kept). By default it is counted in builds,
so the same command on the same data makes the same tries, finds the same plan and reaches the
same verdict on a quiet machine and on a loaded one; seconds bound it only when the user asks
(``--search-budget``) or when the command's ``--time-limit`` binds (said when it does). A try
starts only when the budget covers it and the rebuild; one that overruns anyway is said."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..search_settings import DEFAULT_SETTINGS, SearchSettings

# Without --search-budget: ``SearchSettings.tries`` builds (the per-layer report, each try; the
# rebuild of the kept plan comes after them). A layer search on a real CNN finds a plan in 10-20
# tries (an emotion CNN: 8 tries found nothing, a longer search found a plan passing 119 of 120)


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
    limited: bool = False  # the command's --time-limit bounds it in seconds too
    limit_bound: bool = False  # that bound stopped a try the count allowed: the outcome depended on time
    rebuild_tries: float = DEFAULT_SETTINGS.rebuild_tries  # the rebuild of the kept plan, in typical tries
    rebuilds: int = 0  # the kept plan (and its fallbacks) built again into the package

    def builds(self) -> int:
        """Every build made under this budget: the tries, the heavier builds and the rebuilds. The
        search's one try counter (a builder counts nothing)."""
        return len(self.tries) + len(self.heavier) + self.rebuilds

    @classmethod
    def for_search(cls, given_s: float | None, plain_s: float, settings: SearchSettings = DEFAULT_SETTINGS) -> Budget:
        """``--search-budget`` seconds when given, else ``settings.tries`` builds (no seconds: the
        outcome is the machine's load's no more)."""
        if given_s is not None:
            return cls(float(given_s), plain_s, f"--search-budget {given_s:g} s", rebuild_tries=settings.rebuild_tries)
        return cls(math.inf, plain_s, f"{settings.tries} builds (--search-budget SECONDS bounds it in time instead)",
                   max_tries=settings.tries, rebuild_tries=settings.rebuild_tries)

    def describe(self) -> str:
        """How the budget was set, with its seconds where it has any."""
        return self.why if not math.isfinite(self.seconds) else f"{self.why}: {self.seconds:.0f} s"

    def ended_by(self) -> str:
        """What ended a search that ran out: the count of builds, or the time --time-limit left
        (then the outcome depends on this machine's speed, which is said)."""
        if self.limit_bound:
            return ("--time-limit ended it before its count of builds (on a faster or quieter machine it would try more; "
                    "--time-limit 0 lifts the bound)")
        return "--search-budget SECONDS gives it more" if math.isfinite(self.seconds) and self.max_tries is None \
            else "--search-budget SECONDS searches by time instead"

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
        return min(self.rebuild_s, self.rebuild_tries * self.typical_try())

    def allows_try(self, reserved: int = 0) -> bool:
        """Whether a try fits in the time left with the rebuild after it (and ``reserved`` more
        tries a later stage needs)."""
        if self.max_tries is not None and len(self.tries) + len(self.heavier) + 1 + reserved > self.max_tries:
            return False
        fits = self.left() >= (1 + reserved) * self.typical_try() + self.rebuild_estimate()
        if not fits and self.limited:
            self.limit_bound = True
        return fits

    def capped(self, tries: int) -> Budget:
        """This budget with at most ``tries`` builds (a format's real tries after a simulated plan)."""
        from dataclasses import replace

        return replace(self, max_tries=tries, why=f"{self.why}; at most {tries} real tries after the simulated plan")

    def within_share(self, left_s: float | None, after_s: float) -> Budget:
        """This budget bounded by the time ``--time-limit`` leaves this format too (``left_s``;
        None: no limit), with ``after_s`` kept for what follows the search (the float fallback, the
        variants), so a format that found a plan still ships it rather than being ended mid-search.
        Where that bound stops a try its count allowed, the outcome depends on the machine's speed:
        ``limit_bound`` records it, and the search says so."""
        if left_s is None:
            return self
        room = max(0.0, left_s - 2 * after_s)
        if room >= self.seconds:
            return self
        from dataclasses import replace

        return replace(self, seconds=room, limited=True,
                       why=f"{self.why}; at most {room:.0f} s, what --time-limit leaves this format")

    def record(self, seconds: float, typical: bool = True) -> None:
        """A build's time: a try's (``typical``), or one that costs more than a try."""
        (self.tries if typical else self.heavier).append(seconds)

    def to_dict(self) -> dict[str, object]:
        return {"seconds": round(self.seconds, 1) if math.isfinite(self.seconds) else None,
                "spent_s": round(self.spent(), 1), "set_by": self.why,
                **({"time_limit_bound": True} if self.limit_bound else {}),
                "tries": len(self.tries), **({"max_tries": self.max_tries} if self.max_tries is not None else {})}
