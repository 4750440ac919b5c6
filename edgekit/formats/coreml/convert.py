"""CoreML conversion, child side: an ML program ``coreml/model.int8.mlpackage``, W8A8 (int8 weights
and activations), answered with a typed report (``CoreMLRequest`` -> ``CoreMLReport``).

``coremltools.convert`` turns the route's form (``edgekit.conversion.forms``: a Keras model, a traced
PyTorch module, or a TensorFlow graph through ``source="tensorflow"``) into an ML program for iOS 17 / macOS 14 (the first targets that run
int8 weight dequantization and activation quantization ops). Weights are quantized with
``linear_quantize_weights``: per-channel, symmetric int8, every weight (no size threshold).

Activation calibration needs CoreML prediction, which only macOS has. On macOS the
activations are calibrated with coremltools' ``linear_quantize_activations``; on Linux the
activation ranges come from edgekit's NumPy MIL evaluator (``coreml_eval``) and feed the same
coremltools compression passes. ``--coreml-activations float16`` keeps float16 activations
(weights-only INT8). The saved package is checked structurally (it loads, input/output match
the manifest, every conv/linear weight is int8, activation quantize ops counted) and, on Linux,
numerically with the evaluator against the float model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import forms, worker
from ...errors import ConversionError, OTHER_ROUTES, first_line
from ...conversion.forms import ModelForm, flatten_outputs, load_module
from ...conversion.messages import Message
from ..plan import PrecisionPlan
from .names import source_name
from .quantize import quantize_activations, quantize_weights
from .structure import check_structure, layer_ops, spec_inputs, weighted_layers

ARTIFACT_PATH = "coreml/model.int8.mlpackage"
DEPLOYMENT_TARGET = "iOS17"
LINUX_ACTIVATIONS_REASON = (
    "activation calibration runs CoreML prediction, which exists only on macOS; "
    "weights are int8, activations stay float16"
)


@dataclass(frozen=True)
class CoreMLRequest(Message):
    """One ML program build: ``activations_mode`` int8 (W8A8) or float16; ``eval_npy`` run through
    the MIL evaluator into ``eval_output_npy`` (and the float program's into
    ``float_eval_output_npy``); the ``plan``'s float layers' ops left float16; ``float_cache``: where the
    float ML program is kept between builds of one run (the search's tries convert once)."""

    model: ModelForm
    output: str
    calibration_npy: str
    activations_mode: str = "int8"
    eval_npy: str | None = None
    eval_output_npy: str | None = None
    output_names: tuple[str, ...] = ()
    float_eval_output_npy: str | None = None
    float_output: str | None = None
    plan: PrecisionPlan = PrecisionPlan()
    layer_names: tuple[str, ...] = ()
    float_cache: str | None = None


@dataclass(frozen=True)
class CoreMLReport(Message):
    """What was built: the activations it computes in and why, how they were calibrated, what
    checked its structure and evaluated it (``evaluated_by`` empty: not evaluated, and why)."""

    coremltools: str
    seconds: float
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    structure: dict[str, Any]
    evaluated_by: str | None = None
    not_evaluated: str = ""
    float_evaluated: bool = False
    activations: str = "int8"
    activations_reason: str = ""
    activation_calibration: dict[str, Any] | None = None
    float_layer_ops: dict[str, list[str]] | None = None
    weighted_layers: tuple[str, ...] = ()
    learned_ranges: dict[str, Any] | None = None  # a quantized source's pairs carried (convert_kept)
    float_weight_ops: tuple[str, ...] = ()  # the weighted ops a quantized source left float

    def precision_label(self) -> str:
        """``int8``, ``int8 weights`` (float16 activations), or with the layers kept in float
        counted (``int8+float (2 layers)``), as the other formats label a mixed artifact."""
        base = "int8" if self.activations == "int8" else "int8 weights"
        kept = len(self.float_layer_ops or {}) or len(self.float_weight_ops)
        return f"{base}+float ({kept} layer{'s' if kept != 1 else ''})" if kept else base


def convert(request: CoreMLRequest) -> CoreMLReport:
    """One child-process step, top to bottom: convert the route's form to a float ML program,
    keep it as the fallback, calibrate activations, compress weights, check, evaluate.
    ``float_cache``: where the float ML program is kept between builds of one run (the search's
    tries convert once, then quantize many)."""
    from .tools import coremltools

    ct = coremltools()
    output, float_cache, float_output = request.output, request.float_cache, request.float_output
    eval_npy, eval_output_npy, layer_names = request.eval_npy, request.eval_output_npy, list(request.layer_names)
    samples = _Samples(request.calibration_npy)
    started = time.perf_counter()
    mlmodel = _cached_float_program(float_cache)
    if mlmodel is None:
        mlmodel = _float_program(request.model, samples, list(request.output_names))
        if float_cache:
            _save_atomically(mlmodel, float_cache)
    float_evaluated = _evaluate_float(mlmodel, eval_npy, request.float_eval_output_npy)
    if float_output:  # the float fallback artifact: the ML program before quantization (float16)
        mlmodel.save(float_output)
    float_layer_ops = layer_ops(mlmodel, list(request.plan.floats), layer_names)
    kept = {name for names in float_layer_ops.values() for name in names}
    mlmodel, activations, reason, calibration = quantize_activations(mlmodel, samples, request.activations_mode, kept)
    mlmodel = quantize_weights(mlmodel, kept)
    mlmodel.save(output)
    worker.report_progress(len(samples), len(samples))
    structure = check_structure(output, samples.shapes(spec_inputs(mlmodel)), kept)
    spec = mlmodel.get_spec()
    evaluated, not_evaluated = _evaluate_final(output, eval_npy, eval_output_npy)
    return CoreMLReport(
        evaluated_by=evaluated,
        float_evaluated=bool(float_evaluated),
        activation_calibration=calibration,
        coremltools=ct.__version__,
        seconds=round(time.perf_counter() - started, 3),
        activations=activations,
        activations_reason=reason + (f"; not evaluated: {not_evaluated}" if not_evaluated else ""),
        not_evaluated=not_evaluated or "",
        structure=structure,
        inputs=tuple(source_name(i.name) for i in spec.description.input),
        outputs=tuple(o.name for o in spec.description.output),
        float_layer_ops=float_layer_ops,
        weighted_layers=tuple(weighted_layers(mlmodel, layer_names)),
    )


def _cached_float_program(path: str | None) -> Any:
    """The float ML program an earlier build of this run kept, or None."""
    if not path or not Path(path).exists():
        return None
    from .tools import coremltools

    ct = coremltools()

    from .evaluator import load_program_from_model

    try:
        mlmodel = ct.models.MLModel(path, skip_model_load=True)
        mlmodel._mil_program = load_program_from_model(mlmodel)  # what the compression passes rewrite
        return mlmodel
    except Exception:  # noqa: BLE001 - a cache: converting again is always right
        return None


def _save_atomically(mlmodel: Any, path: str) -> None:
    import shutil

    partial = Path(path).with_name(Path(path).stem + ".partial.mlpackage")
    shutil.rmtree(partial, ignore_errors=True)
    mlmodel.save(str(partial))
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)


