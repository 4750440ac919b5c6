"""Stage 3: the calibration and validation samples as the model sees them, with their guards.

Samples are loaded (images decoded and resized), preprocessed as the manifest will record,
shaped like the model input and checked: NaN/Inf named by file row, class targets in range,
data that would give bad INT8 ranges said with numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.preprocessing import (
    check_finite,
    conform,
    describe,
    from_model,
    infer_preprocessing,
    is_guess,
    normalize,
    to_layout,
)
from ..data.sources import DataSource, RawBatch
from ..data.targets import check_class_targets
from ..errors import DataError, ModelSourceError
from ..manifest import Preprocessing
from ..progress import Progress
from ..sources.description import SourceDescription, TensorDescription
from .options import PackageOptions
from .preflight import Plan


FLOAT_DTYPES = ("float32", "float16", "float64")


@dataclass(frozen=True)
class InputPlan:
    """How one model input is fed: its role and (for images, or when flags ask) its preprocessing."""

    name: str
    shape: list[int]
    dtype: str  # the model's dtype for it (float32, int32, int64, ...)
    role: str  # "image" (decoded, resized, normalized), "integer" (token ids, indices: passed through),
    #            "values" (other float tensors: audio, features)
    spec: Preprocessing | None

    @property
    def sample_shape(self) -> tuple[int | None, ...]:
        return tuple(None if d == -1 else d for d in self.shape[1:])


@dataclass(frozen=True)
class PreparedData:
    inputs: list[InputPlan]
    calibration: dict[str, np.ndarray]  # model-ready samples per input name
    evaluation: dict[str, np.ndarray]
    calibration_raw: RawBatch
    evaluation_source: DataSource
    evaluation_raw: RawBatch
    labels: list[str] | None
    labelled_output: str | None  # the output the labels and class targets belong to
    warnings: list[str]
    calibration_source: str  # the --calibration data, as the user named it
    # the validation samples far outside the calibration range (``outside_calibration``): the
    # calibration data are not representative, which no per-layer search may paper over
    unrepresentative: tuple[str, ...] = ()
    # a subset of the validation samples (the search's halves): their rows in the whole set, so
    # that outputs a builder computed on the whole set are compared row for row
    rows: tuple[int, ...] | None = None

    @property
    def targets_y(self) -> np.ndarray | None:
        return self.evaluation_raw.y

    @property
    def spec(self) -> Preprocessing | None:
        """The image preprocessing (the first image input's), for the single-input code paths."""
        return next((p.spec for p in self.inputs if p.spec is not None), None)

    @property
    def evaluation_count(self) -> int:
        return len(next(iter(self.evaluation.values())))

    @property
    def calibration_count(self) -> int:
        return len(next(iter(self.calibration.values())))


def prepare_data(plan: Plan, options: PackageOptions, described: SourceDescription,
                 progress: Progress) -> PreparedData:
    inputs, outputs = list(described.inputs), list(described.outputs)
    if not inputs or not outputs:
        raise ModelSourceError(f"the model has {len(inputs)} inputs and {len(outputs)} outputs",
                               hint="export a model that takes and returns tensors")
    _refuse_unbatched(inputs, outputs)
    _check_moved_axes(plan, described)
    calibration = plan.calibration
    eval_source = plan.evaluation or calibration
    bindings = bind_inputs([i.name for i in inputs], calibration)
    # the held-out data name their arrays on their own (``x`` in one file, the input's name in the other)
    eval_bindings = bind_inputs([i.name for i in inputs], plan.evaluation) if plan.evaluation is not None else bindings
    inputs = [_with_given_shape(i, options.input_shapes) for i in inputs]
    plans = [plan_input(i, calibration, bindings[i.name], described.rescales, options, len(inputs) == 1)
             for i in inputs]
    say_preprocessing(plans, progress)
    image = next((p for p in plans if p.role == "image"), None)
    calib_raw = _load(calibration, plan.calibration_indices, image.spec if image else None, "calibration data")
    eval_what = "evaluation data" if plan.evaluation is not None else "held-out calibration data"
    eval_raw = _load(eval_source, plan.evaluation_indices, image.spec if image else None, eval_what)
    calib_what = f"calibration data {calibration.description}{_taken(calibration, plan.calibration_indices)}"
    eval_what_here = f"{eval_what} {eval_source.description}{_taken(eval_source, plan.evaluation_indices)}"
    calib = {p.name: model_ready(p, _pick(calib_raw.x, bindings[p.name]), calib_what) for p in plans}
    evals = {p.name: model_ready(p, _pick(eval_raw.x, eval_bindings[p.name]), eval_what_here) for p in plans}
    labelled = _labelled_output(outputs, plan.labels or calibration.labels or (plan.evaluation.labels
                                                                                  if plan.evaluation else None))
    labels = _labels(plan.labels, calibration, plan.evaluation, labelled) if labelled else None
    warnings, unrepresentative = [], []
    for p in plans:
        if p.role != "integer" and p.spec is not None:
            warnings += data_guards(_pick(calib_raw.x, bindings[p.name]), calib[p.name], p.spec)
        if p.role != "integer":
            unrepresentative += outside_calibration(p.name, calib[p.name], evals[p.name], eval_what, len(plans) > 1)
            # said, and the search still runs: percentile calibration is the fix for an outlier sample
            warnings += wider_calibration(p.name, calib[p.name], evals[p.name], eval_what, len(plans) > 1)
    warnings += unrepresentative
    if labelled is not None:
        warnings += class_coverage(calib_raw.y, labelled)
        _check_targets(eval_raw.y, labelled)
    for warning in warnings:
        progress.warn(warning)
    return PreparedData(plans, calib, evals, calib_raw, eval_source, eval_raw, labels,
                        labelled.name if labelled else None, warnings, calibration.description,
                        tuple(unrepresentative))


def outside_calibration(name: str, calibration: np.ndarray, evaluation: np.ndarray, what: str,
                        named: bool) -> list[str]:
    """Said before anything is built: validation samples far outside the calibration range (the
    runtime's rule, ``edgekit.device.model.RANGE_MARGIN``) saturate the INT8 input and every range after
    it; the verdict on them then measures the data mismatch, not the quantization."""
    from ..device.model import RANGE_MARGIN

    if not calibration.size or not evaluation.size or calibration.dtype.kind != "f":
        return []
    lo, hi = float(np.nanmin(calibration)), float(np.nanmax(calibration))
    low, high = float(np.nanmin(evaluation)), float(np.nanmax(evaluation))
    margin = RANGE_MARGIN * max(hi - lo, 1e-6)
    if low >= lo - margin and high <= hi + margin:
        return []
    outside = float(np.mean((evaluation < lo - margin) | (evaluation > hi + margin)))
    where = f"input {name!r}" if named else "the input"
    return [f"the {what} for {where} ranges {low:.4g}..{high:.4g}, far outside the calibration data's "
            f"{lo:.4g}..{hi:.4g} ({100 * outside:.2g}% of its values): INT8 ranges come from the calibration data, "
            "so those values saturate; calibrate on data like what the model will see (or check that both are "
            "preprocessed the same way)"]


# calibration data spanning this many times the held-out data's range leave the held-out values a
# few of the input grid's 256 steps: every INT8 range after the input is as coarse
WIDE_CALIBRATION = 16.0


def wider_calibration(name: str, calibration: np.ndarray, evaluation: np.ndarray, what: str,
                      named: bool) -> list[str]:
    """Said before anything is built: calibration data whose range dwarfs the held-out data's (an
    outlier sample, another scaling): the INT8 grid spreads over the calibration range, so what the
    model sees falls on a few steps and the gates fail for the data, not for the quantization."""
    if not calibration.size or not evaluation.size or calibration.dtype.kind != "f":
        return []
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = float(np.nanmin(calibration)), float(np.nanmax(calibration))
        low, high = float(np.nanmin(evaluation)), float(np.nanmax(evaluation))
        span, seen = hi - lo, high - low
    if not np.isfinite(span) or seen <= 0 or span <= WIDE_CALIBRATION * seen:
        return [] if np.isfinite(span) else [f"the calibration data for {_where(name, named)} range {lo:.4g}..{hi:.4g}: "
                                             "not finite; calibrate on data like what the model will see"]
    steps = max(1, int(round(255 * seen / span)))
    return [f"the calibration data for {_where(name, named)} range {lo:.4g}..{hi:.4g}, {span / seen:.3g}x the span of "
            f"the {what}'s {low:.4g}..{high:.4g}: INT8 ranges come from the calibration data, so the values the model "
            f"is judged on fall on {steps} of the input's 256 steps and the gates would measure that, not the "
            "quantization; calibrate on data like what the model will see (remove outlier samples, or check that "
            "both are preprocessed the same way)"]


def _where(name: str, named: bool) -> str:
    return f"input {name!r}" if named else "the input"


def say_preprocessing(plans: list[InputPlan], progress: Progress) -> None:
    """Before converting: what each input will get and where that came from; a guess is a warning."""
    for p in plans:
        if p.role == "integer":
            progress.say(f"input {p.name!r}: {p.dtype} values (ids, indices) passed through unchanged")
            continue
        assert p.spec is not None
        progress.say(f"input {p.name!r} ({p.role}): {describe(p.spec)}  [{p.spec.inferred_from}]")
        if p.role == "image" and is_guess(p.spec):
            progress.warn(
                f"the preprocessing of input {p.name!r} is a guess (no normalization layer in the model, no "
                "options): if the model was trained on other values, pass --preprocessing 0..1|-1..1|imagenet|raw "
                "or --scale/--mean/--std"
            )


def _check_moved_axes(plan: Plan, described: SourceDescription) -> None:
    """Data moved batch-first when read (samples on another axis) are right only where the model's
    own batch axis for that input is that axis (the source's rewrite moved it too): else the arrays'
    other axis would be fed as samples, a wrong answer no gate would see."""
    moved_by_model = (described.recorded.get("rewrites") or {}).get("batch_axes") or {}
    for source in (plan.calibration, plan.evaluation):
        for name, axis in (source.moved_axes.items() if source is not None else ()):
            if moved_by_model.get(name) != axis:
                raise DataError(f"{source.description}: array {name!r} holds its samples on axis {axis}, but the model "
                                f"takes {name!r} batch-first (nothing in its graph says axis {axis} is a batch)",
                                hint=f"give {name!r} batch-first, or say where its batch is: --batch-axis {name}={axis} "
                                     "(ONNX sources)")


def _refuse_unbatched(inputs: list[TensorDescription], outputs: list[TensorDescription] = ()) -> None:
    """Every input must take samples stacked on axis 0 (calibration, validation and the runtime all
    feed them that way): a scalar input (a sample rate, a threshold) cannot be, and is refused
    here by name instead of failing later in a converter; so is an output whose batch is on
    another axis (a seq-first state), which would be joined across samples wrongly."""
    batch_names = {i.dim_names[0] for i in inputs if i.dim_names and i.dim_names[0]}
    for model_output in outputs:
        axis = _batch_axis_elsewhere(model_output, batch_names)
        if axis is not None:
            raise ModelSourceError(
                f"model output {model_output.name!r} has its batch dimension "
                f"({model_output.dim_names[axis]!r}) on axis {axis}, not on axis 0: edgekit joins samples on axis 0, so its values would be mixed up",
                hint="re-export the model with this output batch-first (e.g. a recurrent state transposed to "
                     "[N, layers, hidden] inside the model)",
            )
    for model_input in inputs:
        axis = _batch_axis_elsewhere(model_input, batch_names)
        if axis is not None:
            raise ModelSourceError(
                f"model input {model_input.name!r} has its batch dimension ({model_input.dim_names[axis]!r}) "
                f"on axis {axis} (shape {['?' if d == -1 else d for d in model_input.shape]}), not on axis 0: edgekit "
                "stacks samples on axis 0, so its values would be split across samples",
                hint=f"fix it to a constant with --input {model_input.name}=0 (zeros as the initial state, "
                     "sized by the batch at run time), or re-export the model with this input batch-first",
            )
        fixed = _fixed_first_axis(model_input)
        if fixed is not None:
            raise ModelSourceError(
                f"model input {model_input.name!r} has shape {['?' if d == -1 else d for d in model_input.shape]}: "
                f"its first axis is fixed to {model_input.shape[0]} while axis {fixed} is free, so its batch is "
                f"on axis {fixed} (a recurrent state [layers, N, hidden]), not on axis 0: edgekit stacks samples on "
                "axis 0, so every sample's values would be fed as the wrong rows",
                hint=f"fix it to a constant with --input {model_input.name}=0 --input-shape {model_input.name}="
                     f"{'x'.join('1' if d == -1 else str(d) for d in model_input.shape)} (zeros as the initial "
                     "state, batch 1), or re-export the model with this input batch-first",
            )
        if len(model_input.shape) == 0:
            raise ModelSourceError(
                f"model input {model_input.name!r} is a scalar (rank 0): edgekit feeds every input as a batch of "
                "samples on axis 0, so a scalar input (a sample rate, a threshold, a state flag) cannot be calibrated "
                "or served",
                hint=f"fix it to its value with --input {model_input.name}=VALUE (e.g. 16000; it is folded into "
                     "the model and recorded in the manifest), or give it a batch axis (shape [N, 1]) and re-export",
            )


def _fixed_first_axis(tensor: TensorDescription) -> int | None:
    """The free axis of an input whose first axis is fixed above 1 (``[2, N, 128]``): its batch is
    there, not on axis 0 (a batch-1 model fixes axis 0 to 1, and is fed one sample at a time)."""
    shape = list(tensor.shape)
    if len(shape) < 2 or shape[0] in (-1, 0, 1):
        return None
    free = [axis for axis, d in enumerate(shape) if axis and d == -1]
    return free[0] if len(free) == 1 else None


def _batch_axis_elsewhere(tensor: TensorDescription, batch_names: set[str]) -> int | None:
    """The axis after 0 named like the inputs' batch dimension, when axis 0 is not (ONNX dim names)."""
    names = tensor.dim_names or []
    later = [axis for axis, name in enumerate(names) if axis and name in batch_names]
    return later[0] if later and (not names[0] or names[0] not in batch_names) else None


def _with_given_shape(model_input: TensorDescription, given: dict[str, list[int]]) -> TensorDescription:
    """--input-shape NAME=1x3x320x320 fixes an input's dynamic dimensions (the batch stays as the model has it)."""
    shape = given.get(model_input.name)
    if shape is None:
        return model_input
    current = list(model_input.shape)
    if len(shape) != len(current):
        raise DataError(f"--input-shape {model_input.name}={'x'.join(map(str, shape))} has {len(shape)} "
                        f"dimensions; the model's input has {len(current)}: {current}",
                        hint="give every dimension, the batch first (e.g. 1x3x320x320)")
    fixed = [current[0]] + [g if c == -1 else c for c, g in zip(current[1:], shape[1:])]
    clash = [(c, g) for c, g in zip(current[1:], shape[1:]) if c != -1 and c != g]
    if clash:
        raise DataError(f"--input-shape for {model_input.name!r} contradicts the model's fixed dimensions "
                        f"{current}", hint="only dynamic (-1) dimensions can be set")
    return model_input._replace(shape=tuple(fixed))


def bind_inputs(names: list[str], source: DataSource) -> dict[str, str | None]:
    """Which data array feeds each model input: by name, or the one unnamed array/images for a
    one-input model. Missing or extra names are an error naming both sides."""
    given = source.names
    if len(names) == 1 and (not given or len(given) == 1):
        if given and source.from_python and given[0] not in (names[0], "x"):
            raise DataError(f"{source.description} gives an array for {given[0]!r}; the model's only input is "
                            f"{names[0]!r}", hint=f"key the dict by the input's name ({{{names[0]!r}: ...}}) "
                                                  "or pass the array itself")
        return {names[0]: given[0] if given else None}
    missing = [n for n in names if n not in given]
    if missing:
        have = ", ".join(given) if given else "one unnamed array" if source.kind == "arrays" else "images"
        raise DataError(
            f"the model has inputs {names}; {source.description} has no array for {missing} (it has: {have})",
            hint="give one array per input name: np.savez(path, " + ", ".join(f"{n}=..." for n in names)
                 + ") or a module:function returning such a dict",
        )
    extra = [n for n in given if n not in names]
    if extra and source.from_python:
        raise DataError(f"the model has inputs {names}; {source.description} also gives {extra}, which no input "
                        "takes", hint="key the dict by the model's input names only")
    return {n: n for n in names}


def plan_input(model_input: TensorDescription, data: DataSource, binding: str | None, rescales: bool,
               options: PackageOptions, only: bool) -> InputPlan:
    """The role and preprocessing of one input, from the model and the data (flags: single input)."""
    dtype = str(model_input.dtype)
    shape = list(model_input.shape)
    data_dtype = data.dtype if binding is None else data.named[binding].dtype
    if dtype not in FLOAT_DTYPES:
        if data_dtype.kind not in "iu":
            raise DataError(f"model input {model_input.name!r} takes {dtype} values (ids, indices) but the data "
                            f"for it is {data_dtype}", hint=f"give integer arrays for {model_input.name!r}")
        return InputPlan(model_input.name, shape, dtype, "integer", None)
    overrides = options.preprocessing if only else {}
    spec = infer_preprocessing(shape, data_dtype, rescales, overrides)
    if spec.resize is not None or data.kind == "images":
        _check_image_size_known(spec, data, model_input)
        return InputPlan(model_input.name, shape, dtype, "image", spec)
    if data_dtype.kind in "iu" and not any(v is not None for v in overrides.values()):
        spec.scale = 1.0  # integer data for a float tensor that is not an image: values, not pixels
        spec.inferred_from = f"{data_dtype} data for a float input that is not an image: values passed unchanged"
    return InputPlan(model_input.name, shape, dtype, "values", spec)


def model_ready(plan: InputPlan, raw: np.ndarray, what: str) -> np.ndarray:
    """Raw samples as the model takes them: normalized floats, or integers passed through."""
    if plan.role == "integer":
        return conform(np.asarray(raw), plan.sample_shape, what).astype(plan.dtype)
    x = normalize(raw, plan.spec) if plan.spec is not None else np.asarray(raw, np.float32)
    return conform(x, plan.sample_shape, what).astype(np.float32)


def _taken(source: DataSource, indices: np.ndarray) -> str:
    """Which of the file's samples a shape in a message counts (a split or ``--samples`` takes fewer
    than the file holds: the file's own count is named, so its shape is not misread)."""
    return "" if len(indices) == source.count else f" ({len(indices)} of its {source.count} samples)"


def _pick(x: Any, binding: str | None) -> np.ndarray:
    return x if binding is None or not isinstance(x, dict) else x[binding]


def _labelled_output(outputs: list[TensorDescription], labels: list[str] | None) -> TensorDescription | None:
    """The output class labels and targets belong to: the only one, or the only one with as many
    classes as there are labels."""
    if len(outputs) == 1:
        return outputs[0]
    if not labels:
        return None
    matching = [o for o in outputs if len(o.shape) == 2 and o.shape[-1] == len(labels)]
    if len(matching) != 1:
        raise DataError(f"{len(labels)} class labels but {len(matching)} of the model's outputs "
                        f"({', '.join(o.name for o in outputs)}) have {len(labels)} classes",
                        hint="labels must belong to exactly one output")
    return matching[0]


def data_guards(values: np.ndarray, x: np.ndarray, spec: Preprocessing) -> list[str]:
    """Calibration data that would give bad INT8 ranges: said with numbers, recorded in the manifest."""
    found = []
    low, high = float(values.min()), float(values.max())
    if (values.dtype.kind == "f" and spec.scale == 1.0 and not spec.mean[0] and low >= 0 and 2.0 < high <= 255.0
            and _looks_like_pixels(values)):
        found.append(
            f"calibration values range {low:g}..{high:g} but the preprocessing passes floats unchanged; if the model "
            "expects 0..1 inputs, pass --scale 0.00392157 (or give uint8 images)"
        )
    if values.dtype.kind in "iu" and spec.scale == 1.0 and high > 1 and spec.resize and not from_model(spec):
        found.append(f"integer calibration values range {low:g}..{high:g} with scale 1: the model sees raw pixel values")
    distinct = len(np.unique(x.reshape(len(x), -1), axis=0))
    if distinct == 1 and len(x) > 1:
        found.append(f"all {len(x)} calibration samples are the same sample: INT8 ranges will not cover real inputs")
    elif distinct < 0.5 * len(x):
        found.append(f"only {distinct} of {len(x)} calibration samples are distinct")
    return found


def _looks_like_pixels(values: np.ndarray) -> bool:
    """Float data holding 8-bit pixel values (whole numbers 0..255), as images saved as floats do;
    a spectrogram, features or audio (fractional values) is fed as it is, so no 1/255 hint."""
    sample = values.reshape(-1)[:: max(1, values.size // 100_000)]
    return float(np.mean(sample == np.rint(sample))) >= 0.99


def class_coverage(y: np.ndarray | None, output: TensorDescription) -> list[str]:
    found = []
    classes = output.shape[-1] if len(output.shape) == 2 else -1
    if y is not None and classes > 1:
        missing = sorted(set(range(classes)) - {int(v) for v in y})
        if missing:
            shown = ", ".join(str(m) for m in missing[:10]) + (" ..." if len(missing) > 10 else "")
            found.append(f"{len(missing)} of {classes} classes have no calibration sample (classes {shown})")
    return found


def _load(source: DataSource, indices: np.ndarray, spec: Preprocessing | None, what: str) -> RawBatch:
    size = tuple(spec.resize) if spec is not None and spec.resize else None
    batch = source.load(indices, size, spec.color_order if spec is not None else "RGB")  # type: ignore[arg-type]
    if source.kind == "images" and spec is not None:
        batch.x = to_layout(batch.x, spec)
    for name, x in (batch.x.items() if isinstance(batch.x, dict) else [("", batch.x)]):
        check_finite(x, f"{what} {source.description}" + (f" ({name})" if name else ""), names=batch.names)
    return batch


def _check_image_size_known(spec: Preprocessing, calibration: DataSource, model_input: TensorDescription) -> None:
    if calibration.kind == "images" and spec.resize is None:
        raise DataError(
            f"model input {model_input.name!r} has dynamic height/width {list(model_input.shape)} and the "
            "calibration data is an image folder: edgekit cannot tell what size to resize images to",
            hint="pass --resize HxW (e.g. --resize 320x320) with the size the model should run at, or "
                 f"--input-shape {model_input.name}=1x320x320x3 to fix the model's dimensions",
        )


def _labels(
    labels: list[str] | None, calibration: DataSource, evaluation: DataSource | None, output: TensorDescription
) -> list[str] | None:
    labels = labels or calibration.labels or (evaluation.labels if evaluation else None)
    classes = output.shape[-1] if len(output.shape) == 2 else None
    if labels is not None and classes not in (None, -1) and len(labels) != classes:
        raise DataError(
            f"{len(labels)} class labels but the model outputs {classes} classes",
            hint="give one label per model output class (--labels FILE, or class sub-folders)",
        )
    return labels


def _check_targets(y: np.ndarray | None, output: TensorDescription) -> None:
    if y is None or len(output.shape) != 2:
        return
    check_class_targets(y, output.shape[-1])
