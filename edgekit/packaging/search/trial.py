"""One search try: a configuration built into scratch, measured, judged, and recorded.

Tries never touch the package being staged: each builds into a scratch folder of its own (the
configuration kept is built again, in full, into the package at the end), so nothing is copied
back and forth and a failed try leaves nothing behind. Each try is a ``Trial``, one typed
record with one gate vocabulary (``gate_name``), written to the manifest's ``auto_fix`` list."""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...errors import EdgekitError, TimeShareError
from ...formats import Builder, BuildContext
from ...formats.plan import PrecisionPlan
from ..context import PackagingContext
from ..gates import GateFailure, Remedies
from .budget import Budget
from .candidate import Candidate, still_quantized

NAMED_FIX, LAYERS, SPEED, CONFIRMATION = "", "layer search", "speed", "confirmation"  # a Trial's stage


def gate_name(failure: GateFailure) -> str:
    """A failed gate's name in every record: ``OUTPUT CAUSE`` (``artifact`` for a whole-artifact
    gate), with the rows of a joined quantity (``output0 sqnr rows 4..83``)."""
    where = failure.output if failure.output is not None else "artifact"
    rows = f" rows {failure.channels[0]}..{failure.channels[1] - 1}" if failure.channels else ""
    return f"{where} {failure.cause}{rows}"


def margins(candidate: Candidate) -> dict[str, Any]:
    """What a record says of a build: its failed gates, each with its margin, and the worst SQNR."""
    worst = min((min(c.sqnr_db, c.worst_slice["sqnr_db"] if c.worst_slice else float("inf"))
                 for c in candidate.measured.outputs.values()), default=float("inf"))
    return {"failed_gates": [f.what for f in candidate.failures],
            "gates": {gate_name(f): round(f.margin, 4) if math.isfinite(f.margin) else None
                      for f in candidate.failures},
            "worst_sqnr_db": round(worst, 2) if math.isfinite(worst) else None,
            "outputs": output_margins(candidate.measured)}


def output_margins(measured: Any) -> dict[str, dict[str, float]]:
    """Each output's figure its gate judges, passing or not: the task metric's margin over its
    floor (a fraction: 0.01 is one point) where a task gates it, else its SQNR in dB; what the
    simulation's prediction of a build is compared with on the real artifact."""
    found: dict[str, dict[str, float]] = {}
    for name, compared in measured.outputs.items():
        task = measured.tasks.get(name)
        if task is not None and task.passed is not None and task.margin is not None and math.isfinite(task.margin):
            found[name] = {"task_margin": round(float(task.margin), 4)}
        elif math.isfinite(compared.sqnr_db):
            found[name] = {"sqnr_db": round(float(compared.sqnr_db), 2)}
    return found


@dataclass
class Trial:
    """One try of the search, as the manifest records it."""

    change: str  # the fix's flag, or the plan as flags
    stage: str = NAMED_FIX
    plan: PrecisionPlan | None = None  # the layers out of int8 in this try (layer search)
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] | None = None
    kept: bool = False
    seconds: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # the confirmation's test, samples
    budget: dict[str, Any] | None = None  # on a search's last try: its budget, as spent

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"change": self.change, "before": self.before}
        if self.stage:
            found["stage"] = self.stage
        if self.plan is not None:
            found["plan"] = dict(self.plan.layers)
        found["after"] = self.after
        found["kept"] = self.kept
        if self.seconds is not None:
            found["seconds"] = self.seconds
        if self.error is not None:
            found["error"] = self.error
        found.update(self.extra)
        if self.budget is not None:
            found["budget"] = self.budget
        return found

    def summary(self) -> dict[str, Any]:
        """The shared plan's record of a simulated try: what changed, its stage, kept, its gates."""
        return {"change": self.change, "stage": self.stage, "kept": self.kept,
                "gates": (self.after or {}).get("gates"), **({"budget": self.budget} if self.budget else {})}


class TrialRunner:
    """Builds and measures tries for one format's search, each into its own scratch folder."""

    def __init__(self, builder: Builder, run: PackagingContext, remedies: Remedies, budget: Budget,
                 workdir: Path) -> None:
        self.builder, self.run, self.remedies, self.budget = builder, run, remedies, budget
        self.scratch = workdir / "search" / builder.name  # where tries build (removed by ``close``)
        self.trials: list[Trial] = []
        self.passed: list[Candidate] = []  # the builds that passed, in the order found
        self._count = 0

    def build(self, context: BuildContext, typical: bool = True) -> Candidate:
        """``context`` built into scratch and measured (an ``EdgekitError`` when it does not build,
        leaves nothing in integers, or nothing here can measure it). A build that passes keeps its
        files until the search ends (``Candidate.files``: passing plans are timed against each
        other); the others' are removed once measured. ``typical``: whether its time predicts the
        next try's (the per-layer report's build does not: it also runs every layer of both models)."""
        self._count += 1
        scratch = self.scratch / f"try-{self._count}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        began = time.monotonic()
        kept = False
        try:
            built = self.builder.build(replace(context, package_dir=scratch))
            if not still_quantized(built):
                raise EdgekitError(f"it leaves no layer in integers ({built.artifact.precision})")
            measured = replace(self.run, staged=scratch).measure(built, self.builder, context)
            if measured is None:
                raise EdgekitError("nothing here can measure it")
            failures = self.run.check(self.builder.name, measured, self.remedies)
            kept = not failures
            # a try is judged: its outputs are not needed again (the confirmation re-cuts the
            # rebuild's), and a search keeps every try it made
            measured = replace(measured, candidate=None)
        finally:
            if not kept:
                shutil.rmtree(scratch, ignore_errors=True)  # the outputs are measured: the files are not needed
            self.budget.record(time.monotonic() - began, typical)
        candidate = Candidate(context, built, measured, failures, files=scratch if kept else None)
        if kept:
            self.passed.append(candidate)
        return candidate

    def close(self) -> None:
        """The tries' files removed (the configuration kept is built again into the package)."""
        shutil.rmtree(self.scratch, ignore_errors=True)

    def attempt(self, change: str, context: BuildContext, base: Candidate, stage: str = NAMED_FIX,
                plan: PrecisionPlan | None = None, typical: bool = True) -> tuple[Candidate | None, Trial]:
        """One try, recorded (``kept`` is for the caller to set; ``typical``: as ``build``)."""
        trial = Trial(change, stage, plan, before=margins(base))
        began = time.monotonic()
        with self.run.progress.step(f"search {self.builder.name}: {change}"):
            try:
                candidate: Candidate | None = self.build(context, typical)
            except TimeShareError:  # the format's share of --time-limit ended: it ends the format, not a try
                raise
            except EdgekitError as exc:
                candidate, trial.error = None, exc.message
        trial.seconds = round(time.monotonic() - began, 2)
        trial.after = None if candidate is None else margins(candidate)
        self.trials.append(trial)
        return candidate, trial