def _float_program(form: ModelForm, samples: Any, output_names: list[str]) -> Any:
    """The form as a float ML program, batch 1, float32 inputs and outputs; a PyTorch module's
    outputs take the source's names."""
    from .tools import coremltools

    ct = coremltools()

    if form.form == forms.KERAS_MODEL:
        import keras

        model: Any = keras.models.load_model(form.path, compile=False)
        frontend: dict[str, Any] = {}
        input_name, outputs = model.inputs[0].name, len(model.outputs)
    elif form.form == forms.TORCH_MODULE:  # coremltools' PyTorch frontend, traced
        model, input_name, outputs = _traced_torch(form, samples)
        frontend = {"source": "pytorch"}
    else:  # a SavedModel has several concrete functions; coremltools takes the serving one
        import tensorflow as tf

        loaded = tf.saved_model.load(form.path)
        model, frontend, input_name = [loaded.signatures["serving_default"]], {"source": "tensorflow"}, None
        outputs = len(model[0].structured_outputs)
    named_outputs = frontend.get("source") == "pytorch"  # the traced module's outputs take the source's names
    if outputs > 1 and not named_outputs:
        raise ConversionError(f"CoreML: TensorFlow models with several outputs ({outputs}) are not supported yet",
                              hint=OTHER_ROUTES)
    if isinstance(input_name, list):  # a traced module's inputs, in order, each named
        inputs = [ct.TensorType(name=n, shape=(1, *samples[n].shape[1:]), dtype=_coreml_dtype(samples[n]))
                  for n in input_name]
    else:
        if samples.count_inputs() != 1:
            raise ConversionError("CoreML: Keras and TensorFlow models with several inputs are not supported yet",
                                  hint=OTHER_ROUTES)
        one = samples.only()
        shape, dtype = (1, *one.shape[1:]), _coreml_dtype(one)
        inputs = [ct.TensorType(name=input_name, shape=shape, dtype=dtype)] if input_name else [
            ct.TensorType(shape=shape, dtype=dtype)]
    try:
        return ct.convert(
            model,
            convert_to="mlprogram",
            minimum_deployment_target=getattr(ct.target, DEPLOYMENT_TARGET),
            inputs=inputs,
            # float32 IO (iOS 16+ would default to float16); PyTorch outputs get the source's names
            outputs=[ct.TensorType(name=n, dtype=np.float32) for n in output_names] if named_outputs
            else [ct.TensorType(dtype=np.float32)],
            **frontend,
        )
    except Exception as exc:
        if not (named_outputs and _traced_shape_arithmetic(exc)):
            raise _explain(exc) from None
        # the trace recorded shape arithmetic (x.view(x.shape[0], -1)) coremltools cannot fold:
        # torch.export at the fixed CoreML batch of 1 makes those shapes constants
        return _convert_exported(form, samples, input_name, output_names, exc)


