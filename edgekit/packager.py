"""``edgekit package``: source model + calibration data -> validated INT8 package.

Steps: open the data (cheap checks first, before TensorFlow starts), export the model to a
SavedModel and read its signature (child process), infer the preprocessing, select samples
deterministically, compute float reference outputs (child process), build each target's
artifact into a staging directory, validate every artifact against the float outputs with
the device runtime, then publish the package by rename. A failure at any step leaves nothing
in the output directory.
"""

from __future__ import annotations

import errno
import platform
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, worker
from .backends import get_backend
from .data.preprocessing import check_finite, conform, infer_preprocessing, normalize, to_layout
from .data.sources import DataSource, RawBatch, open_data
from .errors import (
    AccuracyDropError,
    DataError,
    EdgekitError,
    ModelSourceError,
    OutputExistsError,
    PartialPackageError,
)
from .fsutil import (
    ensure_writable,
    publish,
    remove_stale,
    remove_stale_temp,
    sha256_tree,
    staging_dir,
    temp_dir,
    write_text_atomic,
)
from .manifest import Manifest, Preprocessing, TensorSpec
from .package_io import write_archive
from .progress import Progress
from .quantize.metrics import OutputComparison, compare_outputs
from .targets import BuildContext, expand_targets, get_target
from .targets.source import detect_format

MIN_RECOMMENDED_SAMPLES = 100
_NOT_MEASURABLE = {"coreml": "CoreML prediction runs only on macOS and the MIL evaluator does not cover this model"}
HOLDOUT_FRACTION = 0.2
EXPLAIN_SAMPLES = 32
TEMP_PREFIX = "edgekit-package-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass
class PackageOptions:
    model: str
    calibration: str
    output_dir: str
    targets: list[str] = field(default_factory=lambda: ["tflite"])
    eval: str | None = None
    name: str | None = None
    samples: int = 300
    eval_samples: int | None = None
    seed: int = 0
    max_accuracy_drop: float = 1.0
    allow_accuracy_drop: bool = False
    allow_float_ops: bool = False
    force: bool = False
    archive: bool = False
    labels_file: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)  # scale, mean, std, color_order, resize
    timeout_s: float | None = None
    allow_partial: bool = False  # with several targets: keep the package if some of them fail
    calibration_method: str = "minmax"  # ONNX: minmax | entropy | percentile
    onnx_activations: str = "s8"  # ONNX: s8 (S8S8) | u8 (U8S8)
    reduce_range: bool = False  # ONNX: 7-bit weights for CPUs without VNNI
    max_intermediate_outputs: int | None = None  # ONNX: bound calibration memory
    keep_float: list[str] = field(default_factory=list)  # layers to keep in float
    coreml_activations: str = "int8"  # int8 (W8A8) | float16
    explain: bool = False  # per-layer quantization error report
    sign_key: str | None = None  # Ed25519 private key: sign manifest.json


