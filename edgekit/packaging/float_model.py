"""``--float-reference MODEL``: a quantized source's float model beside it.

A QAT model (or another tool's QDQ graph) is judged against itself run as given: its own
fake-quant arithmetic. What training with quantization cost against the float model it came from
is a second question, answered when the user gives that model too: it is loaded like any source,
run on the same samples with the same preprocessing, and every artifact is judged against it as
well, by the same gates (a failure there is named "against the float reference"). The source
itself is measured against it too, so the record says how much of the distance is the QAT model's
and how much the conversion's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import OptionError
from ..fsutil import sha256_tree
from ..kinds import show_value
from ..progress import Progress
from .data import PreparedData
from .validate import Judging, compared

if TYPE_CHECKING:
    from .loading import LoadedSource
    from .options import PackageOptions


def float_model_outputs(options: PackageOptions, loaded: LoadedSource, data: PreparedData, work: Path,
                        progress: Progress, hints: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The float model's outputs on the validation samples, by the source's output names; None
    without ``--float-reference``. Refused by name: a source that is not quantized (it is its own
    float reference), a float model that is itself quantized, or one whose inputs or outputs are
    not the source's."""
    if not options.float_reference:
        return None
    from ..sources import detect_source
    from .loading import float_reference, load_source

    given = options.float_reference
    if not loaded.described.precision.learned:
        raise OptionError(f"--float-reference {given}: the model being packaged is not quantized, so it is its own "
                          "float reference",
                          hint="leave out --float-reference; it is for a QAT or already-quantized model, with the float "
                               "model it was trained or quantized from")
    source, kind = detect_source(given)
    folder = work / "float_reference"
    folder.mkdir(parents=True, exist_ok=True)
    model = load_source(source, kind, replace(options, model=given), folder, progress, hints)
    if model.described.precision.learned:
        raise OptionError(f"--float-reference {given} is itself quantized, so it cannot tell what quantization cost",
                          hint="give the float model the quantized one was trained or quantized from")
    _check_same_signature(given, loaded, model)
    outputs = float_reference(model, data, folder, progress, options.step_timeout_s)
    return {name: outputs[name] for name in loaded.described.output_names}


def _check_same_signature(given: str, loaded: LoadedSource, model: LoadedSource) -> None:
    """Inputs and outputs matched by name, never by position: a misnamed output would be compared
    with another one."""
    for what, ours, theirs in (("inputs", [t.name for t in loaded.described.inputs],
                                [t.name for t in model.described.inputs]),
                               ("outputs", loaded.described.output_names, model.described.output_names)):
        if sorted(ours) != sorted(theirs):
            raise OptionError(f"--float-reference {given} has {what} {theirs}, the quantized model {ours}: they are "
                              "matched by name",
                              hint=f"export the float model with the quantized model's {what[:-1]} names")


def source_against_float(options: PackageOptions, reference: dict[str, np.ndarray],
                         float_outputs: dict[str, np.ndarray], data: PreparedData, judging: Judging,
                         progress: Progress) -> dict[str, Any]:
    """The quantized source itself against its float model, said and returned for the manifest's
    ``source.quantized.float_reference``."""
    from .assemble import model_file
    from .record import measured_record

    for name, ours in reference.items():  # matched by name; a width that differs is not the same model's output
        theirs = float_outputs.get(name)
        if theirs is not None and theirs.shape != ours.shape:
            raise OptionError(f"--float-reference {options.float_reference}: its output {name!r} has shape "
                              f"{list(theirs.shape)} on the validation samples, the quantized model's "
                              f"{list(ours.shape)}",
                              hint="give the float model the quantized one was trained or quantized from (same "
                                   "outputs, same widths)")
    measured = compared(float_outputs, reference, data, judging)
    numbers = "; ".join(f"{name or 'output'} SQNR {c.sqnr_db:.1f} dB" for name, c in measured.outputs.items())
    tasks = "; ".join(f"{name or 'output'} {t.task}: " + ", ".join(f"{k} {show_value(k, v)}" for k, v in t.values.items())
                      for name, t in measured.tasks.items())
    progress.say(f"the quantized source against its float reference {Path(options.float_reference or '').name} on "
                 f"{data.evaluation_count} samples: {numbers}" + (f"; {tasks}" if tasks else "")
                 + " (what the quantized model itself gives up; every artifact is judged against both)")
    far = far_from_reference(measured)
    if far:  # every artifact is judged against it too: none could pass, and no package would say why
        raise OptionError(f"the quantized source is far from its float reference {Path(options.float_reference or '').name} "
                          f"({far}): either that is not the model it was trained or quantized from, or the source's "
                          "quantization is broken",
                          hint="give the float model the quantized one was trained or quantized from, or leave out "
                               "--float-reference (the artifacts are then judged against the quantized source alone)")
    given = options.float_reference or ""
    return {"file": Path(given).name, "sha256": sha256_tree(model_file(given)),
            "source_against_it": measured_record(measured, None).to_dict()}


