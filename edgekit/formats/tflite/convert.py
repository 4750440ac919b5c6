"""TFLite conversions, child side: TensorFlow's converter on a SavedModel (``convert``: full-integer
INT8 calibrated with the representative dataset, or with layers kept in float through the
quantization debugger's denylist; ``convert_float``: the float conversion alone), and two builds
of one model compared on calibration samples (``worst_sqnr``). Each runs in a converter child
(``worker.convert``) and answers with a typed report; TensorFlow is imported here only.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import worker
from ...conversion.layer_names import in_layer, layer_of
from ...conversion.messages import Message
from ...errors import ConversionError, EdgekitError, UnsupportedOpError, first_line
from ..building import read_samples, worst_layers
from ..plan import PrecisionPlan

SQNR_SAMPLES = 32


@dataclass(frozen=True)
class TFLiteRequest(Message):
    """One TFLiteConverter run on ``saved_model``. ``plan``: its float layers' ops stay float
    (quantization debugger denylist; the model then has float IO); ``explain_npy``: samples for a
    per-layer SQNR report; ``float_output`` / ``float16_output``: the float conversion and the
    float16 fallback too; ``calibrated_cache``: the calibrated model kept for a search's next try."""

    saved_model: str
    calibration_npy: str
    output: str
    quantize: bool = True
    allow_float_ops: bool = False
    plan: PrecisionPlan = PrecisionPlan()
    explain_npy: str | None = None
    layer_names: tuple[str, ...] = ()
    output_layers: dict[str, str] | None = None
    float_output: str | None = None
    float16_output: str | None = None
    calibrated_cache: str | None = None


@dataclass(frozen=True)
class TFLiteReport(Message):
    tensorflow: str
    ops: str
    seconds: float
    explain: Any = None  # the per-layer report, stored as made


@dataclass(frozen=True)
class FloatRequest(Message):
    """The float conversion alone (``output``) and the float16 fallback (``float16_output``)."""

    saved_model: str
    output: str
    float16_output: str | None = None


@dataclass(frozen=True)
class FloatReport(Message):
    tensorflow: str


@dataclass(frozen=True)
class SqnrRequest(Message):
    """Two ``.tflite`` builds of one model run on the first calibration samples."""

    candidate: str
    reference: str
    calibration_npy: str


@dataclass(frozen=True)
class SqnrReport(Message):
    worst_db: float  # the worst output's SQNR of the candidate against the reference


def _converter(saved_model: str, samples: dict[str, Any] | None, allow_float_ops: bool) -> Any:
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
    if samples is None:
        return converter

    def representative_dataset():  # one sample per step, as the converter expects
        total = _count(samples)
        for i, sample in enumerate(_dataset(samples)()):
            if i % 10 == 0:
                worker.report_progress(i, total)
            yield sample
        worker.report_progress(total, total)

    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative_dataset
    supported = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if allow_float_ops:
        supported.append(tf.lite.OpsSet.TFLITE_BUILTINS)
    converter.target_spec.supported_ops = supported
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    return converter


def convert_float(request: FloatRequest) -> FloatReport:
    """The float TFLite conversion alone (and the float16 fallback), for LiteRT Quantizer."""
    import tensorflow as tf

    saved_model, output, float16_output = request.saved_model, request.output, request.float16_output

    converters = [(output, tf.lite.TFLiteConverter.from_saved_model(saved_model))]
    if float16_output:
        halved = tf.lite.TFLiteConverter.from_saved_model(saved_model)
        halved.optimizations = [tf.lite.Optimize.DEFAULT]
        halved.target_spec.supported_types = [tf.float16]
        converters.append((float16_output, halved))
    for path, converter in converters:
        try:
            Path(path).write_bytes(converter.convert())
        except Exception as exc:
            raise _converter_error(exc) from None
    return FloatReport(tensorflow=tf.__version__)


