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

import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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

ARTIFACT_PATH = "coreml/model.int8.mlpackage"
DEPLOYMENT_TARGET = "iOS17"
_WEIGHT_OPS = {"conv": "weight", "conv_transpose": "weight", "linear": "weight", "matmul": "y"}
INLINE_WEIGHT_LIMIT = 10  # coremltools' should_use_weight_file: smaller consts stay inline, uncompressed
_DEQUANTIZE_OPS = {"constexpr_affine_dequantize", "constexpr_blockwise_shift_scale"}
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
    mlmodel, activations, reason, calibration = _quantize_activations(mlmodel, samples, request.activations_mode, kept)
    mlmodel = _quantize_weights(mlmodel, kept)
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


def _quantize_activations(mlmodel: Any, samples: Any, mode: str,
                          kept: set[str] = frozenset()) -> tuple[Any, str, str, dict[str, Any]]:
    """W8A8 where activations can be calibrated here: (model, activations, why, calibration record);
    the ops in ``kept`` (--keep-float layers) get no quantize/dequantize pair."""
    import coremltools.optimize.coreml as cto

    if mode == "float16":
        return mlmodel, "float16", "--coreml-activations float16: weights int8, activations float16", {}
    names = spec_inputs(mlmodel)
    data = [{name: np.asarray(samples[name][i : i + 1], dtype=np.float32) for name in names}
            for i in range(len(samples))]
    config = cto.OptimizationConfig(
        global_config=cto.experimental.OpActivationLinearQuantizerConfig(mode="linear_symmetric"),
        op_name_configs={op: None for op in kept},
    )
    if sys.platform == "darwin":  # CoreML prediction exists: coremltools' own calibration (W8A8)
        with running_ranges():
            mlmodel = cto.experimental.linear_quantize_activations(mlmodel, config, data)
        return mlmodel, "int8", "calibrated with coremltools linear_quantize_activations on macOS", {
            "method": "minmax (coremltools linear_quantize_activations, CoreML prediction)", "samples": len(data)}
    from .evaluator import EvaluatorError  # Linux: the same passes, fed statistics from edgekit's MIL evaluator

    try:
        mlmodel, stats = calibrate_activations_on_linux(mlmodel, data, config)
    except EvaluatorError as exc:  # an op outside the evaluator: weights-only INT8, said plainly
        return mlmodel, "float16", (
            f"activations not calibrated on Linux ({exc.message}); weights are int8, activations float16"), {}
    return mlmodel, "int8", (
        "calibrated on Linux: activation ranges from edgekit's NumPy MIL evaluator, quantize/dequantize "
        "pairs inserted by coremltools' own linear_quantize_activations passes"
    ), {"method": "minmax (edgekit MIL evaluator) + coremltools compression passes", "samples": len(data),
        "tensors": len(stats), "ranges": {k: [round(v["rmin"], 6), round(v["rmax"], 6)] for k, v in stats.items()}}


def _quantize_weights(mlmodel: Any, kept: set[str] = frozenset()) -> Any:
    """Every weight int8, per channel; the weights of the ops in ``kept`` stay float16."""
    import coremltools.optimize.coreml as cto

    weights = cto.OptimizationConfig(
        global_config=cto.OpLinearQuantizerConfig(
            mode="linear_symmetric", dtype="int8", granularity="per_channel", weight_threshold=0
        ),
        op_name_configs={op: None for op in kept},
    )
    return cto.linear_quantize_weights(mlmodel, config=weights)


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


def spec_inputs(mlmodel: Any) -> list[str]:
    return [i.name for i in mlmodel.get_spec().description.input]