def _evaluate_final(output: str, eval_npy: str | None, eval_output_npy: str | None) -> tuple[str | None, str]:
    """Numeric validation without CoreML: the evaluator on the final package; (by what, or why not)."""
    if not (eval_npy and eval_output_npy):
        return None, ""
    from .evaluator import Evaluator, EvaluatorError, load_program

    try:
        np.savez(eval_output_npy, **Evaluator(load_program(output)).predict_all(np.load(eval_npy)))
    except EvaluatorError as exc:
        return None, exc.message
    return "edgekit NumPy MIL evaluator (float32 arithmetic)", ""


def _evaluate_float(mlmodel: Any, eval_npy: str | None, output_npy: str | None) -> bool:
    """The converted float ML program (before any quantization) on the validation samples, by the
    evaluator: what the conversion alone did. False where the evaluator cannot run it."""
    if not eval_npy or not output_npy:
        return False
    from .evaluator import Evaluator, EvaluatorError, load_program_from_model

    try:
        np.savez(output_npy, **Evaluator(load_program_from_model(mlmodel)).predict_all(np.load(eval_npy)))
    except EvaluatorError:
        return False
    return True


def _traced_torch(form: ModelForm, samples: Any) -> tuple[Any, str, int]:
    """The PyTorch module traced on one calibration sample (coremltools converts TorchScript),
    its input name and its number of outputs."""
    import torch

    module, names = load_module(form, example=samples.example())
    example = tuple(torch.from_numpy(np.ascontiguousarray(samples[n][:1] if samples.named else samples.only()[:1]))
                    for n in names)
    with torch.no_grad():
        produced = flatten_outputs(module(*example))
        traced = module if isinstance(module, torch.jit.ScriptModule) else torch.jit.trace(
            module, example if len(example) > 1 else example[0])
    return traced.eval(), (names if len(names) > 1 else names[0]), len(produced)


