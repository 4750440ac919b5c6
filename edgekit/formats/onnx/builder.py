"""ONNX target: QDQ INT8 ``onnx/model.int8.onnx`` plus ``onnx/model.int8.ort`` for minimal builds.

It converts a float ONNX graph (``edgekit.conversion.forms.ONNX_GRAPH``: the user's ``.onnx``, a PyTorch
model's export, or tf2onnx's conversion of a TensorFlow graph; ``edgekit.routing.routes``). Quantization is ONNX Runtime's static QDQ flow:
``quant_pre_process`` then ``quantize_static`` with per-channel symmetric int8 weights.

Activations default to int8 (S8S8), which ONNX Runtime recommends as the first choice for QDQ
on CPUs; ``u8`` (U8S8) is the alternative for accelerators that want unsigned activations.
``reduce_range`` quantizes weights to 7 bits: on x86 CPUs without VNNI the U8S8 kernels
multiply pairs of 8-bit values into a saturating 16-bit sum, and 7-bit weights avoid that
saturation at the cost of one bit of weight precision; it is off by default (edgekit's default
S8S8 does not hit it) and recorded when set.

The ``.ort`` file is converted with optimization style "Fixed" for the ARM platform (phones
and boards are ARM), with the ``required_operators.config`` that a minimal ONNX Runtime build
takes via ``--include_ops_by_config``. What NNAPI and the CoreML execution providers would
take of the graph (``check_onnx_model_mobile_usability``'s analysis) is recorded.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...conversion import worker
from ...conversion.messages import PathRequest
from ...errors import ConversionError, EdgekitError, first_line
from ...fsutil import sha256_file
from ...manifest import Artifact, QuantParams
from ..building import MINMAX, BuildContext, Builder, BuildResult, Fix, Variant
from .convert import (ExplainRequest, QuantizeReport, QuantizeRequest, SchemeBuild, explain,
                      mobile_usability, quantize, runtime_graph_or_error)
from .kept import KEPT_TOOL, KeepRequest, keep, refuse_requantizing
from .graph_work import InspectRequest, WholeModelRequest, inspect_build, write_whole_model

ARTIFACT_PATH = "onnx/model.int8.onnx"
ORT_PATH = "onnx/model.int8.ort"
OPS_CONFIG_PATH = "onnx/required_operators.config"
CALIBRATION_METHODS = (MINMAX, "entropy", "percentile")


class ONNXBuilder(Builder):
    name = "onnx"
    backend = "onnxruntime"

    def unfused_backend_options(self) -> dict[str, Any] | None:
        return {"graph_optimizations": False}

    def fused_kernels(self) -> str:
        from .kernels import int8_kernel_features

        return int8_kernel_features()

    def place_fallback(self, source: Path, target: Path) -> None:
        """The float model with its weights inside: an exported model may keep them in a
        ``.onnx.data`` file beside it, which a copy of the ``.onnx`` alone would lose."""
        worker.convert(write_whole_model, WholeModelRequest(str(source), str(target)),
                       what="ONNX float model for the fallback")

    def range_method(self, context: BuildContext) -> str:
        return str(context.option("calibration_method", MINMAX))  # one of CALIBRATION_METHODS

    def fixes(self) -> tuple[Fix, ...]:
        return (Fix("--reduce-range", "reduce_range", True, when="saturated"),
                Fix("--calibration-method percentile", "calibration_method", "percentile"))

    def saturation_explanation(self) -> str:
        return ("ONNX Runtime's u8s8 kernels add pairs of 8-bit products in 16 bits, which overflow for large "
                "weights and activations. A device with VNNI (AVX512-VNNI, AVX-VNNI) or ARM dot-product "
                "instructions computes the quantized graph as measured without fusion; --reduce-range (7-bit "
                "weights) avoids the overflow on every CPU")

    def judged_as_quantized(self, context: BuildContext) -> str | None:
        """An ONNX artifact is judged by this CPU's fused kernels only when this machine is one of
        the package's devices and the runtime here would run that artifact (its CPU's best scheme
        among the package's); every other artifact is for devices that compute the QDQ graph
        exactly (ARM dot-product, VNNI, TensorRT; 7-bit weights anywhere), so it is judged as
        quantized. This machine's saturating kernels must not judge an S8S8 build for a Pi."""
        from ...machine.facts import DeviceFacts
        from .schemes import SCHEMES, artifact_for_cpu

        if context.source_precision.learned:
            return ("the source's own quantized graph, with no scheme variant for CPUs whose int8 kernels saturate "
                    "(x86 without VNNI warns when it loads it): judged by the arithmetic it specifies")
        facts = DeviceFacts.read()
        own = f"onnx-{context.option('variant')}" if context.option("variant") else "onnx"
        profiles = context.device_profiles
        if profiles and not any(p.covers_arch(facts.arch) for p in profiles):
            return (f"this machine ({facts.arch}) is none of the package's devices "
                    f"({', '.join(p.name for p in profiles)})")
        here = artifact_for_cpu(self._planned_keys(context), facts.arch, facts.cpu_flags, facts.cuda)
        if here is None or here == own:
            return None
        scheme = SCHEMES.get(str(context.option("scheme") or "s8s8"))
        built_for = scheme.why.split(":")[0] if scheme is not None else "other devices"
        return f"this CPU runs {here}; {own} is built for {built_for}"

    def _planned_keys(self, context: BuildContext) -> set[str]:
        """The ONNX artifact keys this package is planned to hold (the main one and each scheme variant)."""
        from .schemes import schemes_for_profiles, schemes_named

        if context.option("variant"):  # a variant's build: the main build's context chose the schemes
            wanted = schemes_named(schemes_for_profiles(context.device_profiles), "--profile")
            return {"onnx"} | {s.artifact_key for s in wanted}
        return {"onnx"} | {f"onnx-{v.name}" for v in self.variants(context)}

    def variants(self, context: BuildContext) -> list[Variant]:
        """One more INT8 build per scheme the requested device profiles need beside S8S8
        (``edgekit.formats.onnx.schemes``), with the same layers kept in float; none when the user
        chose the scheme (--onnx-activations u8, --reduce-range)."""
        from .schemes import schemes_for_profiles, schemes_named

        if context.option("onnx_activations", "s8") != "s8" or context.option("reduce_range"):
            return []
        if context.source_precision.learned:  # another scheme would re-choose its ranges
            return []
        wanted = schemes_named(schemes_for_profiles(context.device_profiles), "--profile")
        return [Variant(s.variant, s.name, {"scheme": s.name, "onnx_activations": s.activations,
                                            "reduce_range": s.reduce_range})
                for s in wanted if s.variant]

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        float_onnx = context.model.path  # the route's float ONNX graph (the source's own, or converted)
        variant = str(context.option("variant") or "")  # another scheme's build: its own file, no .ort (ARM-only)
        artifact_path = ARTIFACT_PATH.replace(".int8.", f".int8-{variant}.") if variant else ARTIFACT_PATH
        output = context.package_dir / artifact_path
        output.parent.mkdir(parents=True, exist_ok=True)
        kept = context.source_precision.learned  # QAT / another tool's QDQ: its learned ranges ship as they are
        settings, report = self._quantized(context, float_onnx, output, variant, kept, on_progress)
        # from the graph (ORT leaves ops it cannot quantize in float); the float model in its place where
        # no weighted op computes in integers (Q/DQ noise without an integer kernel)
        precision = worker.convert(inspect_build, InspectRequest(str(output), float_onnx, tuple(context.layer_names),
                                                                 kept), what="ONNX build's precision").read()
        # a companion: never costs the .onnx (and not made for a search try)
        ort_failure = None if variant or context.trial else _convert_to_ort(output, context)
        explained = None
        if context.explain_npy and not kept:
            explained = worker.convert(explain, ExplainRequest(
                float_onnx=report.prepared, qdq_onnx=str(output), samples_npy=context.explain_npy,
                layer_names=tuple(context.layer_names), workdir=str(context.workdir),
            ), what="ONNX per-layer error report").rows
        # NNAPI / CoreML EP usability is a question for the ARM build; the x86 scheme variants skip it
        mobile = None if variant or context.trial else _mobile_report(output)
        fused = _runtime_graph(str(output))
        companions = [
            {"path": rel, "sha256": sha256_file(context.package_dir / rel),
             "bytes": (context.package_dir / rel).stat().st_size, "role": role}
            for rel, role in ((ORT_PATH, "ort-format model (minimal builds)"),
                              (OPS_CONFIG_PATH, "required operators for --include_ops_by_config"))
            if ort_failure is None and not variant and not context.trial
        ]
        no_int8 = ""
        if precision.label == "float":  # ONNX Runtime quantized nothing (a GRU-only graph, no quantizable op)
            kinds = ", ".join(sorted({op["op"] for op in precision.float_ops})) or "none"
            no_int8 = (f"ONNX Runtime's quantizer left no op in INT8 (float ops: {kinds}): this build is the float "
                       "model, labelled float")
            if variant:  # another scheme of a float graph is the same float model again: never a second copy
                raise ConversionError(f"{no_int8}; the {variant} scheme would be an identical copy",
                                      hint="nothing to do: devices run the main onnx build")
        converted = float_onnx if context.model.via and not kept else None  # a conversion's loss is measured apart
        fallback = ({"fallback_model": float_onnx, "fallback_precision": "float32"}
                    if context.also_float and not kept and not no_int8 else {})
        # a quantized source has no float model; a build that is the float model needs no second copy
        return BuildResult(float_model=converted, float_by="float ONNX (exported), ONNX Runtime", **fallback,
                           artifact=Artifact(
            format=self.name,
            variant=variant,
            path=artifact_path,
            sha256=sha256_file(output),
            bytes=output.stat().st_size,
            precision=precision.label,
            inputs=[QuantParams(name=n, dtype="float32") for n in report.inputs],
            outputs=[QuantParams(name=n, dtype="float32") for n in report.outputs],
            float_ops=precision.float_ops,
            converter={
                "tool": (f"{context.model.via}, then " if context.model.via else "")
                + (KEPT_TOOL if kept else "onnxruntime.quantization.quantize_static (QDQ)"),
                "opset": report.opset,
                **({"upgraded_from_opset": report.upgraded_from_opset} if report.upgraded_from_opset else {}),
                "shape_inference": report.shape_inference,
                "onnxruntime": report.onnxruntime,
                **settings,
                **({"scheme": context.option("scheme")} if variant else {}),
                "seconds": report.seconds,
            },
            companions=companions,
            details={**({"no_int8": no_int8} if no_int8 else {}),
                **({"quantized_source": report.scheme, "quantized_biases": list(report.quantized_biases),
                    "weights_on_grid": list(report.weights_on_grid)} if kept else {}),
                **({"companions_failed": {ORT_PATH: ort_failure}} if ort_failure else {}),
                **({"mobile_usability": mobile} if mobile is not None else {}),
                "precision": precision.record(),
                "runtime_graph": fused,
                **context.plan.record(),
                **({"explain": explained} if explained is not None else {}),
            },
        ))


    def _quantized(self, context: BuildContext, float_onnx: str, output: Path, variant: str, kept: bool,
                   on_progress: Callable[[int, int], None] | None) -> tuple[dict[str, Any], QuantizeReport]:
        """The INT8 graph at ``output`` and how it was made: the quantized source kept as given, or
        the float graph quantized with the context's settings."""
        if kept:
            refuse_requantizing(context.plan)
            return {"kept_as_given": True}, worker.convert(keep, KeepRequest(source=float_onnx, output=str(output)),
                                                           what="keeping the quantized ONNX graph",
                                                           timeout=context.timeout_s)
        settings = {
            "calibration_method": self.range_method(context),
            "activation_type": context.option("onnx_activations", "s8"),
            "weight_type": "s8",
            "per_channel": True,
            "reduce_range": bool(context.option("reduce_range", False)),
        }
        return settings, self._quantize(context, float_onnx, output, variant, settings, on_progress)

    def _quantize(self, context: BuildContext, float_onnx: str, output: Path, variant: str, settings: dict[str, Any],
                  on_progress: Callable[[int, int], None] | None) -> QuantizeReport:
        """The QDQ model at ``output``: a scheme variant the main build's child already quantized is
        copied; the main build quantizes every variant's scheme too, in one child."""
        prebuilt = _prebuilt_path(context, variant, settings)
        if variant and prebuilt.is_file() and prebuilt.with_suffix(".json").is_file():
            shutil.copyfile(prebuilt, output)
            return QuantizeReport.from_json(json.loads(prebuilt.with_suffix(".json").read_text()))
        others = () if variant or context.trial else tuple(
            SchemeBuild(path=str(_prebuilt_path(context, v.name, {**settings,
                                                                 "activation_type": v.options["onnx_activations"],
                                                                 "reduce_range": v.options["reduce_range"]})),
                        activation_type=v.options["onnx_activations"], reduce_range=bool(v.options["reduce_range"]))
            for v in self.variants(context))
        return worker.convert(quantize, QuantizeRequest(
            float_onnx=float_onnx, calibration_npy=context.calibration_npy, output=str(output),
            calibration_method=settings["calibration_method"], activation_type=settings["activation_type"],
            reduce_range=settings["reduce_range"], plan=context.plan, max_intermediate_outputs=context.option("max_intermediate_outputs"),
            workdir=str(context.workdir), also=others,
        ), what="ONNX quantization", timeout=context.timeout_s, on_progress=on_progress)