def convert(request: TFLiteRequest) -> TFLiteReport:
    """Run TFLiteConverter (float, or full-integer INT8 calibrated on ``calibration_npy``);
    ``float_output`` also gets the float conversion, to tell conversion from quantization error,
    and ``float16_output`` the float fallback artifact (float16 weights, float32 arithmetic).

    The plan's float layers are excluded with the quantization debugger's node denylist (the
    model then has float IO); ``explain_npy`` adds a per-layer SQNR report. Both quantize the
    converter's calibrated model, kept in ``calibrated_cache`` for the same SavedModel and
    calibration data: a search's tries quantize it again, they do not convert and calibrate again.
    """
    import tensorflow as tf

    saved_model, calibration_npy, output, quantize = (request.saved_model, request.calibration_npy, request.output,
                                                      request.quantize)
    floats, explain_npy, output_layers = list(request.plan.floats), request.explain_npy, request.output_layers
    float_output, float16_output = request.float_output, request.float16_output
    calibrated_cache, layer_names = request.calibrated_cache, list(request.layer_names)

    samples = read_samples(calibration_npy) if quantize else None
    calibrated = (_CalibratedModel(saved_model, calibration_npy, samples, calibrated_cache)
                  if quantize and (floats or explain_npy) else None)
    converter = _converter(saved_model, samples, request.allow_float_ops or bool(floats))
    ops = "+".join(s.name for s in converter.target_spec.supported_ops) if quantize else "TFLITE_BUILTINS"
    started = time.perf_counter()
    try:
        if floats:
            model = _with_float_layers(calibrated, floats, output_layers or {})
        else:
            model = converter.convert()
            if quantize and _computed_divisors_in(model):
                calibrated = calibrated or _CalibratedModel(saved_model, calibration_npy, samples, calibrated_cache)
                model = calibrated.quantized(_computed_divisors_in(calibrated.quantized()))
    except EdgekitError:
        raise
    except Exception as exc:
        raise _converter_error(exc) from None
    seconds = time.perf_counter() - started
    Path(output).write_bytes(model)
    if float_output and not made_from(float_output, saved_model):
        try:
            Path(float_output).write_bytes(tf.lite.TFLiteConverter.from_saved_model(saved_model).convert())
        except Exception as exc:
            raise _converter_error(exc) from None
        mark_made_from(float_output, saved_model)
    if float16_output and not made_from(float16_output, saved_model):
        halved = tf.lite.TFLiteConverter.from_saved_model(saved_model)
        halved.optimizations = [tf.lite.Optimize.DEFAULT]
        halved.target_spec.supported_types = [tf.float16]
        try:
            Path(float16_output).write_bytes(halved.convert())
        except Exception as exc:
            raise _converter_error(exc) from None
        mark_made_from(float16_output, saved_model)
    explained = None
    if explain_npy:
        _, output_tensors = _tensor_names(model)
        named = {output_tensors[o]: layer for o, layer in (output_layers or {}).items() if output_tensors.get(o)}
        explained = _explain_layers(calibrated, read_samples(explain_npy), layer_names or [], named)
    return TFLiteReport(tensorflow=tf.__version__, ops=ops, seconds=round(seconds, 3), explain=explained)


def _tensor_names(model: bytes) -> tuple[list[str], dict[str, str]]:
    """Every named tensor, and the tensor behind each signature output (named by the signature,
    e.g. ``StatefulPartitionedCall_1:0``, not by the layer that computes it)."""
    from .backend import _interpreter_module, output_tensor_names

    module, _ = _interpreter_module()
    interpreter = module.Interpreter(model_content=model)
    return [d["name"] for d in interpreter.get_tensor_details() if d["name"]], output_tensor_names(interpreter)


def made_from(path: str, key: str) -> bool:
    """Whether ``path`` exists and was written for ``key`` (see ``mark_made_from``)."""
    mark = Path(path + ".source")
    return Path(path).is_file() and mark.is_file() and mark.read_text() == key


def mark_made_from(path: str, key: str) -> None:
    Path(path + ".source").write_text(key)


def unmark(path: str) -> None:
    Path(path + ".source").unlink(missing_ok=True)