class _Samples:
    """Calibration samples by model input name (``.npz``), or one input's array (``.npy``)."""

    def __init__(self, path: str) -> None:
        self.named = path.endswith(".npz")
        self._arrays: dict[str, Any] = dict(np.load(path)) if self.named else {"": np.load(path, mmap_mode="r")}
        self._order: list[str] = []

    def __len__(self) -> int:
        return len(next(iter(self._arrays.values())))

    def __getitem__(self, name: str) -> Any:
        from .names import source_name

        if name in self._arrays:
            return self._arrays[name]
        if source_name(name) in self._arrays:  # an input CoreML renamed (a reserved word)
            return self._arrays[source_name(name)]
        if not self.named:
            return self._arrays[""]
        raise ConversionError(f"CoreML: no calibration samples for input {name!r} (have {sorted(self._arrays)})")

    def count_inputs(self) -> int:
        return len(self._arrays)

    def only(self) -> Any:
        return next(iter(self._arrays.values()))

    def example(self) -> dict[str, np.ndarray]:
        return {name: np.asarray(array[:1]) for name, array in self._arrays.items()}

    def shapes(self, names: list[str]) -> dict[str, tuple[int, ...]]:
        return {name: (1, *self[name].shape[1:]) for name in names}


def _coreml_dtype(array: Any) -> Any:
    return np.int32 if array.dtype.kind in "iu" else np.float32  # token ids stay integers


def _traced_shape_arithmetic(exc: Exception) -> bool:
    """coremltools' TorchScript frontend failing on ``aten::size``/``aten::Int`` values."""
    text = str(exc)
    return isinstance(exc, TypeError) and ("0-dimensional arrays" in text or "length-1 arrays" in text)


def _convert_exported(form: ModelForm, samples: Any, input_name: str, output_names: list[str],
                      first: Exception) -> Any:
    """The model through coremltools' torch.export frontend (batch 1, as every CoreML artifact),
    its inputs and outputs renamed to the source's names."""
    from .tools import coremltools

    ct = coremltools()
    import torch

    module, names = load_module(form, example=samples.example())
    example = tuple(torch.from_numpy(np.ascontiguousarray(samples[n][:1])) for n in names)
    try:
        with torch.no_grad():
            program = torch.export.export(module, example).run_decompositions({})
        mlmodel = ct.convert(program, convert_to="mlprogram",
                             minimum_deployment_target=getattr(ct.target, DEPLOYMENT_TARGET))
    except Exception as exc:
        raise ConversionError(
            f"coremltools cannot convert this model: its TorchScript trace holds shape arithmetic "
            f"({first_line(first)[:200]}) and torch.export failed too ({type(exc).__name__}: {first_line(exc)[:200]})",
            hint="write the reshape without reading shapes (x.flatten(1) instead of x.view(x.shape[0], -1)), "
                 f"or {OTHER_ROUTES}",
        ) from None
    return renamed(mlmodel, input_name if isinstance(input_name, list) else [input_name], output_names)


def renamed(mlmodel: Any, input_names: list[str], output_names: list[str]) -> Any:
    """The ML program with its inputs and outputs named as the source's, in order (a program
    converted by the torch.export frontend names them after the graph's placeholders)."""
    from .tools import coremltools

    ct = coremltools()
    spec = mlmodel.get_spec()
    renames = list(zip([i.name for i in spec.description.input], input_names))
    renames += [(o.name, n) for o, n in zip(spec.description.output, output_names)]
    for old, new in renames:
        if old != new:
            ct.utils.rename_feature(spec, old, new)
    return ct.models.MLModel(spec, weights_dir=mlmodel.weights_dir)


def _explain(exc: Exception) -> Exception:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if "not implemented" in text.lower() or "unsupported" in text.lower():
        return ConversionError(
            f"coremltools cannot convert this model: {first}",
            hint=f"replace the unsupported layer, or {OTHER_ROUTES}",
        )
    return ConversionError(f"coremltools conversion failed: {type(exc).__name__}: {first}")