def _prebuilt_path(context: BuildContext, variant: str, settings: dict[str, Any]) -> Path:
    """Where the main build's child leaves a scheme variant quantized with these settings."""
    import hashlib

    layers = json.dumps(context.plan.to_dict(), sort_keys=True)
    kept = hashlib.sha256(layers.encode()).hexdigest()[:12]  # an auto-fix try is its own build
    key = f"{settings['calibration_method']}-{settings['activation_type']}-{int(bool(settings['reduce_range']))}-{kept}"
    return Path(context.workdir) / f"onnx.prebuilt-{variant or 'main'}-{key}.onnx"


def _mobile_report(output: Path) -> dict[str, Any]:
    """The mobile usability report, or why there is none: informational, it never costs the
    artifact (ORT's checker has failed on graphs its runtime runs, e.g. a TF export's MirrorPad)."""
    try:
        return worker.convert(mobile_usability, PathRequest(str(output)), what="ONNX mobile usability check").record
    except EdgekitError as exc:
        return {"tool": "onnxruntime.tools.mobile_helpers.usability_checker", "error": exc.message}


def _convert_to_ort(model: Path, context: BuildContext) -> str | None:
    """The ``.ort`` companion (and its operator config) beside the QDQ model; None when written,
    else why not (ORT's own type inference can refuse a graph the full runtime runs)."""
    try:
        _write_ort(model, context)
    except EdgekitError as exc:  # a companion: its failure (a timeout too) never costs the .onnx
        return exc.message
    return None


