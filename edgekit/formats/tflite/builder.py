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
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...conversion import forms, worker
from ...errors import ConversionError, EdgekitError, OTHER_ROUTES, UnsupportedOpError
from ...fsutil import sha256_file
from ...manifest import Artifact, QuantParams
from ...conversion.layer_names import in_layer, layer_of
from ..building import HISTOGRAM, MINMAX, BuildContext, Builder, BuildResult, QuantGrid
from ..precision import Precision
from .convert import (FloatRequest, SqnrRequest, TFLiteRequest, convert, convert_float, made_from, mark_made_from,
                      unmark, worst_sqnr)
from .from_torch import TorchReport, TorchRequest
from .precision import ArtifactGraph, analyse, artifact_graph, full_integer_float_ops
from ..plan import FLOAT, PrecisionPlan
from .quantizer import MODULES, SCOPES, QuantizerRequest, layer_test, quantize_float_tflite
from .requantize import FIXED_INT8_OUTPUT

ARTIFACT_PATH = "tflite/model.int8.tflite"
# in the build's work folder: the model's and its static-batch graph's paths, once the batch-free graph failed
# on TensorList ops
BATCH_FREE_FAILED = "tflite.batch-free-failed"


class TFLiteBuilder(Builder):
    name = "tflite"
    backend = "litert"
    # TensorFlow's and LiteRT Quantizer's CONCATENATION: its inputs and output on one scale; the
    # int8 kernels' fixed output grids (``requantize.FIXED_INT8_OUTPUT``): a YOLO head's sigmoid scores
    # on 1/256, where a threshold of 0.25 is a grid point, not between two calibrated ones
    grid = QuantGrid("tflite", tied_ops=("Concat",), fixed_outputs=tuple(
        (onnx_op, *FIXED_INT8_OUTPUT[op]) for op, onnx_op in (("LOGISTIC", "Sigmoid"), ("SOFTMAX", "Softmax"),
                                                               ("TANH", "Tanh"))))

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        if context.model.form == forms.TORCH_PROGRAM:
            return self._build_from_torch(context, on_progress)
        if context.plan.int16:  # per-layer precision beyond float: LiteRT Quantizer on the float conversion
            # (float layers stay with TensorFlow's converter, whose int8 builds of the same plan measured
            # closer to float than LiteRT Quantizer's on the reference models: see README Limits)
            return self._build_from_float(context, on_progress)
        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        failed_before = Path(context.workdir) / BATCH_FREE_FAILED
        known = failed_before.read_text().split("\n") if failed_before.exists() else []
        if known[:1] == [str(context.model.path)]:  # a search's later tries: the batch-free graph fails alike
            return self._build_from_float(context, on_progress, known[1])
        try:
            return self._build_from_graph(context, output, on_progress)
        except ConversionError as failed:
            static = static_graph(context, failed)
            if not static:
                raise
            failed_before.write_text(f"{context.model.path}\n{static}")
            return self._build_from_float(context, on_progress, static)

    def _build_from_graph(self, context: BuildContext, output: Path,
                          on_progress: Callable[[int, int], None] | None) -> BuildResult:
        """TensorFlow's converter, full-integer INT8 (float layers by the debugger's denylist)."""
        report = worker.convert(convert, TFLiteRequest(
            saved_model=context.model.path,
            calibration_npy=context.calibration_npy,
            output=str(output),
            quantize=True,
            allow_float_ops=context.allow_float_ops,
            plan=context.plan,
            output_layers=dict(context.output_layers),
            explain_npy=context.explain_npy,
            layer_names=tuple(context.layer_names),
            float_output=str(Path(context.workdir) / "tflite.float.tflite"),
            float16_output=str(Path(context.workdir) / "tflite.float16.tflite") if context.also_float else None,
            calibrated_cache=str(Path(context.workdir) / "tflite.calibrated.tflite"),
        ), what="TFLite conversion", timeout=context.timeout_s, on_progress=on_progress)
        graph = _loadable(lambda: artifact_graph(str(output)), "TFLiteConverter")
        precision = analyse(graph, list(context.layer_names), _output_writers(graph, context))
        if not context.allow_float_ops:
            _refuse_unexpected_float_ops(full_integer_float_ops(precision), context.plan.floats)
        inputs, outputs = io_quantization(graph)
        fallback = {"fallback_model": str(Path(context.workdir) / "tflite.float16.tflite"),
                    "fallback_precision": "float16"} if context.also_float else {}
        fake_quant = context.source_precision.learned  # TF's converter lowers fake-quant ops with their ranges
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
                "tensorflow": report.tensorflow,
                "ops": report.ops,
                "calibration_method": MINMAX,
                "seconds": report.seconds,
            },
            details={
                **context.plan.record(),
                "precision": precision.record(),
                **({"explain": report.explain} if report.explain is not None else {}),
                **({"learned_ranges": {"by": "TensorFlow's converter, from the graph's fake-quant ops"}}
                   if fake_quant else {}),
            },
        ))


    def fallback_io(self, path: Path, quantized: Artifact) -> tuple[list[QuantParams], list[QuantParams]]:
        return io_quantization(str(path))

    def _build_from_float(self, context: BuildContext, on_progress: Callable[[int, int], None] | None,
                          saved_model: str | None = None) -> BuildResult:
        """TensorFlow's converter in float once per packaging run (kept in the work folder for
        every later quantization of it), then LiteRT Quantizer with the per-layer recipe.
        ``saved_model``: the graph at a static batch (``forms.STATIC_BATCH_GRAPH``), where the
        batch-free one holds TensorList ops the converter cannot lower."""
        float_model = Path(context.workdir) / "tflite.float.tflite"
        float16 = Path(context.workdir) / "tflite.float16.tflite" if context.also_float else None
        saved_model = saved_model or context.model.path
        if not made_from(str(float_model), saved_model) or (float16 and not float16.is_file()):
            try:
                worker.convert(convert_float, FloatRequest(saved_model=saved_model, output=str(float_model),
                                                           float16_output=str(float16) if float16 else None),
                               what="TFLite float conversion", timeout=context.timeout_s)
            except ConversionError as failed:
                if saved_model != context.model.path or not static_graph(context, failed):
                    raise
                return self._build_from_float(context, on_progress, static_graph(context, failed))
            mark_made_from(str(float_model), saved_model)
        static = saved_model != context.model.path
        tool = ((f"{context.model.via}, then " if context.model.via else "")
                + "tensorflow.lite.TFLiteConverter.from_saved_model (float"
                + (", traced at batch 1 with its variables folded: its TensorList ops lower to loops only at a "
                   "static shape)" if static else ")"))
        fallback = {"fallback_model": str(float16), "fallback_precision": "float16"} if float16 else {}
        return self._quantized_from_float(context, float_model, SCOPES, tool, on_progress,
                                          float_by="float TFLite (TFLiteConverter), LiteRT", **fallback)

    def _quantized_from_float(self, context: BuildContext, float_model: Path, namer: str, tool: str,
                              on_progress: Callable[[int, int], None] | None, float_by: str, note: str = "",
                              learned: LearnedSource | None = None, **fallback: Any) -> BuildResult:
        """The artifact from a float ``.tflite``: LiteRT Quantizer (int8 weights per channel and
        int8 activations; each --keep-float layer float, each --int16-activations layer int16x8),
        then the same checks as every TFLite artifact."""
        from .from_torch import torch_layer

        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        layers = dict(context.plan.layers)
        if learned:  # the layers the quantized source left float stay float
            layers.update({layer: FLOAT for layer in learned.float_layers if layer not in layers})
        report = worker.convert(quantize_float_tflite, QuantizerRequest(
            float_model=str(float_model), calibration_npy=context.calibration_npy, output=str(output), layers=layers,
            namer=namer, layer_names=tuple(context.layer_names), explain_npy=context.explain_npy,
            output_layers=dict(context.output_layers),
            learned_ranges=learned.ranges if learned else None,
            learned_weight_scales=learned.weight_scales if learned else None,
        ), what="TFLite quantization (LiteRT Quantizer)", timeout=context.timeout_s, on_progress=on_progress)
        graph = _loadable(lambda: artifact_graph(str(output)), "LiteRT Quantizer")
        precision = analyse(graph, list(context.layer_names), _output_writers(graph, context),
                            layer_namer=torch_layer if namer == MODULES else layer_of)
        if not context.allow_float_ops:
            _refuse_unexpected_float_ops(full_integer_float_ops(precision), context.plan.floats,
                                         layer_test(namer, list(context.layer_names)))
        inputs, outputs = io_quantization(graph)
        return BuildResult(float_model=None if learned else str(float_model), float_by=float_by, **fallback,
                           artifact=Artifact(
            format=self.name, path=ARTIFACT_PATH, sha256=sha256_file(output), bytes=output.stat().st_size,
            precision=precision.label, inputs=inputs, outputs=outputs, float_ops=precision.float_ops,
            converter={"tool": f"{tool}, then LiteRT Quantizer (int8 per-channel weights, int8 activations"
                               + (", the source's learned ranges" if learned else "")
                               + (", per-layer recipe)" if layers else ")"),
                       "litert_quantizer": report.litert_quantizer, "calibration_method": MINMAX,
                       "seconds": report.seconds, **({"why": note} if note else {})},
            details={**context.plan.record(),
                     "precision": precision.record(),
                     **({"explain": report.explain} if report.explain is not None else {}),
                     **({"requantized_outputs": report.fixed_output_scales} if report.fixed_output_scales else {}),
                     **({"learned_ranges": report.learned_ranges} if learned else {})},
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
                _refuse_unexpected_float_ops(full_integer_float_ops(precision), context.plan.floats)
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
        per_layer = bool(context.plan or context.explain_npy or learned)
        request = TorchRequest(model=context.model, calibration_npy=context.calibration_npy, output=str(output),
                               output_names=tuple(context.output_names), float_output=str(float_model),
                               pt2e=not per_layer)
        pt2e_failed = ""
        # the float conversion does not depend on the precision plan: a search's tries quantize the one
        # made for the first (litert-torch converts the whole program again otherwise, 2-3 s a try)
        source_key = json.dumps([context.model.to_dict(), list(context.output_names)], sort_keys=True)
        report: TorchReport | None = None
        float_made = made_from(str(float_model), source_key)
        try:
            if not (per_layer and float_made):
                if not float_made:
                    unmark(str(float_model))  # while it is rewritten: a failure leaves no mark
                # PT2E's build converts the float program too, unless an earlier try made it for this source
                report = worker.convert(convert_torch, replace(request, float_output=None) if float_made else request,
                                        what="TFLite conversion (litert-torch)", timeout=context.timeout_s,
                                        on_progress=on_progress, python=python)
                if not float_made:
                    mark_made_from(str(float_model), source_key)
        except ConversionError as failed:
            if per_layer or "did not finish within" in failed.message:  # a timeout is not a PT2E failure
                raise
            # PT2E's prepare/convert passes rewrite the module (and have failed on large rebuilt
            # graphs); the float conversion alone, quantized by LiteRT Quantizer, avoids them
            pt2e_failed = f"litert-torch's PT2E quantization failed ({failed.message}); LiteRT Quantizer " \
                          "quantized litert-torch's float conversion instead"
            report = worker.convert(convert_torch, replace(request, pt2e=False),
                                    what="TFLite float conversion (litert-torch)", timeout=context.timeout_s,
                                    on_progress=on_progress, python=python)
            mark_made_from(str(float_model), source_key)
        tool = (f"{context.model.via}, then " if context.model.via else "") + "litert_torch.convert (float)"
        fallback = {"fallback_model": str(float_model), "fallback_precision": "float32"} \
            if context.also_float and not learned else {}  # a quantized source has no float model
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
        assert report is not None  # a per-layer build returned above
        return BuildResult(float_model=str(float_model), **fallback,
                           float_by="float TFLite (litert-torch), LiteRT", artifact=Artifact(
            format=self.name, path=ARTIFACT_PATH, sha256=sha256_file(output), bytes=output.stat().st_size,
            precision=precision.label, inputs=inputs, outputs=outputs, float_ops=precision.float_ops,
            converter={"tool": (f"{context.model.via}, then " if context.model.via else "")
                       + "litert_torch.convert + PT2E static INT8 (symmetric, per-channel)",
                       "torch": report.torch, "litert_torch": report.litert_torch, "calibration_method": HISTOGRAM,
                       "seconds": report.seconds, **({"why": pt2e_note} if pt2e_note else {})},
            details={**PrecisionPlan().record(), "environment": python, "precision": precision.record(),
                     # ops given the fixed output scale TFLite's int8 kernels need, requantized after
                     **({"requantized_outputs": report.fixed_output_scales} if report.fixed_output_scales else {})},
        ))


# the build with fewer float ops ships unless it is further from float than the other by CLOSE_DB
# and below GOOD_DB, the values gate's SQNR floor (a build with more float ops is closer to float
# by construction: BatchNorm-after-ReLU measured 23.6 dB int8, 33.3 dB with it float; a GRU's
# gates through LiteRT Quantizer 8 dB)
CLOSE_DB, GOOD_DB = 1.0, 20.0


@dataclass(frozen=True)
class LearnedSource:
    """A QDQ source's learned activation ranges (by ONNX tensor, with the node computing each and
    its input position), the weighted layers it leaves float, and its weights' scales."""

    ranges: dict[str, dict[str, Any]]
    float_layers: list[str]
    weight_scales: dict[str, list[float]]


def learned_ranges(context: BuildContext) -> LearnedSource | None:
    """A QDQ source's learned activation ranges (by ONNX tensor, with the node computing each) and
    the layers it leaves float, when the route's module is rebuilt from that graph; else None."""
    from ...conversion.quantized import float_weighted_nodes, is_qdq_graph, strip_qdq, weight_scales
    from ...conversion.forms import ONNX_REBUILD_LOADER as LOADER

    if context.model.loader != LOADER or not context.source_precision.learned:
        return None
    import onnx

    model = onnx.load(context.model.path)
    if not is_qdq_graph(model):
        return None
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v.name for v in model.graph.input if v.name not in initializers]
    floats, weights = float_weighted_nodes(model), weight_scales(model)
    ranges = strip_qdq(model)
    return LearnedSource(
        ranges={name: {**r, "input": inputs.index(name) if name in inputs else None} for name, r in ranges.items()},
        float_layers=list(floats), weight_scales=weights)


def _worst_sqnr(model: bytes, float_model: Path, context: BuildContext) -> float:
    """The worst output SQNR (dB) of an INT8 build against the float conversion on the first
    calibration samples: how two builds of one model compare before either is validated. Run in
    a child (LiteRT may crash or refuse a build): a build it cannot run scores -inf."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "candidate.tflite"
        path.write_bytes(model)
        try:
            return worker.convert(worst_sqnr, SqnrRequest(candidate=str(path), reference=str(float_model),
                                                          calibration_npy=context.calibration_npy),
                                  what="comparing two TFLite builds on calibration samples",
                                  timeout=context.timeout_s).worst_db
        except EdgekitError:
            return float("-inf")


def _output_writers(graph: ArtifactGraph, context: BuildContext) -> dict[str, str]:
    """The tensor behind each model output -> the layer computing it (converters name that op's
    result after the signature's output, not after the layer)."""
    tensors = graph.output_tensors
    return {tensors[o]: layer for o, layer in context.output_layers.items() if tensors.get(o)}


def static_graph(context: BuildContext, failed: ConversionError) -> str | None:
    """The graph at a static batch the source made (``forms.STATIC_BATCH_GRAPH``), where the
    converter failed on the batch-free graph's TensorList ops; else None."""
    static = context.model.arguments.get(forms.STATIC_BATCH_GRAPH)
    return str(static) if static and "TensorList" in failed.message else None


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


def io_quantization(artifact: str | ArtifactGraph) -> tuple[list[QuantParams], list[QuantParams]]:
    """The signature's inputs and outputs with their int8 scales (``artifact``: the path, read in a
    child, or what ``artifact_graph`` read of it)."""
    graph = artifact_graph(artifact) if isinstance(artifact, str) else artifact
    return [t.params() for t in graph.signature_inputs], [t.params() for t in graph.signature_outputs]


