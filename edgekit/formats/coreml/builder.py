"""CoreML's builder, parent side: the route's form and the build's settings sent to the converter
child (``convert.py``; a quantized source's QDQ graph with its own pairs: ``learned.py``) as a
typed request, the artifact assembled from its typed report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...conversion import worker
from ...fsutil import sha256_tree, tree_bytes
from ...manifest import Artifact, QuantParams
from ..building import BuildContext, Builder, BuildResult, Fix, QuantGrid
from .convert import ARTIFACT_PATH, DEPLOYMENT_TARGET, CoreMLRequest, convert
from .learned import KEPT_TOOL, convert_kept, is_kept_qdq


class CoreMLBuilder(Builder):
    name = "coreml"
    backend = "coreml"
    unmeasured_reason = "CoreML prediction runs only on macOS and the MIL evaluator does not cover this model"
    # coremltools' linear_quantize_activations: symmetric int8 (linear_symmetric), half the levels after a ReLU
    grid = QuantGrid("coreml", symmetric_activations=True)

    def fixes(self) -> tuple[Fix, ...]:
        """Where the route keeps no layer in float (a traced PyTorch module: its ops carry no layer
        names), int8 weights with float16 activations (W8A16, what Core ML runs natively on the
        Neural Engine) when int8 activations fail: the weights stay 8-bit, the activations exact."""
        return (Fix("--coreml-activations float16", "coreml_activations", "float16", when="no_layers"),)

    def held_out_of_int8(self, artifact: Artifact) -> list[tuple[str, str, str]] | None:
        """The program's ops each kept layer left unquantized (``float_layer_ops``, read from the
        program); None where the activations are float16 throughout (no layer is int8 to raise)
        or the program was not read per layer."""
        details = artifact.details
        if details.get("activations") == "float16" or "float_layer_ops" not in details:
            return None
        return [("float", layer, op) for layer, ops in (details.get("float_layer_ops") or {}).items() for op in ops]

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        evaluated = str(Path(context.workdir) / "coreml.eval_outputs.npz") if context.eval_npy else None
        float_evaluated = str(Path(context.workdir) / "coreml.float_outputs.npz") if context.eval_npy else None
        report = worker.convert(convert, CoreMLRequest(
            model=context.model,
            output=str(output),
            calibration_npy=context.calibration_npy,
            activations_mode=str(context.option("coreml_activations", "int8")),
            eval_npy=context.eval_npy,
            eval_output_npy=evaluated,
            output_names=tuple(context.output_names),
            float_eval_output_npy=float_evaluated,
            float_output=str(Path(context.workdir) / "coreml.float16.mlpackage") if context.also_float else None,
            plan=context.plan,
            layer_names=tuple(context.layer_names),
            float_cache=str(Path(context.workdir) / f"coreml.float-program.{_form_key(context)}.mlpackage"),
        ), what="CoreML conversion", timeout=context.timeout_s, on_progress=on_progress)
        artifact = Artifact(
            format=self.name,
            path=ARTIFACT_PATH,
            sha256=sha256_tree(output),
            bytes=tree_bytes(output),
            precision=report.precision_label(),
            inputs=[QuantParams(name=n, dtype="float32") for n in report.inputs],
            outputs=[QuantParams(name=n, dtype="float32") for n in report.outputs],
            converter={
                "tool": (f"{context.model.via}, then " if context.model.via else "")
                + "coremltools.convert + coremltools.optimize.coreml",
                "coremltools": report.coremltools,
                "minimum_deployment_target": DEPLOYMENT_TARGET,
                "weights": "int8 per-channel symmetric (linear_quantize_weights)",
                "seconds": report.seconds,
            },
            details={
                "activations": report.activations,
                "activations_reason": report.activations_reason,
                "activation_calibration": report.activation_calibration,
                "evaluated_by": report.evaluated_by,
                "batch": 1,
                "structure": report.structure,
                **context.plan.record(),
                "float_layer_ops": report.float_layer_ops,
                # the layers the search can keep in float (this route has no per-layer report to rank them)
                "weighted_layers": list(report.weighted_layers),
            },
        )
        float_side: dict[str, Any] = {"float_evaluated_npy": float_evaluated, "float_by": "float ML program "
                                      "(coremltools), edgekit MIL evaluator"} if report.float_evaluated else {}
        if context.also_float:
            float_side.update(fallback_model=str(Path(context.workdir) / "coreml.float16.mlpackage"),
                              fallback_precision="float16",
                              fallback_evaluated_npy=float_evaluated if report.float_evaluated else None)
        if report.evaluated_by and evaluated:
            return BuildResult(artifact, evaluated_npy=evaluated, evaluated_by=report.evaluated_by, **float_side)
        why = report.not_evaluated
        return BuildResult(artifact, not_measured=f"CoreML prediction runs only on macOS, and edgekit's MIL evaluator could not run it ({why})"
                           if why else "",
                           **float_side)


class CoreMLBuilderKeepingRanges(CoreMLBuilder):
    """CoreML's builder; a quantized source's QDQ graph is converted with its own pairs
    (``convert_kept``) instead of calibrated and compressed."""

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        if not context.source_precision.learned or not is_kept_qdq(context.model):
            return super().build(context, on_progress)
        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        evaluated = str(Path(context.workdir) / "coreml.eval_outputs.npz") if context.eval_npy else None
        report = worker.convert(convert_kept, CoreMLRequest(
            model=context.model, output=str(output), calibration_npy=context.calibration_npy,
            eval_npy=context.eval_npy, eval_output_npy=evaluated, output_names=tuple(context.output_names),
        ), what="CoreML conversion (the source's quantize pairs)", timeout=context.timeout_s, on_progress=on_progress)
        artifact = Artifact(
            format=self.name, path=ARTIFACT_PATH, sha256=sha256_tree(output), bytes=tree_bytes(output),
            precision=report.precision_label(),
            inputs=[QuantParams(name=n, dtype="float32") for n in report.inputs],
            outputs=[QuantParams(name=n, dtype="float32") for n in report.outputs],
            converter={"tool": (f"{context.model.via}, then " if context.model.via else "") + KEPT_TOOL,
                       "coremltools": report.coremltools, "minimum_deployment_target": DEPLOYMENT_TARGET,
                       "weights": "the source's int8 weights and scales (constexpr_affine_dequantize)",
                       "seconds": report.seconds},
            details={"activations": "int8", "activations_reason": "the source's learned ranges, never calibrated",
                     "activation_calibration": {"method": "none: the source's learned ranges"},
                     "learned_ranges": report.learned_ranges, "evaluated_by": report.evaluated_by, "batch": 1,
                     "structure": report.structure, "float_weight_ops": list(report.float_weight_ops)},
        )
        if report.evaluated_by and evaluated:
            return BuildResult(artifact, evaluated_npy=evaluated, evaluated_by=report.evaluated_by)
        return BuildResult(artifact, not_measured="CoreML prediction runs only on macOS, and edgekit's MIL evaluator "
                                                  f"could not run it ({report.not_evaluated})")


def _form_key(context: BuildContext) -> str:
    """What names a float ML program in the work folder: the form, its file and the outputs."""
    import hashlib

    text = repr((context.model.to_dict(), list(context.output_names)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
