"""Stage 1: everything that can be checked before a model loads (seconds, not minutes).

The output directory is writable, the options make sense, the data sources open and every
selected image is readable; leftovers of killed runs are removed. A mistake found here costs
the user a second instead of a TensorFlow start.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..conversion import threads, worker
from ..data.sources import DataSource, open_data
from ..errors import DataError, EdgekitError, OutputExistsError
from ..fsutil import ensure_writable, remove_stale, remove_stale_temp
from ..names import check_name, slug
from ..progress import Progress
from .options import PackageOptions

MIN_RECOMMENDED_SAMPLES = 100
HOLDOUT_FRACTION = 0.2
# Held-out samples the verdict needs at least. Gates read agreement rates: with 12 samples one
# flipped decision is 8 points and a detector judged on 12 images proves little; with 50, one
# sample is 2 points and a collapse shows on several. Without --eval, up to half of a small
# calibration set is held out to reach it, or as many as the agreement gate needs to decide a pass
# (``decisive_samples``: 100 for the default 1 pp; calibration ranges need fewer samples than a verdict).
MIN_VALIDATION_SAMPLES = 50


def decisive_samples(max_accuracy_drop_pp: float) -> int:
    """Held-out samples on which an agreement gate of ``100 - max_accuracy_drop_pp`` % allows one
    disagreement, so that a pass there can be decided (``kinds.Rate.needed``; ``verdict.py``)."""
    if max_accuracy_drop_pp <= 0:
        return MIN_VALIDATION_SAMPLES
    return max(MIN_VALIDATION_SAMPLES, int(math.ceil(100 / max_accuracy_drop_pp - 1e-9)))
TEMP_PREFIX = "edgekit-package-"


@dataclass(frozen=True)
class Plan:
    """The checked request: where the package goes and which samples calibrate and validate it."""

    name: str
    destination: Path
    archive: Path | None
    calibration: DataSource
    evaluation: DataSource | None
    calibration_indices: np.ndarray
    evaluation_indices: np.ndarray
    held_out: bool
    labels: list[str] | None  # from --labels
    # too few calibration samples for stable ranges: said once the model is loaded, and only when
    # its ranges are calibrated here (a quantized source's are its own, the data only validates)
    few_calibration_samples: str | None = None


def _check_float_reference(given: str | None) -> None:
    """``--float-reference MODEL`` names a model that exists, said with the option's name before
    anything loads."""
    if not given:
        return
    from ..errors import OptionError
    from ..sources import detect_source

    file = given.rpartition(":")[0] if given.rpartition(":")[0].endswith(".py") else given
    if not Path(file).exists():
        raise OptionError(f"--float-reference {given} does not exist",
                          hint="give the float model the quantized one was trained or quantized from")
    try:
        detect_source(given)
    except EdgekitError as exc:
        raise OptionError(f"--float-reference {given}: {exc.message}", hint=exc.hint) from None


def preflight(options: PackageOptions, progress: Progress) -> Plan:
    name = options.name or _default_name(Path(options.model))
    check_name(name, "package name", hint="use --name with letters, digits, '.', '_' or '-' (a letter or digit first)")
    out = Path(options.output_dir).absolute()
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"output {out} exists and is not a directory", hint="choose another -o")
    destination = out / f"{name}.edgekit"
    archive = out / f"{name}.ekpkg" if options.archive else None
    for path in (destination, archive):
        if path is not None and path.exists() and not options.force:
            raise OutputExistsError(f"{path} already exists")
    if options.samples < 1:
        raise DataError(f"--samples must be at least 1, got {options.samples}", hint="use --samples 100 or more")
    _check_preprocessing_options(options.preprocessing)
    _check_float_reference(options.float_reference)
    threads.cap()  # a malformed EDGEKIT_THREADS is said now, not as the first converter child's failure
    ensure_writable(out, "output directory", is_dir=True)
    remove_stale(out, ".*.partial")  # staging trees of earlier runs that were killed
    remove_stale_temp(TEMP_PREFIX)
    remove_stale_temp(worker.TEMP_PREFIX)
    if options.sign_key:
        from ..device.signing import check_private_key

        check_private_key(options.sign_key)
    _check_eval_is_not_the_calibration(options)
    calibration = open_data(options.calibration, "calibration", options.data_names.get(options.calibration))
    evaluation = open_data(options.eval, "evaluation", options.data_names.get(options.eval)) if options.eval else None
    for source_data in (calibration, evaluation):
        for note in source_data.notes if source_data is not None else ():
            progress.say(note)
    _check_compatible(calibration, evaluation)
    calib_idx, eval_idx, held_out = _split(calibration, evaluation, options, progress)
    few = (f"calibrating on {len(calib_idx)} samples; {MIN_RECOMMENDED_SAMPLES}+ representative samples are "
           "recommended for stable INT8 ranges") if len(calib_idx) < MIN_RECOMMENDED_SAMPLES else None
    for source_data, indices in ((calibration, calib_idx), (evaluation or calibration, eval_idx)):
        source_data.check_readable(indices)  # a corrupt image is found now, not after the model loads
    labels = _read_labels(options.labels_file)
    _check_label_count(labels, calibration, evaluation)
    if labels is not None:  # class folders numbered in the model's output order, by name
        for source_data in (calibration, evaluation):
            if source_data is not None:
                source_data.in_class_order(labels, f"--labels {options.labels_file}")
    return Plan(name, destination, archive, calibration, evaluation, calib_idx, eval_idx, held_out, labels, few)


def _default_name(model: Path) -> str:
    return slug(model.name if model.is_dir() else model.stem)


def _check_eval_is_not_the_calibration(options: PackageOptions) -> None:
    """``--eval`` naming the calibration data (the same file, folder or bytes): every gate would be
    judged on the samples the ranges were set on, which hides what unseen data lose."""
    if not options.eval:
        return
    calibration, evaluation = Path(options.calibration), Path(options.eval)
    same = calibration.exists() and evaluation.exists() and calibration.resolve() == evaluation.resolve()
    if not same and calibration.is_file() and evaluation.is_file() \
            and calibration.stat().st_size == evaluation.stat().st_size:
        from ..fsutil import sha256_file

        same = sha256_file(calibration) == sha256_file(evaluation)
    if same:
        shown = options.data_names.get(options.eval) or options.eval
        raise DataError(f"--eval {shown} holds the same data as the calibration data: the gates would judge INT8 on "
                        "the samples its ranges were calibrated on",
                        hint="give held-out data the model was not calibrated on, or leave out --eval (a share of "
                             "the calibration data is then held out)")


def _check_compatible(calibration: DataSource, evaluation: DataSource | None) -> None:
    if evaluation is None:
        return
    kinds = {calibration.dtype.kind in "iu", evaluation.dtype.kind in "iu"}
    if len(kinds) == 2:
        raise DataError(
            f"calibration data is {calibration.dtype} but evaluation data is {evaluation.dtype}: "
            "one preprocessing cannot serve both",
            hint="give both as raw images/uint8 or both as preprocessed float arrays",
        )
    if calibration.sample_shape and evaluation.sample_shape and calibration.sample_shape != evaluation.sample_shape:
        raise DataError(
            f"calibration samples have shape {calibration.sample_shape} but evaluation samples "
            f"{evaluation.sample_shape}",
            hint="both must match the model's input",
        )
    if calibration.labels and evaluation.labels and calibration.labels != evaluation.labels:
        raise DataError(
            f"calibration classes {calibration.labels[:6]} differ from evaluation classes {evaluation.labels[:6]}",
            hint="use the same class sub-folders in both",
        )


def _split(
    calibration: DataSource, evaluation: DataSource | None, options: PackageOptions, progress: Progress
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Calibration and validation indices, seeded; held-out validation when there is no --eval."""
    if evaluation is not None:
        calib = calibration.select(options.samples, options.seed)
        evals = evaluation.select(options.eval_samples, options.seed)
        held_out = True
    elif calibration.count >= 10:
        n_hold = max(1, int(round(calibration.count * HOLDOUT_FRACTION)),
                     min(decisive_samples(options.max_accuracy_drop), calibration.count // 2))
        if options.eval_samples:
            n_hold = min(n_hold, options.eval_samples)
        evals = calibration.select(n_hold, options.seed + 1)
        calib = calibration.select(options.samples, options.seed, exclude=evals)
        held_out = True
    else:
        calib = calibration.select(options.samples, options.seed)
        evals = calib
        held_out = False
        progress.warn(
            f"only {calibration.count} samples and no --eval: validating on the calibration samples "
            "themselves (not held out)"
        )
    decisive = decisive_samples(options.max_accuracy_drop)
    if held_out and len(evals) < decisive:
        progress.warn(
            f"validating on {len(evals)} held-out samples; an agreement gate of {100 - options.max_accuracy_drop:g}% "
            f"allows one disagreement only on {decisive}+, so a pass on fewer is not decidable (the package is "
            "written with verdict \"not decidable\", exit 4): give --eval with more samples"
            + (", or more --calibration data" if evaluation is None else "")
        )
    return calib, evals, held_out


def _read_labels(labels_file: str | None) -> list[str] | None:
    """The --labels file's lines; a missing, unreadable or empty file is an error, never ignored."""
    if not labels_file:
        return None
    path = Path(labels_file)
    if path.is_dir():
        raise DataError(f"labels file {path} is a directory", hint="pass a text file with one class label per line")
    if not path.exists():
        raise DataError(f"labels file {path} does not exist", hint="check the --labels path")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"labels file {path} is not UTF-8 text", hint="save it as UTF-8, one label per line") from None
    labels = [line.strip() for line in text.splitlines() if line.strip()]
    if not labels:
        raise DataError(f"labels file {path} is empty", hint="write one class label per line, in model output order")
    return labels


def _check_label_count(labels: list[str] | None, calibration: DataSource, evaluation: DataSource | None) -> None:
    """--labels against the class folders of the data, before the model loads."""
    folders = calibration.labels or (evaluation.labels if evaluation else None)
    if labels is not None and folders is not None and len(labels) != len(folders):
        raise DataError(
            f"--labels has {len(labels)} labels but the data has {len(folders)} class folders",
            hint="give one label per class (in model output order), or drop --labels to use the folder names",
        )


def _check_preprocessing_options(given: dict[str, Any]) -> None:
    """--mean/--std/--scale/--resize values that can never be right, refused before the model loads."""
    mean, std = given.get("mean"), given.get("std")
    if std is not None and any(float(v) == 0 for v in std):
        raise DataError(f"--std {','.join(str(v) for v in std)} contains 0: preprocessing divides by std",
                        hint="give the standard deviation of each channel (e.g. --std 0.229,0.224,0.225), or omit --std")
    for flag, values in (("--mean", mean), ("--std", std)):
        if values is not None and not values:
            raise DataError(f"{flag} has no values", hint=f"give {flag} one number, or one per channel")
    if mean is not None and std is not None and len(mean) != len(std) and 1 not in (len(mean), len(std)):
        raise DataError(f"--mean has {len(mean)} values but --std has {len(std)}",
                        hint="give one value for every channel to both, or a single value")
    scale = given.get("scale")
    if scale is not None and (scale == 0 or scale != scale):
        raise DataError(f"--scale {scale} would erase the input", hint="use e.g. --scale 0.00392157 (1/255), or omit it")
    resize = given.get("resize")
    if resize is not None and any(int(v) < 1 for v in resize):
        raise DataError(f"--resize {resize[0]}x{resize[1]} is not a size", hint="use HEIGHTxWIDTH such as 224x224")