def calibrate_activations_on_linux(mlmodel: Any, data: list[dict[str, np.ndarray]], config: Any) -> tuple[Any, dict]:
    """``linear_quantize_activations`` without CoreML prediction.

    coremltools gathers per-tensor min/max by running the model with CoreML (macOS only), then
    applies its compression passes. Here the same statistics come from edgekit's NumPy MIL
    evaluator and feed the very same passes, so the result is what macOS would produce from
    the same ranges.
    """
    from collections import defaultdict

    from coremltools import _SPECIFICATION_VERSION_IOS_17
    from coremltools.converters.mil.frontend.milproto import load as milproto_load
    from coremltools.converters.mil.mil.passes.graph_pass import PassOption
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
    from coremltools.models import utils as model_utils
    from coremltools.optimize.coreml.experimental._model_debugger import ModelDebugger
    from coremltools.optimize.coreml.experimental._post_training_quantization import (
        _adjust_concat_surrounding_activation_stats,
    )

    from .evaluator import Evaluator, EvaluatorError, load_program_from_model

    debugger = ModelDebugger(mlmodel)
    outputs = {o.name for o in mlmodel.get_spec().description.output}
    wanted = set(debugger.get_intermediate_output_names(lambda op: op.spec.type != "const")) - outputs
    stats: dict[str, dict[str, float]] = defaultdict(dict)
    evaluator = Evaluator(load_program_from_model(mlmodel))
    def observe(name: str, value: Any) -> None:  # float activations only: indices and masks are never quantized
        if name in wanted and np.asarray(value).dtype.kind == "f":
            track_range(name, value, stats)

    from coremltools.proto import FeatureTypes_pb2

    integer_inputs = [f.name for f in mlmodel.get_spec().description.input
                      if f.type.multiArrayType.dataType == FeatureTypes_pb2.ArrayFeatureType.INT32]
    if integer_inputs:  # coremltools' activation passes quantize what follows every input: not indices
        raise EvaluatorError(f"integer input(s) {', '.join(integer_inputs)}: coremltools' activation passes "
                             "would quantize them")
    for i, sample in enumerate(data):
        for name, value in sample.items():
            track_range(name, value, stats)
        evaluator.run(sample, observe=observe)
        if i % 10 == 0:
            worker.report_progress(i, len(data))
    _adjust_concat_surrounding_activation_stats(debugger._get_concat_op_info(), stats)
    stats = {k: {"rmin": float(v["rmin"]), "rmax": float(v["rmax"])} for k, v in stats.items()}
    passes = []
    for name in ("compression::insert_prefix_quantize_dequantize_pair", "compression::insert_suffix_quantize_dequantize_pair"):
        graph_pass = PASS_REGISTRY[name]
        graph_pass.set_options([PassOption("config", config)])
        graph_pass.set_options([PassOption("activation_stats", stats)])
        passes.append(graph_pass)
    passes.append(PASS_REGISTRY["common::dequantize_quantize_pair_elimination"])
    quantized = model_utils._apply_graph_pass(
        mlmodel, passes, spec_version=_SPECIFICATION_VERSION_IOS_17, pymil_load_func=milproto_load.load,
        skip_model_load=True,
    )
    return quantized, stats


def track_range(name: str, value: Any, stats: dict[str, dict[str, float]]) -> None:
    """The running min/max of a tensor over every calibration sample. (coremltools'
    ``_update_tensor_range`` overwrites the range with each sample's before comparing, so it keeps
    the last sample's only: a dense layer's output range then came from one sample, and INT8
    clipped everything larger, 8 dB SQNR on a plain MatMul.)"""
    array = np.asarray(value)
    if array.size == 0:
        return
    low, high = float(np.min(array)), float(np.max(array))
    seen = stats.get(name)
    if seen and "rmin" in seen:
        low, high = min(low, seen["rmin"]), max(high, seen["rmax"])
    stats[name] = {"rmin": low, "rmax": high}


@contextmanager
def running_ranges() -> Iterator[None]:
    """coremltools' own calibration (macOS) with ``track_range`` in place of its two range
    updates, which keep only the last sample's min/max."""
    from coremltools.optimize.coreml.experimental import _model_debugger, _post_training_quantization

    saved = (_post_training_quantization._update_tensor_range, _model_debugger.ModelDebugger.record_intermediate_output)
    _post_training_quantization._update_tensor_range = track_range
    _model_debugger.ModelDebugger.record_intermediate_output = staticmethod(
        lambda value, name, stats: track_range(name, value, stats))
    try:
        yield
    finally:
        _post_training_quantization._update_tensor_range = saved[0]
        _model_debugger.ModelDebugger.record_intermediate_output = staticmethod(saved[1])


