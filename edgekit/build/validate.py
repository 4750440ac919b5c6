"""Stage 5: every artifact against the float model, and the gates a package must pass.

Outputs are compared on the validation samples (device runtime on this machine, or outputs
a builder computed itself). A package fails when an INT8 accuracy drops more than
``--max-accuracy-drop`` or when an artifact's outputs carry no signal (constant).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import Builder, BuildResult, get_backend
from ..quantize.metrics import OutputComparison, compare_outputs
from ..model import align
from .data import PreparedData
from .options import PackageOptions


@dataclass(frozen=True)
class Measured:
    """One artifact against the float model: every output, and the summary the table shows (the
    labelled output's, else the worst output's: a collapsed head must not hide behind a good one)."""

    outputs: dict[str, OutputComparison]
    summary: OutputComparison

    @property
    def degenerate(self) -> dict[str, str]:
        return {name: c.degenerate for name, c in self.outputs.items() if c.degenerate}


def measure(built: BuildResult, builder: Builder, staged: Path, data: PreparedData,
            reference: dict[str, np.ndarray]) -> Measured | None:
    """The artifact's outputs vs the float reference; None when nothing here can run it."""
    names = list(reference)
    if built.evaluated_npy is not None and get_backend(builder.backend).available() is None:
        candidate = {names[0]: np.load(built.evaluated_npy)} if len(names) == 1 else None
    else:
        candidate = _run_artifact(staged / built.artifact.path, builder.backend, data.evaluation, names, built)
    if candidate is None:
        return None
    outputs = {n: compare_outputs(reference[n], candidate[n], data.targets_y if n == data.labelled_output else None)
               for n in names}
    if data.labelled_output is not None:
        summary = outputs[data.labelled_output]
    else:
        summary = min(outputs.values(), key=lambda c: c.sqnr_db if c.sqnr_db == c.sqnr_db else float("inf"))
    return Measured(outputs, summary)


def gate_failures(comparisons: dict[str, Measured | None], options: PackageOptions) -> dict[str, Measured]:
    return {t: m for t, m in comparisons.items() if m is not None and _fails(m, options)}


def _run_artifact(artifact: Path, backend_name: str, inputs: dict[str, np.ndarray], names: list[str],
                  built: BuildResult, batch: int = 32) -> dict[str, np.ndarray] | None:
    """Every output of the artifact on the validation inputs, by name; None without a runtime here."""
    backend_cls = get_backend(backend_name)
    if backend_cls.available() is None:
        return None
    backend = backend_cls(str(artifact))
    try:
        order = align(names, [t.name for t in backend.outputs], "output", built.artifact)
        total = len(next(iter(inputs.values())))
        parts = []
        for start in range(0, total, batch):
            chunk = {k: v[start : start + batch] for k, v in inputs.items()}
            parts.append(backend.run(chunk if len(chunk) > 1 else list(chunk.values())))
    finally:
        backend.close()
    return {names[i]: np.concatenate([p[j] for p in parts]) for j, i in enumerate(order)}


def _fails(measured: Measured, options: PackageOptions) -> bool:
    if measured.degenerate:
        return True
    drop = measured.summary.accuracy_drop_pp
    return drop is not None and drop > options.max_accuracy_drop


def gate_message(failures: dict[str, Measured], options: PackageOptions) -> str:
    """Every reason a gate failed, per format: an accuracy drop over the limit, outputs without signal."""
    drops = [f"{t}: -{m.summary.accuracy_drop_pp:.2f} pp" for t, m in failures.items()
             if m.summary.accuracy_drop_pp is not None and m.summary.accuracy_drop_pp > options.max_accuracy_drop]
    constant = []
    for t, m in failures.items():
        for name, reason in m.degenerate.items():
            c = m.outputs[name]
            where = f"{t}" if len(m.outputs) == 1 else f"{t} output {name!r}"
            constant.append(f"{where}: {reason} (SQNR {c.sqnr_db:.1f} dB, {c.distinct_values} distinct values)")
    reasons = []
    if drops:
        reasons.append(f"INT8 accuracy dropped more than --max-accuracy-drop {options.max_accuracy_drop} pp "
                       f"({', '.join(drops)})")
    if constant:
        reasons.append(f"INT8 validation failed, the outputs carry no signal ({'; '.join(constant)})")
    return "; ".join(reasons) + "; no package was written"


def validation_record(
    comparisons: dict[str, Measured | None],
    options: PackageOptions,
    data: PreparedData,
    reference: dict[str, np.ndarray],
    held_out: bool,
    unmeasured: dict[str, str],
    measured_by: dict[str, str],
) -> dict[str, Any]:
    """``manifest.validation``: what was measured, on which data, and whether the gates passed."""
    targets_y = data.targets_y
    labelled = reference.get(data.labelled_output) if data.labelled_output else None
    float_accuracy = float(np.mean(labelled.reshape(len(labelled), -1).argmax(axis=1) == targets_y)) if (
        targets_y is not None and labelled is not None
    ) else None
    artifacts: dict[str, Any] = {}
    for name, comparison in comparisons.items():
        if comparison is None:
            reason = unmeasured.get(name, "no runtime for it on this machine")
            artifacts[name] = {"measured": False, "reason": f"not measurable here: {reason}"}
        else:
            artifacts[name] = {"measured": True, **comparison.summary.to_dict()}
            if len(comparison.outputs) > 1:
                artifacts[name]["outputs"] = {o: c.to_dict() for o, c in comparison.outputs.items()}
            if name in measured_by:
                artifacts[name]["measured_by"] = measured_by[name]
    from_calibration = options.eval is None
    return {
        "data": {
            "source": data.evaluation_source.description,
            "split": ("held-out calibration samples" if held_out else "calibration samples")
            if from_calibration
            else "evaluation data",
            "samples": data.evaluation_count,
            "sha256": data.evaluation_raw.sha256,
            "labeled": targets_y is not None,
        },
        "float": {"accuracy": float_accuracy},
        "max_accuracy_drop_pp": options.max_accuracy_drop,
        "passed": not any(c is not None and _fails(c, options) for c in comparisons.values()),
        "artifacts": artifacts,
    }