@dataclass
class PackageResult:
    path: Path
    manifest: Manifest
    archive: Path | None
    comparisons: dict[str, OutputComparison | None]
    warnings: list[str]
    explanations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def package(options: PackageOptions, progress: Progress | None = None) -> PackageResult:
    progress = progress or Progress()
    fmt = detect_format(options.model)
    name = options.name or _default_name(Path(options.model))
    if not _NAME.match(name):
        raise EdgekitError(
            f"package name {name!r} is not usable as a file name",
            hint="use --name with letters, digits, '.', '_' or '-'",
        )
    out = Path(options.output_dir)
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"output {out} exists and is not a directory", hint="choose another -o")
    destination = out / f"{name}.edgekit"
    archive = out / f"{name}.ekpkg" if options.archive else None
    for path in (destination, archive):
        if path is not None and path.exists() and not options.force:
            raise OutputExistsError(f"{path} already exists")
    if options.samples < 1:
        raise DataError(f"--samples must be at least 1, got {options.samples}", hint="use --samples 100 or more")
    targets = [get_target(t) for t in expand_targets(options.targets)]
    _check_preprocessing_options(options.preprocessing)
    ensure_writable(out, "output directory", is_dir=True)
    remove_stale(out, ".*.partial")  # staging trees of earlier runs that were killed
    remove_stale_temp(TEMP_PREFIX)
    remove_stale_temp(worker.TEMP_PREFIX)
    if options.sign_key:
        from .signing import check_private_key

        check_private_key(options.sign_key)

    calibration = open_data(options.calibration, "calibration")
    evaluation = open_data(options.eval, "evaluation") if options.eval else None
    _check_compatible(calibration, evaluation)
    calib_idx, eval_idx, held_out = _split(calibration, evaluation, options, progress)
    for source_data, indices in ((calibration, calib_idx), (evaluation or calibration, eval_idx)):
        source_data.check_readable(indices)  # a corrupt image is found now, not after the model loads
    labels_given = _read_labels(options.labels_file)
    _check_label_count(labels_given, calibration, evaluation)

    with temp_dir(TEMP_PREFIX) as work:
        with progress.step(f"Loading {fmt} model {options.model}"):
            source = worker.call(
                "edgekit.targets.source:prepare",
                what="loading the model",
                model_path=str(Path(options.model).resolve()),
                fmt=fmt,
                export_dir=str(work / "saved_model"),
            )
        model_input, model_output = _single_io(source)
        if model_input["dtype"] not in ("float32", "float16"):
            raise ModelSourceError(
                f"model input {model_input['name']!r} is {model_input['dtype']}; edgekit quantizes float-input models"
            )
        spec = infer_preprocessing(model_input["shape"], calibration.dtype, source["rescales"], options.preprocessing)
        sample_shape = tuple(None if d == -1 else d for d in model_input["shape"][1:])
        _check_image_size_known(spec, calibration, model_input)

        calib_raw = _load(calibration, calib_idx, spec, "calibration data")
        calib_x = conform(normalize(calib_raw.x, spec), sample_shape, f"calibration data {calibration.description}")
        eval_source = evaluation or calibration
        eval_raw = _load(eval_source, eval_idx, spec, "evaluation data")
        eval_x = conform(normalize(eval_raw.x, spec), sample_shape, f"evaluation data {eval_source.description}")
        labels = _labels(labels_given, calibration, evaluation, model_output)
        data_warnings = data_guards(calib_raw, calib_x, spec, model_output)
        for warning in data_warnings:
            progress.warn(warning)
        targets_y = eval_raw.y
        _check_targets(targets_y, model_output)

        calib_npy, eval_npy, ref_npy = work / "calibration.npy", work / "eval.npy", work / "reference.npy"
        np.save(calib_npy, calib_x.astype(np.float32))
        np.save(eval_npy, eval_x.astype(np.float32))
        with progress.step(f"Float reference outputs on {len(eval_x)} samples"):
            worker.call(
                "edgekit.targets.source:float_reference",
                what="running the float model",
                saved_model=source["saved_model"],
                onnx_model=source.get("onnx_model"),
                inputs_npy=str(eval_npy),
                output_npy=str(ref_npy),
            )
        reference = np.load(ref_npy)
        explain_npy = None
        if options.explain:
            explain_npy = work / "explain.npy"
            np.save(explain_npy, eval_x[:EXPLAIN_SAMPLES].astype(np.float32))

        with staging_dir(destination) as staged:
            artifacts = []
            comparisons: dict[str, OutputComparison | None] = {}
            measured_by: dict[str, str] = {}
            failed: list[dict[str, str]] = []
            context = BuildContext(
                saved_model=source["saved_model"],
                calibration_npy=str(calib_npy),
                package_dir=staged,
                workdir=work,
                source_path=str(Path(options.model).resolve()),
                source_format=fmt,
                allow_float_ops=options.allow_float_ops,
                layer_names=source["layers"],
                keep_float=list(options.keep_float),
                calibration_method=options.calibration_method,
                onnx_activations=options.onnx_activations,
                reduce_range=options.reduce_range,
                max_intermediate_outputs=options.max_intermediate_outputs,
                timeout_s=options.timeout_s,
                float_onnx=source.get("onnx_model"),
                explain_npy=str(explain_npy) if explain_npy else None,
                eval_npy=str(eval_npy),
                coreml_activations=options.coreml_activations,
            )
            for target in targets:
                try:
                    with progress.step(f"Calibrating and converting {target.name} on {len(calib_x)} samples") as update:
                        context.on_progress = update
                        artifact = target.build(context)
                except EdgekitError as exc:
                    if len(targets) == 1:
                        raise
                    failed.append({"target": target.name, "error": exc.message, "hint": exc.hint})
                    progress.warn(f"{target.name} failed: {exc.message}")
                    continue
                with progress.step(f"Validating {target.name} against the float model"):
                    evaluated = context.evaluated_outputs.get(target.name)
                    if evaluated is not None and get_backend(target.backend).available() is None:
                        comparisons[target.name] = compare_outputs(reference, np.load(evaluated), targets_y)
                        measured_by[target.name] = artifact.details.get("evaluated_by", "")
                    else:
                        comparisons[target.name] = _validate(
                            staged / artifact.path, target.backend, eval_x, reference, targets_y
                        )
                artifacts.append(artifact)
            if not artifacts:
                details = "; ".join(f"{f['target']}: {f['error']}" for f in failed)
                raise EdgekitError(f"no target could be built ({details})", hint=failed[0]["hint"] if failed else "")

            validation = _validation_record(
                comparisons, options, eval_source, eval_raw, held_out, evaluation is None, reference, targets_y
            )
            for target_name, how in measured_by.items():
                validation["artifacts"][target_name]["measured_by"] = how
            manifest = Manifest(
                name=name,
                edgekit_version=__version__,
                created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                source={
                    "format": fmt,
                    "file": Path(options.model).name,
                    "sha256": sha256_tree(options.model),
                },
                inputs=[
                    TensorSpec(
                        name=model_input["name"],
                        shape=model_input["shape"],
                        dtype="float32",
                        layout=spec.layout if spec.resize else None,
                        preprocessing=spec,
                        range=[float(calib_x.min()), float(calib_x.max())],
                    )
                ],
                outputs=[
                    TensorSpec(name=model_output["name"], shape=model_output["shape"], dtype="float32", labels=labels)
                ],
                artifacts=artifacts,
                calibration={
                    "samples": int(len(calib_x)),
                    "method": _method_summary(_calibration_methods(targets, options)),
                    "methods": _calibration_methods(targets, options),
                    "seed": options.seed,
                    "source": calibration.description,
                    "data_sha256": calib_raw.sha256,
                    "warnings": data_warnings,
                },
                validation=validation,
                versions=_versions(source),
                failed=failed,
            )
            write_text_atomic(staged / "manifest.json", manifest.to_json())
            if labels:
                write_text_atomic(staged / "labels.txt", "\n".join(labels) + "\n")
            failures = {t: c for t, c in comparisons.items() if c is not None and _too_large(c, options)}
            if failures and not options.allow_accuracy_drop:
                raise AccuracyDropError(_gate_message(failures, options))
            for target_name, comparison in failures.items():
                progress.warn(f"{target_name} failed validation (kept because of --allow-accuracy-drop): "
                              + _gate_message({target_name: comparison}, options))
            if options.sign_key:
                from .signing import sign_directory

                sign_directory(staged, options.sign_key)
            out.mkdir(parents=True, exist_ok=True)
            try:
                publish(staged, destination, replace=options.force)
            except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
                raise OutputExistsError(
                    f"{destination} appeared while this package was being built (another `edgekit package` run "
                    "wrote it first); this run's package was not written",
                    hint="use a different -o or --name for each concurrent run, or pass --force to replace it",
                ) from exc
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
                raise OutputExistsError(
                    f"{destination} appeared while this package was being built (another run wrote it first)",
                    hint="use a different -o or --name for each concurrent run",
                ) from exc
    if archive is not None:
        write_archive(destination, archive, replace=options.force)
    result = PackageResult(destination, manifest, archive, comparisons, progress.warnings)
    if failed and not options.allow_partial:
        listed = "; ".join(f"{f['target']}: {f['error']}" for f in failed)
        raise PartialPackageError(
            f"package written to {destination} without {', '.join(f['target'] for f in failed)} ({listed})",
            hint="fix the model for those targets, drop them from --target, or pass --allow-partial",
            result=result,
        )
    return result