_CONSTANT_OPS = {"const"} | _DEQUANTIZE_OPS
_CONSTANT_PRESERVING = {"cast", "transpose", "reshape", "expand_dims", "squeeze"}  # constant in, constant out


def _is_constant(source: Any, produced_by: dict[str, Any]) -> bool:
    """Whether an op argument is a constant (a weight), following casts and reshapes back to it;
    a graph input (``source`` None) or any computed value is an activation."""
    for _ in range(8):
        if source is None:
            return False
        if source.type in _CONSTANT_OPS:
            return True
        if source.type not in _CONSTANT_PRESERVING or "x" not in source.inputs:
            return False
        source = produced_by.get(source.inputs["x"].arguments[0].name)
    return False


def check_structure(path: str, input_shapes: dict[str, tuple[int, ...]] | tuple[int, ...],
                    kept: set[str] = frozenset()) -> dict[str, Any]:
    """The saved package loads, has one input of the expected shape, and int8 weights only (but
    for the ops in ``kept``, the --keep-float layers, whose weights are float16 by request)."""
    from .tools import coremltools

    ct = coremltools()
    from coremltools.proto import MIL_pb2

    model = ct.models.MLModel(path, skip_model_load=True)
    spec = model.get_spec()
    if not spec.HasField("mlProgram"):
        raise ConversionError(f"{path} is not an ML program")
    features = list(spec.description.input)
    if not isinstance(input_shapes, dict):  # one input's expected shape
        if len(features) != 1:
            raise ConversionError(f"CoreML model has {len(features)} inputs, expected 1")
        input_shapes = {features[0].name: tuple(input_shapes)}
    for feature in features:
        shape = tuple(int(d) for d in feature.type.multiArrayType.shape)
        expected = input_shapes.get(feature.name) or input_shapes.get(source_name(feature.name))
        if expected is None and len(features) == 1:
            expected = next(iter(input_shapes.values()))
        if expected is None or shape != tuple(expected):
            raise ConversionError(f"CoreML input {feature.name} has shape {shape}, expected {expected}")
    function = spec.mlProgram.functions["main"]
    operations = function.block_specializations[function.opset].operations
    produced_by = {out.name: op for op in operations for out in op.outputs}
    weight_ops = int8_weights = 0
    float_weights: list[str] = []
    kept_weights: list[str] = []
    inline_weights: list[str] = []
    for op in operations:
        argument = _WEIGHT_OPS.get(op.type)
        if argument is None or argument not in op.inputs:
            continue
        source = produced_by.get(op.inputs[argument].arguments[0].name)
        if not _is_constant(source, produced_by):
            continue  # a product of two activations (attention's Q.K and scores.V): no weight to compress
        weight_ops += 1
        if source is not None and source.type in _DEQUANTIZE_OPS:
            data = source.attributes.get("quantized_data") or source.attributes.get("data")
            if data is not None and data.type.tensorType.dataType == MIL_pb2.INT8:
                int8_weights += 1
                continue
        if op.outputs[0].name in kept:
            kept_weights.append(op.outputs[0].name)
            continue
        if source is not None and source.type == "const" and 0 < _element_count(source) < INLINE_WEIGHT_LIMIT:
            inline_weights.append(op.outputs[0].name)  # coremltools stores these inline, never compressed
            continue
        float_weights.append(op.outputs[0].name)
    if float_weights:
        raise ConversionError(f"CoreML weights left in float for: {', '.join(float_weights[:5])}")
    int8_activations = sum(
        1 for op in operations if op.type == "quantize"
        and _string_attr(op, produced_by, "output_dtype") in ("int8", "uint8")
    )
    return {
        "int8_activation_quantize_ops": int8_activations,
        "loads": True,
        "spec_version": spec.specificationVersion,
        "input": {"name": feature.name, "shape": list(shape)},
        "outputs": [o.name for o in spec.description.output],
        "weight_ops": weight_ops,
        "int8_weight_ops": int8_weights,
        # weights of fewer than 10 values: coremltools keeps them inline in float16 by design
        "inline_float16_weight_ops": inline_weights,
        "float16_weight_ops_kept": kept_weights,  # --keep-float layers
        "ops": sorted({op.type for op in operations}),
    }


