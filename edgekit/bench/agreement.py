"""On-device agreement of a quantized artifact with its float fallback, output by output.

Accuracy needs class targets and one classifier output; most models a device owner measures
have neither (a detector, a sequence model, a classifier with two heads, data without labels).
What the device can always say is how closely the INT8 artifact follows the float artifact it
would otherwise run, on the same held-out inputs, judged as the package judged it: each output's
kind (``validation.kinds`` in the manifest) with its task metric and gate, plus SQNR and cosine.
Set next to the build machine's numbers, a drop seen only here is a device's runtime or delegate
computing differently from the build machine's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..device.runtime import Model
from ..validation_record import MeasuredRecord

CHUNK = 32  # samples per call: a batch every artifact takes without growing its arena much


def eval_feeds(model: Model, data: str) -> tuple[Any, np.ndarray | None, str, int]:
    """The evaluation data as ``model`` takes it (preprocessed as its manifest says): the feeds (an
    array for one input, else a dict by input name), the class targets if any, the data's sha256
    and its sample count."""
    from ..data.preprocessing import normalize, to_layout
    from ..data.sources import open_data

    source = open_data(data, "evaluation")
    if model.labels:  # class folders numbered as the model's outputs, by name, as when it was packaged
        source.in_class_order(list(model.labels), f"the package's labels ({len(model.labels)} classes)")
    spec = model.manifest.inputs[0].preprocessing
    batch = source.load(np.arange(source.count), tuple(spec.resize) if spec and spec.resize else None,
                        spec.color_order if spec else "RGB")
    x = batch.x
    if isinstance(x, dict):
        model.check_input_names(x)
        return {name: x[name] for name in model.input_names}, batch.y, batch.sha256, int(source.count)
    if spec is not None:
        if source.kind == "images":
            x = to_layout(x, spec)
        x = normalize(x, spec) if x.dtype.kind in "iu" else x.astype(np.float32)
    if len(model.input_names) > 1:
        from ..errors import DataError

        raise DataError(f"the evaluation data {data} holds one array; the model has {len(model.input_names)} inputs "
                        f"({', '.join(model.input_names)})", hint="pass an .npz with one array per input name")
    return x, batch.y, batch.sha256, int(source.count)


def outputs_of(model: Model, feeds: Any, count: int) -> dict[str, np.ndarray]:
    """Every output of ``model`` by name over ``count`` samples, in chunks."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in model.output_names}
    for start in range(0, count, CHUNK):
        chunk = ({k: v[start:start + CHUNK] for k, v in feeds.items()} if isinstance(feeds, dict)
                 else feeds[start:start + CHUNK])
        found = model.predict_tensor(chunk)
        found = found if isinstance(found, dict) else {model.output_names[0]: found}
        for name in parts:
            parts[name].append(np.asarray(found[name]))
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}


def agreement_with_float(model: Model, float_model: Model, data: str) -> dict[str, Any]:
    """How ``model``'s outputs follow ``float_model``'s on ``data``, per output, by the kind and gate
    the package judged it with; the packaging record's numbers alongside."""
    from ..comparison.metrics import compare_outputs
    from ..kinds import OutputKind, evaluate

    feeds, _, digest, count = eval_feeds(model, data)
    mine, theirs = outputs_of(model, feeds, count), outputs_of(float_model, feeds, count)
    record = model.manifest.validation
    max_drop = record.max_accuracy_drop_pp if record.max_accuracy_drop_pp is not None else 1.0
    min_sqnr = record.min_sqnr_db if record.min_sqnr_db is not None else 20.0
    artifact = record.artifact(model.artifact.key)
    packaged = artifact.metrics if artifact.measured else None
    outputs: dict[str, Any] = {}
    for name in model.output_names:
        known = record.kinds.get(name)
        kind = OutputKind.from_dict(dict(known)) if known else None
        compared = compare_outputs(theirs[name].astype(np.float64), mine[name].astype(np.float64), kind=kind)
        task = evaluate(kind.spec, theirs[name], mine[name], None, max_drop, kind.axis) if kind else None
        outputs[name] = {
            "kind": kind.spec if kind else None, "sqnr_db": _finite(compared.sqnr_db), "cosine": _finite(compared.cosine),
            "top1_agreement": _finite(compared.top1_agreement), "max_abs_error": _finite(compared.max_abs_error),
            "task": task.to_dict() if task else None,
            # an output no task judges (values) is gated by its SQNR, as packaging gated it
            "sqnr_floor_db": None if task else min_sqnr,
            "sqnr_passed": None if task else bool(compared.sqnr_db >= min_sqnr),
            "at_packaging": _packaged_output(packaged, name, len(model.output_names)),
        }
    verdicts = [o["task"]["passed"] for o in outputs.values() if o["task"] and o["task"]["passed"] is not None]
    verdicts += [o["sqnr_passed"] for o in outputs.values() if o["sqnr_passed"] is not None]
    return {"float_artifact": float_model.artifact.key, "samples": count, "data": data, "data_sha256": digest,
            "reference": "the float fallback on this device (the build machine's was the source model)",
            "outputs": outputs, "passed": all(verdicts) if verdicts else None}


def _packaged_output(packaged: MeasuredRecord | None, name: str, outputs: int) -> dict[str, Any] | None:
    """What packaging measured for output ``name`` (against the source model): its SQNR and task values."""
    if not packaged:
        return None
    per_output = (packaged.outputs or {}).get(name) or (packaged.summary if outputs == 1 else {})
    task = packaged.task_records().get(name) or {}
    return {"sqnr_db": _finite(per_output.get("sqnr_db")), "values": dict(task.get("values") or {}),
            "passed": task.get("passed")}


def _finite(value: Any) -> float | None:
    """A JSON-safe number: NaN (no meaning for this output) and infinity (identical) as None and a cap."""
    if not isinstance(value, (int, float)) or value != value:
        return None
    return 999.0 if value == float("inf") else round(float(value), 6)
