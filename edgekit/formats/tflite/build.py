"""TFLite target: full-integer INT8 ``tflite/model.int8.tflite``.

From a TensorFlow graph (``edgekit.conversion.forms.TF_GRAPH``): converts the SavedModel with
``TFLiteConverter.from_saved_model`` (the path that
works for Keras 3 with TensorFlow 2.20/2.21), ``TFLITE_BUILTINS_INT8`` only, int8 input and
output, calibrated with the representative dataset. The converter silently leaves ops it
cannot quantize in float (DEQUANTIZE -> op -> QUANTIZE), so the result is inspected with the
LiteRT interpreter and any float op is reported by op and layer name. From a PyTorch module
(``TORCH_PROGRAM``): litert-torch's PT2E flow (``from_torch.py``), then the same checks.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import forms, worker
from ...errors import ConversionError, EdgekitError, OTHER_ROUTES, UnsupportedOpError, first_line
from ...fsutil import sha256_file
from ...manifest import Artifact, QuantParams
from ...conversion.layer_names import in_layer, layer_of
from ..building import MINMAX, BuildContext, Builder, BuildResult, read_samples, worst_layers
from ..precision import Precision
from .precision import analyse, artifact_graph, full_integer_float_ops
from ..plan import FLOAT
from .quantizer import MODULES, SCOPES, layer_test, quantize_float_tflite

ARTIFACT_PATH = "tflite/model.int8.tflite"


class TFLiteBuilder(Builder):
    name = "tflite"
    backend = "litert"

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        if context.model.form == forms.TORCH_PROGRAM:
            return self._build_from_torch(context, on_progress)
        if context.int16_layers:  # per-layer precision beyond float: LiteRT Quantizer on the float conversion
            # (float layers stay with TensorFlow's converter, whose int8 builds of the same plan measured
            # closer to float than LiteRT Quantizer's on the reference models: see README Limits)
            return self._build_from_float(context, on_progress)
        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        info = worker.call(
            convert,
            what="TFLite conversion",
            timeout=context.timeout_s,
            on_progress=on_progress,
            saved_model=context.model.path,
            calibration_npy=context.calibration_npy,
            output=str(output),
            quantize=True,
            allow_float_ops=context.allow_float_ops,
            keep_float=list(context.keep_float),
            output_layers=dict(context.output_layers),
            explain_npy=context.explain_npy,
            layer_names=list(context.layer_names),
            float_output=str(Path(context.workdir) / "tflite.float.tflite"),
            float16_output=str(Path(context.workdir) / "tflite.float16.tflite") if context.option("also_float") else None,
            calibrated_cache=str(Path(context.workdir) / "tflite.calibrated.tflite"),
        )
        graph = _loadable(lambda: artifact_graph(str(output)), "TFLiteConverter")
        precision = analyse(graph, list(context.layer_names), _output_writers(graph, context))
        if not context.allow_float_ops:
            _refuse_unexpected_float_ops(full_integer_float_ops(precision), context.keep_float)
        inputs, outputs = io_quantization(graph)
        fallback = {"fallback_model": str(Path(context.workdir) / "tflite.float16.tflite"),
                    "fallback_precision": "float16"} if context.option("also_float") else {}
        fake_quant = bool(context.option("quantized_source"))  # TF's converter lowers fake-quant ops with their ranges
        return BuildResult(float_model=None if fake_quant else str(Path(context.workdir) / "tflite.float.tflite"),
                           **fallback, float_by="float TFLite (TFLiteConverter), LiteRT", artifact=Artifact(
            format=self.name,
            path=ARTIFACT_PATH,
            sha256=sha256_file(output),
            bytes=output.stat().st_size,
            precision=precision.label,
            inputs=inputs,
            outputs=outputs,
            float_ops=precision.float_ops,
            converter={
                "tool": (f"{context.model.via}, then " if context.model.via else "")
                + "tensorflow.lite.TFLiteConverter.from_saved_model",
                "tensorflow": info["tensorflow"],
                "ops": info["ops"],
                "calibration_method": MINMAX,
                "seconds": info["seconds"],
            },
            details={
                "keep_float": list(context.keep_float),
                "precision": precision.record(),
                **({"explain": info["explain"]} if info.get("explain") is not None else {}),
                **({"learned_ranges": {"by": "TensorFlow's converter, from the graph's fake-quant ops"}}
                   if fake_quant else {}),
            },
        ))


    def fallback_io(self, path: Path, quantized: Artifact) -> tuple[list[QuantParams], list[QuantParams]]:
        return io_quantization(str(path))

    def _build_from_float(self, context: BuildContext, on_progress: Callable[[int, int], None] | None) -> BuildResult:
        """TensorFlow's converter in float once per packaging run (kept in the work folder for
        every later quantization of it), then LiteRT Quantizer with the per-layer recipe."""
        float_model = Path(context.workdir) / "tflite.float.tflite"
        float16 = Path(context.workdir) / "tflite.float16.tflite" if context.option("also_float") else None
        if not _made_from(str(float_model), context.model.path) or (float16 and not float16.is_file()):
            worker.call(convert_float, what="TFLite float conversion", timeout=context.timeout_s,
                        saved_model=context.model.path, output=str(float_model),
                        float16_output=str(float16) if float16 else None)
            _mark_made_from(str(float_model), context.model.path)
        tool = ((f"{context.model.via}, then " if context.model.via else "")
                + "tensorflow.lite.TFLiteConverter.from_saved_model (float)")
        fallback = {"fallback_model": str(float16), "fallback_precision": "float16"} if float16 else {}
        return self._quantized_from_float(context, float_model, SCOPES, tool, on_progress,
                                          float_by="float TFLite (TFLiteConverter), LiteRT", **fallback)

    def _quantized_from_float(self, context: BuildContext, float_model: Path, namer: str, tool: str,
                              on_progress: Callable[[int, int], None] | None, float_by: str, note: str = "",
                              learned: dict[str, Any] | None = None, **fallback: Any) -> BuildResult:
        """The artifact from a float ``.tflite``: LiteRT Quantizer (int8 weights per channel and
        int8 activations; each --keep-float layer float, each --int16-activations layer int16x8),
        then the same checks as every TFLite artifact."""
        from .from_torch import torch_layer

        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        layers = dict(context.plan.layers)
        if learned:  # the layers the quantized source left float stay float
            layers.update({layer: FLOAT for layer in learned["float_layers"] if layer not in layers})
        info = worker.call(quantize_float_tflite, what="TFLite quantization (LiteRT Quantizer)",
                           timeout=context.timeout_s, on_progress=on_progress, float_model=str(float_model),
                           calibration_npy=context.calibration_npy, output=str(output), layers=layers, namer=namer,
                           layer_names=list(context.layer_names), explain_npy=context.explain_npy,
                           output_layers=dict(context.output_layers),
                           learned_ranges=(learned or {}).get("ranges"),
                           learned_weight_scales=(learned or {}).get("weight_scales"))
        graph = _loadable(lambda: artifact_graph(str(output)), "LiteRT Quantizer")
        precision = analyse(graph, list(context.layer_names), _output_writers(graph, context),
                            layer_namer=torch_layer if namer == MODULES else layer_of)
        if not context.allow_float_ops:
            _refuse_unexpected_float_ops(full_integer_float_ops(precision), context.keep_float,
                                         layer_test(namer, list(context.layer_names)))
        inputs, outputs = io_quantization(graph)
        return BuildResult(float_model=None if learned else str(float_model), float_by=float_by, **fallback,
                           artifact=Artifact(
            format=self.name, path=ARTIFACT_PATH, sha256=sha256_file(output), bytes=output.stat().st_size,
            precision=precision.label, inputs=inputs, outputs=outputs, float_ops=precision.float_ops,
            converter={"tool": f"{tool}, then LiteRT Quantizer (int8 per-channel weights, int8 activations"
                               + (", the source's learned ranges" if learned else "")
                               + (", per-layer recipe)" if layers else ")"),
                       "litert_quantizer": info["litert_quantizer"], "calibration_method": MINMAX,
                       "seconds": info["seconds"], **({"why": note} if note else {})},
            details={"keep_float": list(context.keep_float), "int16_layers": list(context.int16_layers),
                     "precision": precision.record(),
                     **({"explain": info["explain"]} if info.get("explain") is not None else {}),
                     **({"requantized_outputs": info["fixed_output_scales"]} if info["fixed_output_scales"] else {}),
                     **({"learned_ranges": info["learned_ranges"]} if learned else {})},
        ))

    def _pt2e_or_quantizer(self, context: BuildContext, precision: Precision, float_model: Path, tool: str,
                           on_progress: Callable[[int, int], None] | None,
                           fallback: dict[str, Any]) -> BuildResult | str:
        """PT2E annotates op patterns and leaves the others in float (a BatchNorm after a ReLU, a
        layer norm, attention's matmuls of two activations): LiteRT Quantizer quantizes every op
        of the float conversion it has a kernel for. Its build (returned) ships when it has fewer
        float ops and is not under the floor (``CLOSE_DB``, ``GOOD_DB``); else PT2E's stays in
        place and the reason is returned."""
        output = context.package_dir / ARTIFACT_PATH
        listed = ", ".join(sorted({op["op"] for op in precision.inner}))
        note = f"litert-torch's PT2E quantizer left ops in float ({listed})"
        pt2e_bytes = output.read_bytes()
        try:
            rebuilt = self._quantized_from_float(context, float_model, MODULES, tool, on_progress,
                                                 float_by="float TFLite (litert-torch), LiteRT", note=note, **fallback)
        except EdgekitError as failed:
            output.write_bytes(pt2e_bytes)  # PT2E's artifact, with its float ops named
            if not context.allow_float_ops:
                _refuse_unexpected_float_ops(full_integer_float_ops(precision), context.keep_float)
            return failed.message
        left = rebuilt.artifact.details["precision"]["float_layers"]
        fewer = len([op for op in rebuilt.artifact.float_ops if not op.get("tail")]) < len(precision.inner)
        rebuilt_bytes = output.read_bytes()
        quantizer_db, pt2e_db = _worst_sqnr(rebuilt_bytes, float_model, context), \
            _worst_sqnr(pt2e_bytes, float_model, context)
        if not context.allow_float_ops or (fewer and quantizer_db >= min(pt2e_db - CLOSE_DB, GOOD_DB)):
            output.write_bytes(rebuilt_bytes)
            return rebuilt
        output.write_bytes(pt2e_bytes)
        return (f"LiteRT Quantizer left more ops in float ({', '.join(left)})" if not fewer else
                f"LiteRT Quantizer's build was further from float ({quantizer_db:.1f} dB against {pt2e_db:.1f} dB "
                "on the calibration samples)")

    def _build_from_torch(self, context: BuildContext, on_progress: Callable[[int, int], None] | None) -> BuildResult:
        """litert-torch in its own environment (PT2E static INT8), then the same checks as above."""
        from ...conversion import toolenv
        from .from_torch import convert_torch, torch_layer

        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        python = toolenv.python_for(toolenv.LITERT_TORCH)
        float_model = Path(context.workdir) / "tflite.float.tflite"
        learned = learned_ranges(context)  # a QDQ source: its ranges carried, never calibrated again
        per_layer = bool(context.keep_float or context.int16_layers or context.explain_npy or learned)
        arguments = dict(python=python, model=context.model.to_dict(), calibration_npy=context.calibration_npy,
                         output=str(output), output_names=list(context.output_names), float_output=str(float_model))
        pt2e_failed = ""
        # the float conversion does not depend on the precision plan: a search's tries quantize the one
        # made for the first (litert-torch converts the whole program again otherwise, 2-3 s a try)
        made_from = json.dumps([context.model.to_dict(), list(context.output_names)], sort_keys=True)
        try:
            if per_layer and _made_from(str(float_model), made_from):
                info = {}
            else:
                _unmark(str(float_model))  # while it is rewritten: a failure leaves no mark
                info = worker.call(convert_torch, what="TFLite conversion (litert-torch)", timeout=context.timeout_s,
                                   on_progress=on_progress, pt2e=not per_layer, **arguments)
                _mark_made_from(str(float_model), made_from)
        except ConversionError as failed:
            if per_layer or "did not finish within" in failed.message:  # a timeout is not a PT2E failure
                raise
            # PT2E's prepare/convert passes rewrite the module (and have failed on large rebuilt
            # graphs); the float conversion alone, quantized by LiteRT Quantizer, avoids them
            pt2e_failed = f"litert-torch's PT2E quantization failed ({failed.message}); LiteRT Quantizer " \
                          "quantized litert-torch's float conversion instead"
            info = worker.call(convert_torch, what="TFLite float conversion (litert-torch)",
                               timeout=context.timeout_s, on_progress=on_progress, pt2e=False, **arguments)
            _mark_made_from(str(float_model), made_from)
        tool = (f"{context.model.via}, then " if context.model.via else "") + "litert_torch.convert (float)"
        fallback = {"fallback_model": str(float_model), "fallback_precision": "float32"} \
            if context.option("also_float") and not learned else {}  # a quantized source has no float model
        if per_layer or pt2e_failed:  # PT2E has no per-layer control: LiteRT Quantizer on the float conversion
            return self._quantized_from_float(context, float_model, MODULES, tool, on_progress,
                                              float_by="float TFLite (litert-torch), LiteRT", note=pt2e_failed,
                                              learned=learned, **fallback)
        graph = _loadable(lambda: artifact_graph(str(output)), "litert-torch")
        precision = analyse(graph, list(context.layer_names), _output_writers(graph, context),
                            layer_namer=torch_layer)
        pt2e_note = ""
        if precision.inner or (not context.allow_float_ops and full_integer_float_ops(precision)):
            chosen = self._pt2e_or_quantizer(context, precision, float_model, tool, on_progress, fallback)
            if isinstance(chosen, BuildResult):
                return chosen
            pt2e_note = chosen
        inputs, outputs = io_quantization(graph)
        return BuildResult(float_model=str(float_model), **fallback,
                           float_by="float TFLite (litert-torch), LiteRT", artifact=Artifact(
            format=self.name, path=ARTIFACT_PATH, sha256=sha256_file(output), bytes=output.stat().st_size,
            precision=precision.label, inputs=inputs, outputs=outputs, float_ops=precision.float_ops,
            converter={"tool": (f"{context.model.via}, then " if context.model.via else "")
                       + "litert_torch.convert + PT2E static INT8 (symmetric, per-channel)",
                       "torch": info["torch"], "litert_torch": info["litert_torch"], "calibration_method": MINMAX,
                       "seconds": info["seconds"], **({"why": pt2e_note} if pt2e_note else {})},
            details={"keep_float": [], "environment": python, "precision": precision.record(),
                     # ops given the fixed output scale TFLite's int8 kernels need, requantized after
                     **({"requantized_outputs": info["fixed_output_scales"]} if info.get("fixed_output_scales") else {})},
        ))


# the build with fewer float ops ships unless it is further from float than the other by CLOSE_DB
# and below GOOD_DB, the values gate's SQNR floor (a build with more float ops is closer to float
# by construction: BatchNorm-after-ReLU measured 23.6 dB int8, 33.3 dB with it float; a GRU's
# gates through LiteRT Quantizer 8 dB)
CLOSE_DB, GOOD_DB = 1.0, 20.0
SQNR_SAMPLES = 32


def learned_ranges(context: BuildContext) -> dict[str, Any] | None:
    """A QDQ source's learned activation ranges (by ONNX tensor, with the node computing each) and
    the layers it leaves float, when the route's module is rebuilt from that graph; else None."""
    from ...conversion.quantized import float_weighted_nodes, is_qdq_graph, is_quantized_graph, strip_qdq, weight_scales
    from ...conversion.forms import ONNX_REBUILD_LOADER as LOADER

    if context.model.loader != LOADER or not is_quantized_graph(context.model.path):  # read without weights
        return None
    import onnx

    model = onnx.load(context.model.path)
    if not is_qdq_graph(model):
        return None
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v.name for v in model.graph.input if v.name not in initializers]
    floats, weights = float_weighted_nodes(model), weight_scales(model)
    ranges = strip_qdq(model)
    return {"ranges": {name: {**r, "input": inputs.index(name) if name in inputs else None} for name, r in ranges.items()},
            "float_layers": floats, "weight_scales": weights}


