"""``manifest.validation``: what was measured for every artifact, on which data, and whether the
gates passed (written once per package, from the measurements and the gates' verdicts)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kinds import OutputKind
from .data import PreparedData
from .gates import GateFailure
from .options import PackageOptions
from .preflight import MIN_VALIDATION_SAMPLES
from ..validation_record import ArtifactRecord, DataRecord, GateRecord, MeasuredRecord, ValidationRecord, Verdict
from .validate import Measured, silent_outputs
from .verdict import undecided as undecided_gates


def validation_record(
    comparisons: dict[str, Measured | None],
    options: PackageOptions,
    data: PreparedData,
    reference: dict[str, np.ndarray],
    held_out: bool,
    unmeasured: dict[str, str],
    measured_by: dict[str, str],
    failures: dict[str, list[GateFailure]],
    notes: dict[str, list[str]],
    kinds: dict[str, OutputKind] | None = None,
) -> ValidationRecord:
    """``manifest.validation``: what was measured, on which data, and whether the gates passed."""
    targets_y = data.targets_y
    labelled = reference.get(data.labelled_output) if data.labelled_output else None
    float_accuracy = float(np.mean(labelled.reshape(len(labelled), -1).argmax(axis=1) == targets_y)) if (
        targets_y is not None and labelled is not None
    ) else None
    artifacts = {}
    for name, comparison in comparisons.items():
        if comparison is None:
            reason = unmeasured.get(name, "no runtime for it on this machine")
            artifacts[name] = ArtifactRecord(measured=False, reason=f"not measurable here: {reason}",
                                             verdict=Verdict.UNVERIFIED)
        else:
            # a pass the sample cannot support is not a pass: passed stays null, the gates that need more say so
            open_gates = () if failures.get(name) else undecided_gates(comparison, data.evaluation_count)
            artifacts[name] = ArtifactRecord(
                measured=True, verdict=Verdict.of(True, bool(failures.get(name)), bool(open_gates)),
                metrics=measured_record(comparison, measured_by.get(name)),
                gates=tuple(GateRecord.from_dict(f.to_dict()) for f in failures.get(name, [])),
                notes=tuple(notes.get(name) or ()),
                undecided=open_gates)
    from_calibration = options.eval is None
    silent = silent_outputs(reference)
    return ValidationRecord(
        # what each output is and how it was judged (kinds.py), with the evidence
        kinds={name: kind.to_dict() for name, kind in (kinds or {}).items()},
        notes=tuple(silent.values()),
        data=DataRecord(
            source=data.evaluation_source.description,
            split=("held-out calibration samples" if held_out else "calibration samples")
            if from_calibration else "evaluation data",
            samples=data.evaluation_count,
            minimum_for_a_verdict=MIN_VALIDATION_SAMPLES,
            sha256=data.evaluation_raw.sha256,
            labeled=targets_y is not None,
        ),
        float_accuracy=float_accuracy,
        max_accuracy_drop_pp=options.max_accuracy_drop,
        min_sqnr_db=options.min_sqnr_db,
        # nothing measured is its own state: no artifact passed a gate it was never put to; a pass the
        # sample cannot support is not decided (passed null, state "not decidable")
        verdict=Verdict.of(any(a.measured for a in artifacts.values()), any(failures.values()),
                           any(a.undecided for a in artifacts.values())),
        artifacts=artifacts,
    )


def measured_record(comparison: Measured, measured_by: str | None) -> MeasuredRecord:
    """One artifact's numbers as the manifest records them."""
    def compared(evaluated: str, found: dict[str, Any]) -> dict[str, Any]:
        return {"evaluated": evaluated, "sqnr_db": min(c.sqnr_db for c in found.values()),
                "outputs": {o: c.to_dict() for o, c in found.items()}}

    return MeasuredRecord(
        summary=dict(comparison.summary.to_dict()),
        outputs={o: c.to_dict() for o, c in comparison.outputs.items()} if len(comparison.outputs) > 1 else None,
        measured_by=measured_by or None,
        tasks={o: t.to_dict() for o, t in comparison.tasks.items()} if comparison.tasks else None,
        metric=comparison.metric.to_dict() if comparison.metric is not None else None,
        # the quantization itself (no int8 kernel fusion) next to this CPU's fused kernels above
        quantization=compared("QDQ graph with graph optimizations off (no int8 kernel fusion)",
                              comparison.quantization) if comparison.quantization else None,
        judged_by=comparison.judged_by or None,
        # judged as quantized: what the build machine's own fused kernels gave, for information
        on_this_cpu=compared(f"this CPU's fused int8 kernels ({comparison.kernels}); not the verdict",
                             comparison.on_this_cpu) if comparison.on_this_cpu else None,
        # a quantized source's float model (--float-reference): the same outputs judged against it
        against_float_reference=measured_record(comparison.against_float, None)
        if comparison.against_float is not None else None,
        # the float model this format converted, before quantization, vs the source
        float_conversion=compared(comparison.conversion_by, comparison.conversion) if comparison.conversion else None,
    )