def _calibration_methods(targets: list[Any], options: PackageOptions) -> dict[str, str]:
    """What chose each format's activation ranges: --calibration-method drives ONNX only."""
    return {t.name: (options.calibration_method if t.name == "onnx" else "minmax") for t in targets}


def _method_summary(methods: dict[str, str]) -> str:
    distinct = set(methods.values())
    return distinct.pop() if len(distinct) == 1 else "; ".join(f"{t}: {m}" for t, m in methods.items())


def _default_name(model: Path) -> str:
    stem = model.name if model.is_dir() else model.stem
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "model"
    return cleaned


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


def _single_io(source: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    inputs, outputs = source["inputs"], source["outputs"]
    if len(inputs) != 1 or len(outputs) != 1:
        raise ModelSourceError(
            f"the model has {len(inputs)} inputs and {len(outputs)} outputs; edgekit packages "
            "single-input, single-output models for now",
            hint="wrap the model so it takes one input tensor and returns one output tensor",
        )
    return inputs[0], outputs[0]


def _split(
    calibration: DataSource, evaluation: DataSource | None, options: PackageOptions, progress: Progress
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Calibration and validation indices, seeded; held-out validation when there is no --eval."""
    if evaluation is not None:
        calib = calibration.select(options.samples, options.seed)
        evals = evaluation.select(options.eval_samples, options.seed)
        held_out = True
    elif calibration.count >= 10:
        n_hold = max(1, int(round(calibration.count * HOLDOUT_FRACTION)))
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
    if len(calib) < MIN_RECOMMENDED_SAMPLES:
        progress.warn(
            f"calibrating on {len(calib)} samples; {MIN_RECOMMENDED_SAMPLES}+ representative samples are "
            "recommended for stable INT8 ranges"
        )
    return calib, evals, held_out


def data_guards(raw: RawBatch, x: np.ndarray, spec: Preprocessing, output: dict[str, Any]) -> list[str]:
    """Calibration data that would give bad INT8 ranges: said with numbers, recorded in the manifest."""
    found = []
    values = raw.x
    low, high = float(values.min()), float(values.max())
    if values.dtype.kind == "f" and spec.scale == 1.0 and not spec.mean[0] and low >= 0 and high > 2.0:
        found.append(
            f"calibration values range {low:g}..{high:g} but the preprocessing passes floats unchanged; if the model "
            "expects 0..1 inputs, pass --scale 0.00392157 (or give uint8 images)"
        )
    if values.dtype.kind in "iu" and spec.scale == 1.0 and high > 1 and "Rescaling" not in spec.inferred_from:
        found.append(f"integer calibration values range {low:g}..{high:g} with scale 1: the model sees raw pixel values")
    distinct = len(np.unique(x.reshape(len(x), -1), axis=0))
    if distinct == 1 and len(x) > 1:
        found.append(f"all {len(x)} calibration samples are the same sample: INT8 ranges will not cover real inputs")
    elif distinct < 0.5 * len(x):
        found.append(f"only {distinct} of {len(x)} calibration samples are distinct")
    classes = output["shape"][-1] if len(output["shape"]) == 2 else -1
    if raw.y is not None and classes > 1:
        missing = sorted(set(range(classes)) - {int(v) for v in raw.y})
        if missing:
            shown = ", ".join(str(m) for m in missing[:10]) + (" ..." if len(missing) > 10 else "")
            found.append(f"{len(missing)} of {classes} classes have no calibration sample (classes {shown})")
    return found


def _load(source: DataSource, indices: np.ndarray, spec: Preprocessing, what: str) -> RawBatch:
    size = tuple(spec.resize) if spec.resize else None
    batch = source.load(indices, size, spec.color_order)  # type: ignore[arg-type]
    if source.kind == "images":
        batch.x = to_layout(batch.x, spec)
    check_finite(batch.x, f"{what} {source.description}", names=batch.names)
    return batch


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


def _check_image_size_known(spec: Preprocessing, calibration: DataSource, model_input: dict[str, Any]) -> None:
    if calibration.kind == "images" and spec.resize is None:
        raise DataError(
            f"model input {model_input['name']!r} has dynamic height/width {model_input['shape']} and the "
            "calibration data is an image folder: edgekit cannot tell what size to resize images to",
            hint="pass --resize HxW (e.g. --resize 320x320) with the size the model should run at",
        )


def _labels(
    labels: list[str] | None, calibration: DataSource, evaluation: DataSource | None, output: dict[str, Any]
) -> list[str] | None:
    labels = labels or calibration.labels or (evaluation.labels if evaluation else None)
    classes = output["shape"][-1] if len(output["shape"]) == 2 else None
    if labels is not None and classes not in (None, -1) and len(labels) != classes:
        raise DataError(
            f"{len(labels)} class labels but the model outputs {classes} classes",
            hint="give one label per model output class (--labels FILE, or class sub-folders)",
        )
    return labels


def _check_targets(y: np.ndarray | None, output: dict[str, Any]) -> None:
    if y is None or len(output["shape"]) != 2 or output["shape"][-1] in (-1, 1):
        return
    classes = output["shape"][-1]
    if y.size and (int(y.min()) < 0 or int(y.max()) >= classes):
        raise DataError(
            f"class targets range {int(y.min())}..{int(y.max())} but the model outputs {classes} classes",
            hint="y must hold class indices 0..classes-1 in the model's output order",
        )


def _validate(
    artifact: Path, backend_name: str, x: np.ndarray, reference: np.ndarray, y: np.ndarray | None, batch: int = 32
) -> OutputComparison | None:
    """Outputs of the artifact vs the float reference; None when no runtime for it exists here."""
    backend_cls = get_backend(backend_name)
    if backend_cls.available() is None:
        return None
    backend = backend_cls(str(artifact))
    try:
        outputs = [backend.run(x[i : i + batch])[0] for i in range(0, len(x), batch)]
    finally:
        backend.close()
    return compare_outputs(reference, np.concatenate(outputs), y)


def _too_large(comparison: OutputComparison | None, options: PackageOptions) -> bool:
    if comparison is None:
        return False
    if comparison.degenerate:
        return True
    drop = comparison.accuracy_drop_pp
    return drop is not None and drop > options.max_accuracy_drop


def _gate_message(failures: dict[str, OutputComparison], options: PackageOptions) -> str:
    """Every reason a gate failed, per format: an accuracy drop over the limit, outputs without signal."""
    drops = [f"{t}: -{c.accuracy_drop_pp:.2f} pp" for t, c in failures.items()
             if c.accuracy_drop_pp is not None and c.accuracy_drop_pp > options.max_accuracy_drop]
    constant = [f"{t}: {c.degenerate} (SQNR {c.sqnr_db:.1f} dB, {c.distinct_values} distinct values)"
                for t, c in failures.items() if c.degenerate]
    reasons = []
    if drops:
        reasons.append(f"INT8 accuracy dropped more than --max-accuracy-drop {options.max_accuracy_drop} pp "
                       f"({', '.join(drops)})")
    if constant:
        reasons.append(f"INT8 validation failed, the outputs carry no signal ({'; '.join(constant)})")
    return "; ".join(reasons) + "; no package was written"


def _validation_record(
    comparisons: dict[str, OutputComparison | None],
    options: PackageOptions,
    source: DataSource,
    raw: RawBatch,
    held_out: bool,
    from_calibration: bool,
    reference: np.ndarray,
    targets_y: np.ndarray | None,
) -> dict[str, Any]:
    float_accuracy = float(np.mean(reference.reshape(len(reference), -1).argmax(axis=1) == targets_y)) if (
        targets_y is not None
    ) else None
    artifacts: dict[str, Any] = {}
    for target, comparison in comparisons.items():
        if comparison is None:
            artifacts[target] = {"measured": False, "reason": f"not measurable here: {_NOT_MEASURABLE.get(target, 'no runtime for it on this machine')}"}
        else:
            artifacts[target] = {"measured": True, **comparison.to_dict()}
    return {
        "data": {
            "source": source.description,
            "split": ("held-out calibration samples" if held_out else "calibration samples")
            if from_calibration
            else "evaluation data",
            "samples": int(len(reference)),
            "sha256": raw.sha256,
            "labeled": targets_y is not None,
        },
        "float": {"accuracy": float_accuracy},
        "max_accuracy_drop_pp": options.max_accuracy_drop,
        "passed": not any(_too_large(c, options) for c in comparisons.values()),
        "artifacts": artifacts,
    }


def _versions(source: dict[str, Any]) -> dict[str, str]:
    versions = {"edgekit": __version__, "python": platform.python_version(), "numpy": np.__version__}
    for key in ("tensorflow", "keras"):
        if key in source:
            versions[key] = source[key]
    litert = get_backend("litert").available()
    if litert:
        versions["litert"] = litert
    return versions