def _worst_sqnr(model: bytes, float_model: Path, context: BuildContext) -> float:
    """The worst output SQNR (dB) of an INT8 build against the float conversion on the first
    calibration samples: how two builds of one model compare before either is validated. Run in
    a child (LiteRT may crash or refuse a build): a build it cannot run scores -inf."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "candidate.tflite"
        path.write_bytes(model)
        try:
            return float(worker.call(worst_sqnr, what="comparing two TFLite builds on calibration samples",
                                     timeout=context.timeout_s, candidate=str(path), reference=str(float_model),
                                     calibration_npy=context.calibration_npy))
        except EdgekitError:
            return float("-inf")


def worst_sqnr(candidate: str, reference: str, calibration_npy: str) -> float:
    """Child side of ``_worst_sqnr``."""
    from .litert import LiteRTBackend

    samples = read_samples(calibration_npy)
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
    return worst


def _output_writers(graph: dict[str, Any], context: BuildContext) -> dict[str, str]:
    """The tensor behind each model output -> the layer computing it (converters name that op's
    result after the signature's output, not after the layer)."""
    tensors = graph["output_tensors"]
    return {tensors[o]: layer for o, layer in context.output_layers.items() if tensors.get(o)}


def _loadable(read: Callable[[], Any], converter: str) -> Any:
    """``read()`` of the artifact just written; LiteRT refusing it is this format's failure, named
    by the op (an int8 LOGISTIC whose output scale is not 1/256: a sigmoid concatenated with other
    values, as in YOLO heads, is rewritten before this: ``requantize``), never a path in the staging
    folder."""
    try:
        return read()
    except EdgekitError as exc:
        reason = exc.message.split(": ", 1)[-1]
        raise ConversionError(
            f"LiteRT cannot load the INT8 TFLite model {converter} wrote: {reason}",
            hint=f"{OTHER_ROUTES}, and report the op named above with the model: the converter wrote a model "
                 "LiteRT's reference kernels cannot prepare",
        ) from None


def _refuse_unexpected_float_ops(float_ops: list[dict[str, str]], kept: tuple[str, ...],
                                 belongs: Callable[[str, str], bool] = in_layer) -> None:
    """Ops the converter left in float that no --keep-float asked for: named by layer
    (``belongs(tensor, layer)``: how this route's tensor names map to the user's layers)."""
    unexpected = [op for op in float_ops
                  if op["layer"] not in kept and not any(belongs(op["tensor"], layer) for layer in kept)]
    if not unexpected:
        return
    tail = any(op.get("tail") for op in unexpected)
    by_layer: dict[str, list[str]] = {}
    for op in unexpected:
        ops = by_layer.setdefault(op["layer"], [])
        if op["op"] not in ops:
            ops.append(op["op"])
    listed = "; ".join(
        f"{', '.join(ops[:6])}{' and more' if len(ops) > 6 else ''} (layer {layer})"
        for layer, ops in list(by_layer.items())[:5]
    )
    raise UnsupportedOpError(f"TFLite cannot run these ops in INT8: {listed}" + (
        "; under --full-integer only a final activation (softmax, sigmoid, tanh, L2 norm) may stay in float after "
        "the last INT8 op" if tail else ""))


def io_quantization(artifact: str | dict[str, Any]) -> tuple[list[QuantParams], list[QuantParams]]:
    """The signature's inputs and outputs with their int8 scales (``artifact``: the path, read in a
    child, or what ``artifact_graph`` read of it)."""
    graph = artifact_graph(artifact) if isinstance(artifact, str) else artifact
    signature = graph["signature"]

    def params(tensors: list[dict[str, Any]]) -> list[QuantParams]:
        return [QuantParams(t["name"], t["dtype"], t["scale"], t["zero_point"]) for t in tensors]

    return params(signature["inputs"]), params(signature["outputs"])


# --- child-process side -------------------------------------------------------------------


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


def convert_float(saved_model: str, output: str, float16_output: str | None = None) -> dict[str, Any]:
    """The float TFLite conversion alone (and the float16 fallback), for LiteRT Quantizer."""
    import tensorflow as tf

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
    return {"tensorflow": tf.__version__}


def convert(
    saved_model: str,
    calibration_npy: str,
    output: str,
    quantize: bool = True,
    allow_float_ops: bool = False,
    keep_float: list[str] | None = None,
    explain_npy: str | None = None,
    layer_names: list[str] | None = None,
    output_layers: dict[str, str] | None = None,
    float_output: str | None = None,
    float16_output: str | None = None,
    calibrated_cache: str | None = None,
) -> dict[str, Any]:
    """Run TFLiteConverter (float, or full-integer INT8 calibrated on ``calibration_npy``);
    ``float_output`` also gets the float conversion, to tell conversion from quantization error,
    and ``float16_output`` the float fallback artifact (float16 weights, float32 arithmetic).

    ``keep_float`` layers are excluded with the quantization debugger's node denylist (the
    model then has float IO); ``explain_npy`` adds a per-layer SQNR report. Both quantize the
    converter's calibrated model, kept in ``calibrated_cache`` for the same SavedModel and
    calibration data: a search's tries quantize it again, they do not convert and calibrate again.
    """
    import tensorflow as tf

    samples = read_samples(calibration_npy) if quantize else None
    calibrated = (_CalibratedModel(saved_model, calibration_npy, samples, calibrated_cache)
                  if quantize and (keep_float or explain_npy) else None)
    converter = _converter(saved_model, samples, allow_float_ops or bool(keep_float))
    ops = "+".join(s.name for s in converter.target_spec.supported_ops) if quantize else "TFLITE_BUILTINS"
    started = time.perf_counter()
    try:
        if keep_float:
            model = _with_float_layers(calibrated, keep_float, output_layers or {})
        else:
            model = converter.convert()
    except EdgekitError:
        raise
    except Exception as exc:
        raise _converter_error(exc) from None
    seconds = time.perf_counter() - started
    Path(output).write_bytes(model)
    if float_output and not _made_from(float_output, saved_model):
        try:
            Path(float_output).write_bytes(tf.lite.TFLiteConverter.from_saved_model(saved_model).convert())
        except Exception as exc:
            raise _converter_error(exc) from None
        _mark_made_from(float_output, saved_model)
    if float16_output and not _made_from(float16_output, saved_model):
        halved = tf.lite.TFLiteConverter.from_saved_model(saved_model)
        halved.optimizations = [tf.lite.Optimize.DEFAULT]
        halved.target_spec.supported_types = [tf.float16]
        try:
            Path(float16_output).write_bytes(halved.convert())
        except Exception as exc:
            raise _converter_error(exc) from None
        _mark_made_from(float16_output, saved_model)
    explained = None
    if explain_npy:
        _, output_tensors = _tensor_names(model)
        named = {output_tensors[o]: layer for o, layer in (output_layers or {}).items() if output_tensors.get(o)}
        explained = _explain_layers(calibrated, read_samples(explain_npy), layer_names or [], named)
    return {"tensorflow": tf.__version__, "ops": ops, "seconds": round(seconds, 3), "explain": explained}


def _tensor_names(model: bytes) -> tuple[list[str], dict[str, str]]:
    """Every named tensor, and the tensor behind each signature output (named by the signature,
    e.g. ``StatefulPartitionedCall_1:0``, not by the layer that computes it)."""
    from .litert import _interpreter_module, output_tensor_names

    module, _ = _interpreter_module()
    interpreter = module.Interpreter(model_content=model)
    return [d["name"] for d in interpreter.get_tensor_details() if d["name"]], output_tensor_names(interpreter)


def _made_from(path: str, key: str) -> bool:
    """Whether ``path`` exists and was written for ``key`` (see ``_mark_made_from``)."""
    mark = Path(path + ".source")
    return Path(path).is_file() and mark.is_file() and mark.read_text() == key


def _mark_made_from(path: str, key: str) -> None:
    Path(path + ".source").write_text(key)


def _unmark(path: str) -> None:
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
            if self._cache and _made_from(self._cache, self._key):
                self._bytes = Path(self._cache).read_bytes()
            else:
                converter = _converter(self.saved_model, self.samples, allow_float_ops=True)
                converter.experimental_mlir_quantizer = True
                converter._experimental_calibrate_only = True  # what QuantizationDebugger does
                self._bytes = converter.convert()
                if self._cache:
                    Path(self._cache).write_bytes(self._bytes)
                    _mark_made_from(self._cache, self._key)
        return self._bytes

    def quantized(self, denylisted_nodes: list[str] | None = None, numeric_verify: bool = False) -> bytes:
        """INT8 as the quantization debugger makes it: per-channel weights, ops in the denylist float."""
        from tensorflow.lite.python import convert as tflite_convert

        return tflite_convert.mlir_quantize(self.model, disable_per_channel=False, fully_quantize=False,
                                            enable_numeric_verify=numeric_verify,
                                            denylisted_nodes=denylisted_nodes or None)


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
    from ...errors import ConversionError

    first = next((line for line in text.splitlines() if "error" in line.lower()), text.splitlines()[0] if text else "")
    return ConversionError(f"TFLite converter failed: {first.strip()}")
