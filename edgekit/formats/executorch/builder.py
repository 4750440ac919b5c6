"""ExecuTorch target: ``executorch/model.int8.pte``, a PyTorch program lowered to XNNPACK with
PT2E static INT8 (``convert.py``, in a converter child); a quantized source's QDQ graph lowered
with its own quantize pairs instead (``convert_executorch_kept``).

The float program (lowered the same way) is the float fallback and then the float reference of
the conversion, so that validation tells a conversion loss from a quantization loss; without a
fallback (``--no-also-float``) it is not lowered (that costs about as much as the INT8 program),
and the exported float program's outputs, run by PyTorch, are the reference. Neither depends on
the precision plan: a search's tries make them once (``_float_program``). The programs run in
ExecuTorch's runtime like the artifact (validation's child). What runs where and in what
precision is read back from the lowered program by the child: the label, the float ops and the
XNNPACK placement recorded here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from ...conversion import worker
from ...fsutil import sha256_file
from ...manifest import Artifact, QuantParams
from ..building import HISTOGRAM, BuildContext, Builder, BuildResult, QuantGrid
from ...conversion.forms import ONNX_REBUILD_LOADER as ONNX_REBUILD
from .convert import ExecuTorchRequest, convert_executorch, convert_executorch_kept

ARTIFACT_PATH = "executorch/model.int8.pte"


class ExecuTorchBuilder(Builder):
    name = "executorch"
    backend = "executorch"
    # XNNPACKQuantizer shares one scale across a cat, and annotates only its patterns (convolution,
    # linear, add, mul, cat, adaptive average pooling, with a fused ReLU): a sigmoid, exp or softmax
    # between them computes in float, on the dequantized values; its activations' ranges are
    # HistogramObserver's
    grid = QuantGrid("xnnpack", tied_ops=("Concat",), quantized_ops=(
        "Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul", "Concat", "GlobalAveragePool"), ranges=HISTOGRAM)
    unmeasured_reason = "ExecuTorch's runtime is not installed here (pip install 'edgekit[executorch]')"

    def range_method(self, context: BuildContext) -> str:
        """XNNPACKQuantizer's activations: HistogramObserver (a learned source's ranges are carried)."""
        return "none: the source's learned ranges" if context.source_precision.learned else HISTOGRAM

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        if context.source_precision.learned and context.model.loader == ONNX_REBUILD:
            return self._build_kept(context, output, on_progress)
        float_program = _float_program(context)
        # the float program is lowered only where it ships (the fallback); otherwise the exported
        # float program's outputs are the conversion's float reference
        lowered = bool(context.also_float)
        float_outputs = float_program.with_suffix(".outputs.npz")  # where no float program is lowered
        report = worker.convert(convert_executorch, ExecuTorchRequest(
            model=context.model,
            calibration_npy=context.calibration_npy,
            output=str(output),
            output_names=tuple(context.output_names),
            float_output=None if not lowered or float_program.is_file() else str(float_program),
            float_outputs=None if float_outputs.is_file() or float_program.is_file() else str(float_outputs),
            eval_npy=context.eval_npy,
            plan=context.plan,
            # a module rebuilt from ONNX names its layers by ONNX node; a PyTorch program by module path
            layer_names=tuple(context.layer_names) if context.model.loader == ONNX_REBUILD else (),
            explain_npy=context.explain_npy,
        ), what="ExecuTorch conversion (PT2E + XNNPACK)", timeout=context.timeout_s, on_progress=on_progress)
        precision = report.precision
        if lowered and float_program.is_file():  # the fallback, and the reference the conversion is measured against
            reference = {"float_model": str(float_program), "fallback_model": str(float_program),
                         "fallback_precision": "float32",
                         "float_by": "float ExecuTorch program (XNNPACK), ExecuTorch runtime"}
        else:
            why = f"no float fallback: {report.float_left_out}" if report.float_left_out else \
                "no float fallback asked for"
            reference = {"float_evaluated_npy": str(float_outputs),
                         "float_by": f"the exported float program (torch.export, not lowered: {why}), PyTorch"}
        return BuildResult(
            **reference,
            artifact=Artifact(
                format=self.name,
                path=ARTIFACT_PATH,
                sha256=sha256_file(output),
                bytes=output.stat().st_size,
                precision=precision.label,
                inputs=[QuantParams(name=n, dtype="float32") for n in report.inputs],
                outputs=[QuantParams(name=n, dtype="float32") for n in context.output_names],
                float_ops=precision.float_ops,
                converter={
                    "tool": (f"{context.model.via}, then " if context.model.via else "")
                    + "torch.export + PT2E (XNNPACKQuantizer, static int8, per-channel symmetric weights) + "
                      "executorch.exir.to_edge_transform_and_lower (XnnpackPartitioner)",
                    "torch": report.torch,
                    "executorch": report.executorch,
                    "calibration_method": HISTOGRAM,
                    "batch": 1,
                    "seconds": report.seconds,
                },
                details={
                    **context.plan.record(),
                    "precision": precision.record,
                    "placement": report.placement,
                    # the layers the search can keep in float (this route has no per-layer report to rank them)
                    "weighted_layers": list(report.weighted_layers),
                    **({"explain": report.explain} if report.explain is not None else {}),
                },
            ),
        )

    def _build_kept(self, context: BuildContext, output: Path,
                    on_progress: Callable[[int, int], None] | None) -> BuildResult:
        """A quantized source's QDQ graph lowered with its own pairs (``convert_executorch_kept``):
        no calibration, no float program (the source has no float model), no search."""
        report = worker.convert(convert_executorch_kept, ExecuTorchRequest(
            model=context.model, calibration_npy=context.calibration_npy, output=str(output),
            output_names=tuple(context.output_names), layer_names=tuple(context.layer_names),
        ), what="ExecuTorch conversion (the source's quantize pairs + XNNPACK)", timeout=context.timeout_s,
            on_progress=on_progress)
        precision, learned = report.precision, report.learned_ranges
        return BuildResult(artifact=Artifact(
            format=self.name, path=ARTIFACT_PATH, sha256=sha256_file(output), bytes=output.stat().st_size,
            precision=precision.label,
            inputs=[QuantParams(name=n, dtype="float32") for n in report.inputs],
            outputs=[QuantParams(name=n, dtype="float32") for n in context.output_names],
            float_ops=precision.float_ops,
            converter={"tool": (f"{context.model.via}, then " if context.model.via else "")
                       + "torch.export of the source's quantize/dequantize pairs (its learned ranges) + "
                         "executorch.exir.to_edge_transform_and_lower (XnnpackPartitioner)",
                       "torch": report.torch, "executorch": report.executorch,
                       "calibration_method": "none: the source's learned ranges", "batch": 1,
                       "seconds": report.seconds},
            details={"precision": precision.record, "placement": report.placement,
                     "learned_ranges": learned.to_json() if learned else None}))

    def fallback_io(self, path: Path, quantized: Artifact) -> tuple[list[QuantParams], list[QuantParams]]:
        return (list(quantized.inputs), list(quantized.outputs))


def _float_program(context: BuildContext) -> Path:
    """Where the float program of this model form lives in the work folder: named after the
    form and the output names, so that a search's tries (and a fallback route's other form)
    never read another model's program."""
    key = json.dumps([context.model.to_dict(), list(context.output_names)], sort_keys=True, default=str)
    return Path(context.workdir) / f"executorch.float32.{hashlib.sha256(key.encode()).hexdigest()[:16]}.pte"