def _write_ort(model: Path, context: BuildContext) -> None:
    staging = Path(context.workdir) / "ort"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy(model, staging / model.name)
    arguments = [str(staging / model.name), "--output_dir", str(staging / "out"), "--optimization_style", "Fixed",
                 "--target_platform", "arm"]
    ran = worker.run_module("onnxruntime.tools.convert_onnx_models_to_ort", arguments,
                            "ONNX -> ORT format conversion", context.timeout_s)
    ort_files = list((staging / "out").glob("*.ort"))
    configs = list((staging / "out").glob("*.config"))
    if ran.returncode != 0 or len(ort_files) != 1 or len(configs) != 1:
        tail = ran.output.strip().splitlines()[-1:] or ["no output"]
        raise ConversionError(f"ONNX -> ORT format conversion failed: {tail[0]}")
    shutil.move(ort_files[0], context.package_dir / ORT_PATH)
    config = configs[0].read_text()
    config = "\n".join(line for line in config.splitlines() if not line.startswith("# -"))  # drop temp paths
    (context.package_dir / OPS_CONFIG_PATH).write_text(config + "\n")


def _runtime_graph(path: str) -> dict[str, Any]:
    """Int8 and float compute nodes after ONNX Runtime's own optimization on this CPU
    (``fused.runtime_graph``), read in a child like every step that loads an artifact (a crash
    in the runtime is never the packager's end, and its session's memory goes with the child);
    a failure to read it is recorded, never the artifact's failure."""
    try:
        return worker.convert(runtime_graph_or_error, PathRequest(path), what="ONNX Runtime's optimized graph").record
    except EdgekitError as exc:
        return {"error": first_line(exc)[:200]}