class _CalibratedModel:
    """The converter's calibrated float model (activation ranges recorded, nothing quantized yet),
    made once per SavedModel and calibration data and kept in the work folder: quantizing it with a
    node denylist (``--keep-float``) or with numeric checks (``--explain``) is a second's work,
    converting and calibrating is most of a build."""

    def __init__(self, saved_model: str, calibration_npy: str, samples: dict[str, Any], cache: str | None) -> None:
        self.saved_model, self.samples = saved_model, samples
        self._cache = cache
        stat = Path(calibration_npy).stat()
        self._key = f"{saved_model}\n{calibration_npy}\n{stat.st_size}\n{stat.st_mtime_ns}"
        self._bytes: bytes | None = None

    @property
    def model(self) -> bytes:
        if self._bytes is None:
            if self._cache and made_from(self._cache, self._key):
                self._bytes = Path(self._cache).read_bytes()
            else:
                converter = _converter(self.saved_model, self.samples, allow_float_ops=True)
                converter.experimental_mlir_quantizer = True
                converter._experimental_calibrate_only = True  # what QuantizationDebugger does
                self._bytes = converter.convert()
                if self._cache:
                    Path(self._cache).write_bytes(self._bytes)
                    mark_made_from(self._cache, self._key)
        return self._bytes

    def quantized(self, denylisted_nodes: list[str] | None = None, numeric_verify: bool = False) -> bytes:
        """INT8 as the quantization debugger makes it: per-channel weights, ops in the denylist float."""
        from tensorflow.lite.python import convert as tflite_convert

        return tflite_convert.mlir_quantize(self.model, disable_per_channel=False, fully_quantize=False,
                                            enable_numeric_verify=numeric_verify,
                                            denylisted_nodes=denylisted_nodes or None)


def _computed_divisors_in(model: bytes) -> list[str]:
    """The DIV ops of ``model`` whose divisor is computed (``quantizer.computed_divisors``): TF's
    int8 DIV kernel refuses a divisor that rounds to its zero point ("div.cc data[i] !=
    zero_point"), a histogram divided by its count, so those stay float, as on the other route."""
    from .quantizer import computed_divisors_of

    return list(computed_divisors_of(model_content=model))


def _with_float_layers(calibrated: _CalibratedModel, layers: list[str], output_layers: dict[str, str]) -> bytes:
    """The model quantized with the named layers' ops left in float. A layer computing a model output
    is found through the signature: its result tensor carries the output's name, not the layer's."""
    names, output_tensors = _tensor_names(calibrated.quantized())
    by_layer = {layer: output_tensors[out] for out, layer in output_layers.items() if output_tensors.get(out)}
    denylist = [n for n in names if any(in_layer(n, layer) for layer in layers)]
    denylist += [by_layer[layer] for layer in layers if layer in by_layer and by_layer[layer] not in denylist]
    missing = [layer for layer in layers if layer not in by_layer and not any(in_layer(n, layer) for n in names)]
    if missing:
        raise EdgekitError(
            f"--keep-float: no TFLite nodes belong to layer(s) {', '.join(missing)}",
            hint="use layer names as the model defines them (see --explain's report)",
        )
    return calibrated.quantized(denylist)


def _count(samples: dict[str, Any]) -> int:
    return len(next(iter(samples.values())))


def _dataset(samples: dict[str, Any]) -> Any:
    """One sample per step: a list for a one-input model (``""`` key), else a dict by signature
    input name; float inputs as float32, integer inputs (token ids) as they are."""

    def cast(x: Any) -> np.ndarray:
        x = np.asarray(x)
        return x.astype(np.float32) if x.dtype.kind == "f" else x

    def generate():
        for i in range(_count(samples)):
            if list(samples) == [""]:
                yield [cast(samples[""][i : i + 1])]
            else:
                yield {name: cast(x[i : i + 1]) for name, x in samples.items()}

    return generate