_GENERIC_NAME = re.compile(r"^[a-z_]+?_\d+(_cast_fp\d+)?$")  # an op a MIL pass renamed: conv_0_cast_fp16


def layer_ops(mlmodel: Any, layers: list[str], layer_names: list[str]) -> dict[str, list[str]]:
    """The ML program's compute ops of each --keep-float layer, by name: ops named after the
    layer's scope (coremltools writes a TensorFlow scope's '/' as '_': ``model_1_conv2_1_BiasAdd``),
    and ops a pass renamed (``conv_0``) whose results go only to that layer's ops. A layer with no
    op is refused by name, never ignored. A layer folded into the next one's op (a Conv and its
    BatchNorm) is that op."""
    if not layers:
        return {}
    from ...errors import EdgekitError

    operations = [op for op in mlmodel._mil_program.functions["main"].operations if op.op_type != "const"]
    known = [re.sub(r"[^0-9A-Za-z]", "_", name) for name in layer_names]

    def named_after(op_name: str, layer: str) -> bool:
        return re.search(rf"(^|_){re.escape(layer)}(_\d+)?(_|$)", op_name) is not None

    def folded_into(layer: str) -> str | None:
        """The next layer, when ``layer`` has no op of its own and the next one's op computes it
        (coremltools folds a Conv and the BatchNorm after it into one conv named after the BatchNorm)."""
        if layer not in layer_names:
            return None
        following = layer_names[layer_names.index(layer) + 1:layer_names.index(layer) + 2]
        if not following:
            return None
        scope = re.sub(r"[^0-9A-Za-z]", "_", following[0])
        weighted = [op for op in operations if named_after(op.name, scope) and op.op_type in _WEIGHT_OPS]
        return scope if weighted else None

    found: dict[str, list[str]] = {}
    for layer in layers:
        scope = re.sub(r"[^0-9A-Za-z]", "_", layer)
        if not any(named_after(op.name, scope) for op in operations):
            scope = folded_into(layer) or scope
        members = {op.name for op in operations if named_after(op.name, scope)}
        grew = bool(members)
        while grew:  # renamed ops that feed only this layer's ops belong to it
            grew = False
            for op in operations:
                if op.name in members or not _GENERIC_NAME.match(op.name) or any(named_after(op.name, k)
                                                                                   for k in known):
                    continue
                children = [child for out in op.outputs for child in out.child_ops]
                if children and all(child.name in members for child in children):
                    members.add(op.name)
                    grew = True
        found[layer] = sorted(members)
    missing = [layer for layer, names in found.items() if not names]
    if missing:
        raise EdgekitError(f"--keep-float: no CoreML ops belong to layer(s) {', '.join(missing)}",
                           hint="use layer names as the model defines them (TensorFlow scopes; a traced PyTorch "
                                "module's ops carry no layer names, so that route takes no --keep-float)")
    return found


def weighted_layers(mlmodel: Any, layer_names: list[str]) -> list[str]:
    """The source's layers with a weighted op of their own in the ML program (conv, linear,
    matmul), in the source's order: what ``--keep-float`` can raise here."""
    from ...errors import EdgekitError

    weighted = {op.name for op in mlmodel._mil_program.functions["main"].operations if op.op_type in _WEIGHT_OPS}
    found = []
    for layer in layer_names:
        try:
            members = layer_ops(mlmodel, [layer], layer_names)[layer]
        except EdgekitError:  # no op of its own (an input, a reshape folded away)
            continue
        if weighted & set(members):
            found.append(layer)
    return found


def _element_count(const_op: Any) -> int:
    """Values in a const op's output tensor (0 when its shape is not static)."""
    dimensions = const_op.outputs[0].type.tensorType.dimensions
    count = 1
    for dimension in dimensions:
        if not dimension.HasField("constant"):
            return 0
        count *= dimension.constant.size
    return count


def _string_attr(op: Any, produced_by: dict[str, Any], name: str) -> str:
    """A string parameter of an op, given inline or by a const op."""
    if name not in op.inputs:
        return ""
    source = produced_by.get(op.inputs[name].arguments[0].name)
    value = source.attributes.get("val") if source is not None else None
    if value is None:
        return ""
    strings = value.immediateValue.tensor.strings.values
    return strings[0] if strings else ""


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