FAR_SQNR_DB = 3.0  # below it the difference from the float model is about as large as the signal itself
FAR_AGREEMENT = 0.5  # fewer than half of the decisions the same


def far_from_reference(measured: Any) -> str:
    """Why the quantized source is too far from its float reference to be the same model quantized
    (each output's SQNR, each decision rate), or "" when it is not."""
    found = [f"{name or 'output'} SQNR {c.sqnr_db:.1f} dB" for name, c in measured.outputs.items()
             if c.sqnr_db is not None and c.sqnr_db < FAR_SQNR_DB]
    for name, task in measured.tasks.items():
        for key, value in task.values.items():
            if "agreement" in key and isinstance(value, (int, float)) and value < FAR_AGREEMENT:
                found.append(f"{name or 'output'} {key} {show_value(key, value)}")
    return "; ".join(found)


def say_source_accuracy(described: Any, reference: dict[str, np.ndarray], data: PreparedData,
                        progress: Progress) -> None:
    """A quantized source's own accuracy on labelled held-out data, said plainly when it is near
    chance: edgekit judges artifacts against the source, so a source whose learned ranges are broken
    would otherwise ship with passing gates."""
    if not described.precision.learned or data.targets_y is None or not data.labelled_output:
        return
    scores = reference.get(data.labelled_output)
    if scores is None:
        return
    targets = np.asarray(data.targets_y).reshape(-1)
    predicted = scores.reshape(len(scores), -1).argmax(axis=1)
    if len(predicted) != len(targets) or not len(targets):
        return
    accuracy = float(np.mean(predicted == targets))
    flat = scores.reshape(len(scores), -1)
    classes = flat.shape[1]
    ordered = np.sort(flat, axis=1)
    tied = float(np.mean(ordered[:, -1] == ordered[:, -2])) if classes > 1 else 0.0  # a saturated output ties
    _, counts = np.unique(targets, return_counts=True)
    baseline = max(1.0 / max(classes, 1), float(counts.max()) / len(targets))  # always answering the commonest class
    near_chance = accuracy <= baseline + (1.0 - baseline) / 4  # a quarter of the way from chance to perfect
    if not near_chance and tied < TIED_SHARE:
        return
    found = [f"scores {accuracy:.1%} on the {len(targets)} labelled held-out samples"
             + (f", near chance ({baseline:.1%} by always answering its most frequent class)" if near_chance else "")]
    if tied >= TIED_SHARE:
        found.append(f"its top two class scores tie on {tied:.0%} of them (its output range saturates, so those "
                     "decisions are arbitrary)")
    progress.warn(f"the quantized source itself {' and '.join(found)}: its quantization looks broken (check its "
                  "scales), and every artifact, judged against it, inherits that; pass --float-reference FLOAT_MODEL to "
                  "judge it against the model it came from")


TIED_SHARE = 0.1  # a tenth of the decisions ties: the source's output saturates