def _explain_layers(calibrated: _CalibratedModel, samples: dict[str, Any], layer_names: list[str],
                    named: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per-layer SQNR of the INT8 model's activations vs float (TFLite quantization debugger);
    ``named``: the layer of tensors named after a model output rather than their layer."""
    import csv
    import io

    import tensorflow as tf

    def sqnr(float_values, quant_values, scale, zero_point) -> float:
        reference = np.concatenate([np.ravel(v) for v in float_values]).astype(np.float64)
        dequantized = (np.concatenate([np.ravel(v) for v in quant_values]).astype(np.float64) - zero_point) * scale
        noise = float(np.sum((reference - dequantized) ** 2))
        return float("inf") if noise == 0 else float(10 * np.log10(max(float(np.sum(reference**2)), 1e-30) / noise))

    debugger = tf.lite.experimental.QuantizationDebugger(
        quant_debug_model_content=calibrated.quantized(numeric_verify=True),
        debug_dataset=_dataset(samples),
        debug_options=tf.lite.experimental.QuantizationDebugOptions(layer_direct_compare_metrics={"sqnr": sqnr}),
    )
    debugger.run()
    buffer = io.StringIO()
    debugger.layer_statistics_dump(buffer)
    rows = []
    for row in csv.DictReader(io.StringIO(buffer.getvalue())):
        value = float(row["sqnr"])
        rows.append({
            "layer": (named or {}).get(row["tensor_name"]) or layer_of(row["tensor_name"], layer_names),
            "op": row["op_name"],
            "tensor": row["tensor_name"],
            "sqnr_db": value if np.isfinite(value) else None,
            "max_abs_error": float(row["max_abs_error"]),
        })
    return worst_layers(rows)


def _converter_error(exc: Exception) -> Exception:
    """Turn the converter's MLIR dump into one line naming the ops (and layers) it refused."""
    text = str(exc)
    ops = sorted(set(re.findall(r"'(tf\.\w+)' op is neither a custom op nor a flex op", text)))
    if ops:
        layers = sorted(set(re.findall(r'loc\(.*?"[^"/]*?/?([^"/]+)/[^"/]+@', text)))
        where = f" (in {', '.join(layers[:5])})" if layers else ""
        return UnsupportedOpError(
            f"TFLite has no builtin kernel for {', '.join(ops)}{where}",
            hint="replace the layer with TFLite-supported ops (see the TFLite op compatibility list)",
        )
    first = next((line for line in text.splitlines() if "error" in line.lower()), text.splitlines()[0] if text else "")
    return ConversionError(f"TFLite converter failed: {first.strip()}")


def worst_sqnr(request: SqnrRequest) -> SqnrReport:
    """The worst output SQNR (dB) of ``candidate`` against ``reference``; LiteRT refusing to run
    one is that build's failure, named."""
    from .backend import LiteRTBackend

    candidate, reference = request.candidate, request.reference
    samples = read_samples(request.calibration_npy)
    count = min(SQNR_SAMPLES, len(next(iter(samples.values()))))
    outputs = []
    for file in (candidate, reference):
        backend = LiteRTBackend(str(file))
        try:
            names = [t.name for t in backend.inputs]
            runs = []
            for i in range(count):
                if list(samples) == [""]:
                    feeds: Any = [np.asarray(samples[""][i:i + 1])]
                else:
                    feeds = {n: np.asarray(samples[n][i:i + 1]) for n in names}
                try:
                    runs.append(backend.run(feeds))
                except EdgekitError:
                    raise
                except Exception as exc:  # LiteRT refusing to run a build: this build's failure, named
                    raise ConversionError(f"LiteRT cannot run {Path(file).name}: {type(exc).__name__}: "
                                          f"{first_line(exc)[:200]}") from None
        finally:
            backend.close()
        outputs.append([np.concatenate([r[k] for r in runs]).astype(np.float64) for k in range(len(runs[0]))])
    worst = float("inf")
    for got, want in zip(*outputs):
        noise = float(np.mean((got - want) ** 2))
        worst = min(worst, 10 * np.log10(float(np.mean(want ** 2)) / noise) if noise > 0 else 200.0)
    return SqnrReport(worst_db=float(worst))
