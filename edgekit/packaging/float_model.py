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
    if not loaded.described.recorded.get("quantized"):
        raise OptionError(f"--float-reference {given}: the model being packaged is not quantized, so it is its own "
                          "float reference",
                          hint="leave out --float-reference; it is for a QAT or already-quantized model, with the float "
                               "model it was trained or quantized from")
    source, kind = detect_source(given)
    folder = work / "float_reference"
    folder.mkdir(parents=True, exist_ok=True)
    model = load_source(source, kind, replace(options, model=given), folder, progress, hints)
    if model.described.recorded.get("quantized"):
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

    measured = compared(float_outputs, reference, data, judging)
    numbers = "; ".join(f"{name or 'output'} SQNR {c.sqnr_db:.1f} dB" for name, c in measured.outputs.items())
    tasks = "; ".join(f"{name or 'output'} {t.task}: " + ", ".join(f"{k} {show_value(k, v)}" for k, v in t.values.items())
                      for name, t in measured.tasks.items())
    progress.say(f"the quantized source against its float reference {Path(options.float_reference or '').name} on "
                 f"{data.evaluation_count} samples: {numbers}" + (f"; {tasks}" if tasks else "")
                 + " (what the quantized model itself gives up; every artifact is judged against both)")
    given = options.float_reference or ""
    return {"file": Path(given).name, "sha256": sha256_tree(model_file(given)),
            "source_against_it": measured_record(measured, None)}
