"""Which artifact the runtime runs: every artifact that passed its gates, across formats and
precisions, timed side by side on the CPU that packaged it (batch 1, one thread, interleaved in
one child, each on the backend the runtime picks for it here). The order is recorded in the
manifest under this CPU kind (``Manifest.speed``); a device of the same kind runs the fastest
passing artifact by default (``device/runtime.candidates``), other devices keep their profile's
order, and ``edgekit tune`` measures there.

Comparing within a format is not enough: a model's INT8 may pay on one format and not on
another, and one format's float may be three times another's (LiteRT against ONNX Runtime on a
1-D CNN). Only the package-wide order says which artifact to run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..manifest import Manifest
from ..progress import Progress

ROUNDS, RUNS = 7, 10  # interleaved rounds; calls per round (more for fast artifacts: speed.ROUND_S)
# artifacts within this ratio of the fastest are timed again, each opened anew, in the reverse
# order, and keep the mean of their two medians: one opened interpreter of a small model can run
# 25% faster or slower than the next (where its buffers landed), and a pick between near-equal
# artifacts must not follow one instance or one pass's load
CLOSE = 1.15


@dataclass(frozen=True)
class Timed:
    """One artifact's median latency here on the backend the runtime picks for it."""

    artifact: str
    backend: str
    precision: str
    is_float: bool
    ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "backend": self.backend, "precision": self.precision,
                "float": self.is_float, "ms": round(self.ms, 4)}


def rank(manifest: Manifest, staged: Path, evaluation: dict[str, np.ndarray]) -> tuple[Timed, ...]:
    """Every passing artifact with a runtime here, fastest first; empty when fewer than two can be
    timed (one artifact has no order to record) or the runtimes could not time them."""
    from ..device.devices import detect
    from ..device.runtime import runnable
    from .speed import median_ms_each

    from ..validation_record import Verdict

    passing = {a.key for a in manifest.artifacts if manifest.validation.artifact(a.key).verdict is Verdict.PASSED}
    pairs: dict[str, tuple[Any, Path]] = {}
    for entry, backend_cls in runnable(manifest, detect()):
        if entry.key in passing and entry.key not in pairs:
            pairs[entry.key] = (backend_cls, staged / entry.path)
    if len(pairs) < 2:
        return ()
    medians = median_ms_each(pairs, evaluation, f"timing {len(pairs)} passing artifacts side by side",
                             rounds=ROUNDS, runs=RUNS)
    if medians is None:
        return ()
    fastest = min(medians.values())
    close = [key for key in pairs if medians[key] <= fastest * CLOSE]
    if len(close) >= 2:
        again = median_ms_each({key: pairs[key] for key in reversed(close)}, evaluation,
                               f"timing the {len(close)} fastest again, in the reverse order", rounds=ROUNDS, runs=RUNS)
        medians = {key: (ms + (again or {}).get(key, ms)) / 2 for key, ms in medians.items()}
    found = [Timed(key, pairs[key][0].name, manifest.artifact(key).precision, manifest.artifact(key).is_float,
                   medians[key]) for key in pairs]
    return tuple(sorted(found, key=lambda t: t.ms))


def record(timed: tuple[Timed, ...]) -> dict[str, Any]:
    """The manifest's ``speed`` entry: the order under this CPU kind, with how it was measured."""
    from ..machine.facts import DeviceFacts

    facts = DeviceFacts.read()
    return {"by_cpu_kind": {facts.cpu_kind(): {
        "order": [t.to_dict() for t in timed], "threads": 1, "batch": 1, "cpu": facts.cpu_model,
        "how": f"every artifact that passed its gates, interleaved in one process: {ROUNDS} rounds, each the "
               "median of at least 10 calls; the median of the round medians (those within "
               f"{CLOSE:g}x of the fastest timed twice, opened anew, in both orders: the mean)"}}}


PAYS = 1.05  # INT8 at most this much faster than float: said to run as fast, not to pay


def verdict_line(timed: tuple[Timed, ...]) -> str:
    """What the order means for INT8 on this CPU, in one line for the end of ``edgekit package``."""
    fastest = timed[0]
    best_int8 = next((t for t in timed if not t.is_float), None)
    best_float = next((t for t in timed if t.is_float), None)
    where = "here (this CPU, batch 1, 1 thread)"
    if best_int8 is None or best_float is None:
        return (f"fastest passing artifact {where}: {fastest.artifact} ({fastest.precision}, {fastest.ms:.3g} ms); "
                "the runtime on this CPU kind runs it by default")
    ratio = best_float.ms / best_int8.ms if best_int8.ms > 0 else float("inf")
    if fastest is best_int8 and ratio < PAYS:
        return (f"INT8 runs as fast as float {where}: {best_int8.artifact} ({best_int8.precision}) "
                f"{best_int8.ms:.3g} ms, {ratio:.2f}x the fastest float ({best_float.artifact} {best_float.ms:.3g} "
                f"ms), within what one timing can tell apart; the runtime on this CPU kind runs {best_int8.artifact} "
                "by default")
    if fastest is best_int8:
        return (f"INT8 pays {where}: {best_int8.artifact} ({best_int8.precision}) {best_int8.ms:.3g} ms, "
                f"{ratio:.2f}x the fastest float ({best_float.artifact} {best_float.ms:.3g} ms); the runtime on this "
                f"CPU kind runs {best_int8.artifact} by default")
    return (f"INT8 does not pay on this CPU: the fastest passing INT8, {best_int8.artifact} ({best_int8.precision}, "
            f"{best_int8.ms:.3g} ms), runs {ratio:.2f}x the fastest float ({best_float.artifact} "
            f"{best_float.ms:.3g} ms), so the runtime on this CPU kind runs {fastest.artifact} by default; other "
            "devices were not measured (edgekit tune there)")


def rank_and_say(manifest: Manifest, staged: Path, evaluation: dict[str, np.ndarray],
                 progress: Progress) -> dict[str, Any]:
    """The manifest's ``speed`` entry (empty when nothing could be ranked), said in one line."""
    with progress.step("Timing every passing artifact side by side"):
        timed = rank(manifest, staged, evaluation)
    if not timed:
        return {}
    progress.say(verdict_line(timed))
    return record(timed)
