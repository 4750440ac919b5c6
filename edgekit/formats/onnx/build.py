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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import worker
from ...errors import ConversionError, EdgekitError, OTHER_ROUTES, first_line
from ...fsutil import sha256_file
from ...manifest import Artifact, QuantParams
from ...conversion.layer_names import in_layer
from ..building import MINMAX, BuildContext, Builder, BuildResult, Fix, Variant, read_samples, worst_layers
from ...conversion.quantized import is_quantized_graph
from .kept import KEPT_TOOL, keep, refuse_requantizing
from .precision import analyse as analyse_precision

ARTIFACT_PATH = "onnx/model.int8.onnx"
ORT_PATH = "onnx/model.int8.ort"
OPS_CONFIG_PATH = "onnx/required_operators.config"
OPSET = 17
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
        import onnx

        onnx.save(onnx.load(str(source)), str(target))

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

        model = getattr(context, "model", None)
        if model is not None and is_quantized_graph(model.path):
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
        model = getattr(context, "model", None)
        if model is not None and is_quantized_graph(model.path):  # another scheme would re-choose its ranges
            return []
        wanted = schemes_named(schemes_for_profiles(context.device_profiles), "--profile")
        return [Variant(s.variant, s.name, {"scheme": s.name, "onnx_activations": s.activations,
                                            "reduce_range": s.reduce_range, "also_float": False})
                for s in wanted if s.variant]

    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        float_onnx = context.model.path  # the route's float ONNX graph (the source's own, or converted)
        variant = str(context.option("variant") or "")  # another scheme's build: its own file, no .ort (ARM-only)
        artifact_path = ARTIFACT_PATH.replace(".int8.", f".int8-{variant}.") if variant else ARTIFACT_PATH
        output = context.package_dir / artifact_path
        output.parent.mkdir(parents=True, exist_ok=True)
        kept = is_quantized_graph(float_onnx)  # QAT / another tool's QDQ: its learned ranges ship as they are
        settings, info = self._quantized(context, float_onnx, output, variant, kept, on_progress)
        precision = analyse_precision(str(output), context.layer_names)  # from the graph: ORT leaves ops it cannot quantize in float
        if not kept and not precision.int8_weighted_ops and precision.label != "float":
            # Q/DQ pairs around layers that all compute in float (a Gemm whose bias is an activation):
            # quantization noise without an integer kernel. The float model ships instead, labelled so.
            _write_float_model(float_onnx, output)
            precision = analyse_precision(str(output), context.layer_names)
        # a companion: never costs the .onnx (and not made for a search try)
        ort_failure = None if variant or context.trial else _convert_to_ort(output, context)
        explained = None
        if context.explain_npy and not kept:
            explained = worker.call(
                explain, what="ONNX per-layer error report",
                float_onnx=info["prepared"], qdq_onnx=str(output), samples_npy=context.explain_npy,
                layer_names=list(context.layer_names), workdir=str(context.workdir),
            )
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
                    if context.option("also_float") and not kept and not no_int8 else {})
        # a quantized source has no float model; a build that is the float model needs no second copy
        return BuildResult(float_model=converted, float_by="float ONNX (exported), ONNX Runtime", **fallback,
                           artifact=Artifact(
            format=self.name,
            variant=variant,
            path=artifact_path,
            sha256=sha256_file(output),
            bytes=output.stat().st_size,
            precision=precision.label,
            inputs=[QuantParams(name=n, dtype="float32") for n in info["inputs"]],
            outputs=[QuantParams(name=n, dtype="float32") for n in info["outputs"]],
            float_ops=precision.float_ops,
            converter={
                "tool": (f"{context.model.via}, then " if context.model.via else "")
                + (KEPT_TOOL if kept else "onnxruntime.quantization.quantize_static (QDQ)"),
                "opset": info["opset"],
                **({"upgraded_from_opset": info["upgraded_from_opset"]} if info.get("upgraded_from_opset") else {}),
                "shape_inference": info.get("shape_inference", "symbolic"),
                "onnxruntime": info["onnxruntime"],
                **settings,
                **({"scheme": context.option("scheme")} if variant else {}),
                "seconds": info["seconds"],
            },
            companions=companions,
            details={**({"no_int8": no_int8} if no_int8 else {}),
                **({"quantized_source": info["scheme"], "quantized_biases": info["quantized_biases"],
                    "weights_on_grid": info["weights_on_grid"]} if kept else {}),
                **({"companions_failed": {ORT_PATH: ort_failure}} if ort_failure else {}),
                **({"mobile_usability": mobile} if mobile is not None else {}),
                "precision": precision.record(),
                "runtime_graph": fused,
                "keep_float": list(context.keep_float),
                "int16_layers": list(context.int16_layers),
                **({"explain": explained} if explained is not None else {}),
            },
        ))


    def _quantized(self, context: BuildContext, float_onnx: str, output: Path, variant: str, kept: bool,
                   on_progress: Callable[[int, int], None] | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The INT8 graph at ``output`` and how it was made: the quantized source kept as given, or
        the float graph quantized with the context's settings."""
        if kept:
            refuse_requantizing(context.keep_float, context.int16_layers)
            return {"kept_as_given": True}, dict(worker.call(keep, what="keeping the quantized ONNX graph",
                                                             timeout=context.timeout_s, source=float_onnx,
                                                             output=str(output)))
        settings = {
            "calibration_method": self.range_method(context),
            "activation_type": context.option("onnx_activations", "s8"),
            "weight_type": "s8",
            "per_channel": True,
            "reduce_range": bool(context.option("reduce_range", False)),
        }
        return settings, self._quantize(context, float_onnx, output, variant, settings, on_progress)

    def _quantize(self, context: BuildContext, float_onnx: str, output: Path, variant: str, settings: dict[str, Any],
                  on_progress: Callable[[int, int], None] | None) -> dict[str, Any]:
        """The QDQ model at ``output``: a scheme variant the main build's child already quantized is
        copied; the main build quantizes every variant's scheme too, in one child."""
        prebuilt = _prebuilt_path(context, variant, settings)
        if variant and prebuilt.is_file() and prebuilt.with_suffix(".json").is_file():
            shutil.copyfile(prebuilt, output)
            return dict(json.loads(prebuilt.with_suffix(".json").read_text()))
        others = [] if variant or context.trial else [
            {"path": str(_prebuilt_path(context, v.name, {**settings, "activation_type": v.options["onnx_activations"],
                                                           "reduce_range": v.options["reduce_range"]})),
             "activation_type": v.options["onnx_activations"], "reduce_range": v.options["reduce_range"]}
            for v in self.variants(context)]
        return dict(worker.call(
            quantize, what="ONNX quantization", timeout=context.timeout_s, on_progress=on_progress,
            float_onnx=float_onnx, calibration_npy=context.calibration_npy, output=str(output),
            calibration_method=settings["calibration_method"], activation_type=settings["activation_type"],
            reduce_range=settings["reduce_range"], keep_float=list(context.keep_float),
            int16_layers=list(context.int16_layers), max_intermediate_outputs=context.option("max_intermediate_outputs"), workdir=str(context.workdir),
            also=others,
        ))


def _prebuilt_path(context: BuildContext, variant: str, settings: dict[str, Any]) -> Path:
    """Where the main build's child leaves a scheme variant quantized with these settings."""
    import hashlib

    layers = "\n".join(context.keep_float) + "\n16:" + "\n".join(context.int16_layers)
    kept = hashlib.sha256(layers.encode()).hexdigest()[:12]  # an auto-fix try is its own build
    key = f"{settings['calibration_method']}-{settings['activation_type']}-{int(bool(settings['reduce_range']))}-{kept}"
    return Path(context.workdir) / f"onnx.prebuilt-{variant or 'main'}-{key}.onnx"


def _mobile_report(output: Path) -> dict[str, Any]:
    """The mobile usability report, or why there is none: informational, it never costs the
    artifact (ORT's checker has failed on graphs its runtime runs, e.g. a TF export's MirrorPad)."""
    try:
        return worker.call(mobile_usability, what="ONNX mobile usability check", model=str(output))
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
    if ran["returncode"] != 0 or len(ort_files) != 1 or len(configs) != 1:
        tail = ran["output"].strip().splitlines()[-1:] or ["no output"]
        raise ConversionError(f"ONNX -> ORT format conversion failed: {tail[0]}")
    shutil.move(ort_files[0], context.package_dir / ORT_PATH)
    config = configs[0].read_text()
    config = "\n".join(line for line in config.splitlines() if not line.startswith("# -"))  # drop temp paths
    (context.package_dir / OPS_CONFIG_PATH).write_text(config + "\n")


# --- child-process side -------------------------------------------------------------------


def _layer_nodes(model: Any, layers: list[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Nodes that belong to the named layers (tf2onnx keeps TF scope names: model/LAYER_1/op)."""
    found: list[tuple[str, str, str]] = []
    missing = []
    producer = {out: n for n in model.graph.node for out in n.output}
    for layer in layers:
        nodes = [(n.name, n.op_type, layer) for n in model.graph.node if in_layer(n.name, layer)]
        node = producer.get(layer)  # a model output named by itself: the op computing it
        while node is not None and node.op_type == "Identity" and node.input:
            node = producer.get(node.input[0])
        if node is not None and not nodes:
            nodes = [(node.name, node.op_type, layer)]
        if not nodes:
            missing.append(layer)
        found.extend(nodes)
    return found, missing


# activations ONNX Runtime's QDQ quantizer folds into the op before them (the op then writes their
# output with the activation's range): raised to float, that op must be too, or nothing changes
FOLDED_ACTIVATIONS = {"Relu", "Clip"}
FOLDS_INTO = {"Conv", "Gemm", "MatMul", "ConvTranspose", "Add"}


def _with_folding_producers(model: Any, excluded: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``excluded`` plus the producer of each excluded Relu/Clip the quantizer would fold into it
    (a layer named by its activation, as reports name it by the tensor it writes)."""
    producer = {out: n for n in model.graph.node for out in n.output}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    by_name = {n.name: n for n in model.graph.node}
    names = {name for name, _, _ in excluded}
    added = []
    for name, op_type, layer in excluded:
        if op_type not in FOLDED_ACTIVATIONS:
            continue
        node = by_name[name]
        before = producer.get(node.input[0]) if node.input else None
        if (before is not None and before.op_type in FOLDS_INTO and readers.get(node.input[0]) == 1
                and before.name not in names):
            names.add(before.name)
            added.append((before.name, before.op_type, layer))
    return excluded + added


def _activations_of(model: Any, nodes: list[str]) -> list[str]:
    """The activation tensors the named nodes read and write (not their weights): what a layer's
    16-bit activations are (ONNX Runtime's TensorQuantOverrides, per tensor)."""
    initializers = {i.name for i in model.graph.initializer}
    wanted = set(nodes)
    found: list[str] = []
    for node in model.graph.node:
        if node.name in wanted:
            found += [t for t in [*node.input[:1], *node.output] if t and t not in initializers and t not in found]
    return found


def quantize(
    float_onnx: str,
    calibration_npy: str,
    output: str,
    calibration_method: str = MINMAX,
    activation_type: str = "s8",
    reduce_range: bool = False,
    keep_float: list[str] | None = None,
    max_intermediate_outputs: int | None = None,
    workdir: str = "",
    int16_layers: list[str] | None = None,
    also: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``quantize_static`` of ``float_onnx`` into ``output`` (child side); ``also``: more schemes of
    the same model (``path``, ``activation_type``, ``reduce_range``), each written with its info
    beside it, so the scheme variants cost no process or pre-processing of their own."""
    import onnx

    work = Path(workdir or Path(output).parent)
    source, upgraded_from = _upgrade_opset(float_onnx, work)
    prepared = str(work / "model.prep.onnx")
    shape_inference = _pre_process(source, prepared)
    model = onnx.load(prepared)
    if _flatten_gemm_biases(model):
        onnx.save(model, prepared)
    excluded, missing = _layer_nodes(model, list(keep_float or []))
    excluded = _with_folding_producers(model, excluded)
    wide, missing_wide = _layer_nodes(model, list(int16_layers or []))
    for flag, absent in (("--keep-float", missing), ("--int16-activations", missing_wide)):
        if absent:
            raise EdgekitError(
                f"{flag}: no ONNX nodes belong to layer(s) {', '.join(absent)}",
                hint="use layer names as the model defines them (see --explain's report)",
            )
    from .masks import mask_nodes

    masked = [entry for entry in mask_nodes(model) if entry[0] not in {name for name, _, _ in excluded}]
    excluded = excluded + masked  # an additive attention mask and its Softmax stay float (masks.py)
    initializers = {i.name for i in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    samples = read_samples(calibration_npy)
    if list(samples) == [""]:
        samples = {graph_inputs[0]: samples[""]}
    missing = [n for n in graph_inputs if n not in samples]
    if missing:
        raise ConversionError(f"calibration data has no samples for ONNX input(s) {missing} (it has {list(samples)})")
    settings = {"calibration_method": calibration_method, "max_intermediate_outputs": max_intermediate_outputs,
                "excluded": excluded, "int16_tensors": _activations_of(model, [name for name, _, _ in wide])}
    recorded = {"prepared": prepared, "upgraded_from_opset": upgraded_from, "shape_inference": shape_inference}
    info = {**_quantize_static(prepared, output, samples, graph_inputs, activation_type, reduce_range, settings),
            **recorded}
    for other in also or []:
        try:
            produced = {**_quantize_static(prepared, other["path"], samples, graph_inputs, other["activation_type"],
                                           bool(other["reduce_range"]), settings), **recorded}
        except EdgekitError:  # that variant's own build tries again and reports its failure
            continue
        Path(other["path"]).with_suffix(".json").write_text(json.dumps(produced))
    return info


def _pre_process(source: str, prepared: str) -> str:
    """``quant_pre_process`` into ``prepared``; which shape inference it could use."""
    _ort_tools_without_torch()
    from onnxruntime.quantization import quant_pre_process

    try:
        quant_pre_process(source, prepared, skip_symbolic_shape=False)
    except Exception as first:  # dynamic axes often defeat symbolic shape inference: ONNX's own is enough
        try:
            quant_pre_process(source, prepared, skip_symbolic_shape=True)
        except Exception as exc:
            raise ConversionError(f"ONNX Runtime's quant_pre_process failed: {type(exc).__name__}: {exc} "
                                  f"(with symbolic shape inference: {first})") from None
        return f"onnx (symbolic shape inference failed: {str(first).strip().splitlines()[0][:200]})"
    return "symbolic"


def _ort_tools_without_torch() -> None:
    """``onnxruntime.tools`` registered without running its ``__init__``, which imports PyTorch
    (4 s, wherever it is installed) only to re-export an export helper edgekit never calls: the
    symbolic shape inference, the usability checker and the ``.ort`` tool are its submodules and
    need nothing from it. A child that has PyTorch or the package already loses nothing."""
    import importlib.util
    import sys

    if "onnxruntime.tools" in sys.modules or "torch" in sys.modules:
        return
    spec = importlib.util.find_spec("onnxruntime.tools")
    if spec is not None and spec.submodule_search_locations:
        sys.modules["onnxruntime.tools"] = importlib.util.module_from_spec(spec)


def _flatten_gemm_biases(model: Any) -> int:
    """Gemm biases shaped ``[1, N]`` rewritten as ``[N]`` (the same broadcast); how many.

    ``quant_pre_process`` fuses MatMul + Add into Gemm, and JAX/TF exports carry their biases as
    ``[1, N]``: ``quantize_static``'s int32-bias weight-scale adjustment assumes a 1-D bias and
    fails on a 2-D one (``The truth value of an array ... is ambiguous``)."""
    from onnx import numpy_helper

    initializers = {i.name: i for i in model.graph.initializer}
    uses: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    flattened = 0
    for node in model.graph.node:
        if node.op_type != "Gemm" or len(node.input) < 3 or node.input[2] not in initializers:
            continue
        bias = numpy_helper.to_array(initializers[node.input[2]])
        if bias.ndim != 2 or bias.shape[0] != 1:
            continue
        old = node.input[2]
        model.graph.initializer.append(numpy_helper.from_array(bias.reshape(-1), name=f"{old}_1d"))
        node.input[2] = f"{old}_1d"
        uses[old] -= 1
        if not uses[old]:  # a new name: any shape recorded for the old one stays true of it
            model.graph.initializer.remove(initializers.pop(old))
        flattened += 1
    return flattened


def _calibration_reader(samples: dict[str, Any], graph_inputs: list[str]) -> Any:
    """The calibration samples one at a time, as ONNX Runtime's calibrator reads them; a range of
    them at a time where it is asked for one (``set_range``: calibration in strides)."""
    from onnxruntime.quantization import CalibrationDataReader

    total = len(next(iter(samples.values())))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.i, self.end = 0, total

        def __len__(self) -> int:
            return total

        def set_range(self, start_index: int, end_index: int) -> None:
            self.i, self.end = start_index, min(end_index, total)

        def get_next(self) -> dict[str, np.ndarray] | None:
            if self.i >= self.end:
                worker.report_progress(total, total)
                return None
            if self.i % 10 == 0:
                worker.report_progress(self.i, total)
            sample = {name: np.asarray(samples[name][self.i : self.i + 1]) for name in graph_inputs}
            sample = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in sample.items()}
            self.i += 1
            return sample

    return Reader()


# the most activation bytes a histogram calibration (percentile, entropy) holds at once; above it,
# it runs in strides (the first stride sets the bins' width: one stride when it fits keeps the
# histograms exactly as ONNX Runtime makes them). ORT's calibrator keeps every sample's
# activations of a stride until it reduces them to histograms: this bounds the calibration's
# memory beside the converter's own (a 200-clip speech model held 280 MB in one stride)
HISTOGRAM_MEMORY = 64 * 2**20


def histogram_stride(total: int, strides: int) -> int:
    """Samples per stride for at least ``strides`` strides: the largest divisor of ``total``
    (ONNX Runtime needs equal strides) that is at most ``total / strides``."""
    limit = max(1, total // max(1, strides))
    return max(d for d in range(1, limit + 1) if total % d == 0)


def activation_bytes(model_path: str) -> int:
    """What one sample's intermediate tensors take (float32, the shapes ONNX shape inference
    finds, unknown dimensions as 1): what a histogram calibrator holds per sample."""
    import onnx

    try:
        model = onnx.shape_inference.infer_shapes(onnx.load(model_path, load_external_data=False))
    except Exception:  # noqa: BLE001 - an estimate: a model shape inference cannot read counts as small
        return 0
    total = 0
    for value in list(model.graph.value_info) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        total += 4 * int(np.prod([d.dim_value if d.dim_value > 0 else 1 for d in dims])) if dims else 4
    return total


def _quantize_static(prepared: str, path: str, samples: dict[str, Any], graph_inputs: list[str], activations: str,
                     reduced: bool, settings: dict[str, Any]) -> dict[str, Any]:
    """One scheme of the pre-processed model, calibrated and written to ``path``; what it made."""
    import onnx
    import onnxruntime
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    method = {MINMAX: CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
              "percentile": CalibrationMethod.Percentile}[settings["calibration_method"]]
    extra: dict[str, Any] = {}
    if settings["max_intermediate_outputs"]:
        extra["CalibMaxIntermediateOutputs"] = int(settings["max_intermediate_outputs"])
    total = len(next(iter(samples.values())))
    # shape inference over the whole graph only where a histogram calibrator would hold it all (not per min/max try)
    held = total * activation_bytes(prepared) if method != CalibrationMethod.MinMax else 0
    if held > HISTOGRAM_MEMORY:
        # histogram calibrators keep every sample's activations until their one collect_data call
        # ends (21 GB on a speech model): in strides, only a stride's activations are held
        extra["CalibStridedMinMax"] = histogram_stride(total, -(-held // HISTOGRAM_MEMORY))
    if settings.get("int16_tensors"):  # 16-bit activations there (the model is raised to opset 21 for int16 Q/DQ)
        extra["TensorQuantOverrides"] = {t: [{"quant_type": QuantType.QInt16}] for t in settings["int16_tensors"]}
    started = time.perf_counter()
    try:
        quantize_static(
            prepared, path, _calibration_reader(samples, graph_inputs), quant_format=QuantFormat.QDQ,
            per_channel=True, reduce_range=reduced,
            activation_type=QuantType.QInt8 if activations == "s8" else QuantType.QUInt8,
            weight_type=QuantType.QInt8, calibrate_method=method,
            nodes_to_exclude=[name for name, _, _ in settings["excluded"]], extra_options=extra,
        )
    except EdgekitError:
        raise
    except Exception as exc:
        raise ConversionError(
            f"ONNX Runtime quantize_static failed: {type(exc).__name__}: {first_line(exc)[:300]}",
            hint="keep the part it fails on in float (--keep-float LAYER; --explain lists the layers), often an "
                 "integer front end (OneHot, Gather/embedding) next to float ops; or "
                 f"{OTHER_ROUTES}",
        ) from None
    quantized = onnx.load(path)
    return {
        "seconds": round(time.perf_counter() - started, 3),
        "onnxruntime": onnxruntime.__version__,
        "opset": next((o.version for o in quantized.opset_import if o.domain in ("", "ai.onnx")), OPSET),
        "inputs": [i.name for i in quantized.graph.input],
        "outputs": [o.name for o in quantized.graph.output],
        "excluded_nodes": settings["excluded"],
    }


MIN_QDQ_OPSET = 13  # per-channel DequantizeLinear (its axis attribute) needs opset 13


# protobuf cannot serialise a message over 2 GiB: such a model keeps its weights outside
_PROTOBUF_LIMIT = 2**31 - 1


def _self_contained(float_onnx: str, model: Any, work: Path) -> str:
    """``float_onnx`` itself, or, when its weights live in external data files, one file with them
    inside: ORT's quant_pre_process copies the model into its own temp folder and would lose them."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    skeleton = onnx.load(float_onnx, load_external_data=False)  # as stored: which tensors live outside
    if not any(uses_external_data(t) for t in skeleton.graph.initializer):
        return float_onnx
    if model.ByteSize() > _PROTOBUF_LIMIT:
        raise ConversionError(
            f"{Path(float_onnx).name} holds {model.ByteSize() / 2**30:.1f} GiB of weights: INT8 quantization here "
            "needs the model in one protobuf (at most 2 GiB)",
            hint="package a smaller model, or quantize it with onnxruntime.quantization's "
                 "use_external_data_format and pass the QDQ model as an ONNX source",
        )
    path = work / "model.self_contained.onnx"
    onnx.save(model, path)  # the external tensors were loaded by onnx.load: now stored inline
    return str(path)


def _upgrade_opset(float_onnx: str, work: Path) -> tuple[str, int | None]:
    """Models below opset 13 get an invalid QDQ graph ("Unrecognized attribute: axis for operator
    DequantizeLinear"): upgrade them with onnx.version_converter and check the result first."""
    import onnx
    from onnx import version_converter

    model = onnx.load(float_onnx)  # external data (model.onnx.data beside it) loaded with it
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    if opset >= MIN_QDQ_OPSET:
        return _self_contained(float_onnx, model, work), None
    try:
        upgraded = version_converter.convert_version(model, MIN_QDQ_OPSET)
        onnx.checker.check_model(upgraded)
    except Exception as exc:
        raise ConversionError(
            f"the model uses ONNX opset {opset}; quantizing needs opset {MIN_QDQ_OPSET}+ and onnx's version converter "
            f"could not upgrade it ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]})",
            hint=f"re-export the model with opset {OPSET} (torch.onnx.export(..., opset_version={OPSET}))",
        ) from None
    path = work / "model.upgraded.onnx"
    onnx.save(upgraded, path)
    return str(path), opset


def explain(
    float_onnx: str, qdq_onnx: str, samples_npy: str, layer_names: list[str], workdir: str
) -> list[dict[str, Any]]:
    """Per-tensor SQNR of the QDQ model's activations against the float model's, matched as
    ONNX Runtime's ``qdq_loss_debug`` matches them. Its ``collect_activations`` keeps every
    intermediate tensor of every sample of both models in memory (gigabytes on a detector);
    here each sample's are reduced to sums of squares before the next runs, so memory is one
    sample's activations whatever the sample count."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import qdq_loss_debug
    from onnxruntime.quantization.qdq_loss_debug import create_activation_matching, modify_model_output_intermediate_tensors

    loaded = read_samples(samples_npy)
    graph = onnx.load(float_onnx, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in initializers]
    arrays = {inputs[0]: np.asarray(loaded[""])} if list(loaded) == [""] else \
        {name: np.asarray(loaded[name]) for name in inputs if name in loaded}
    if sorted(arrays) != sorted(inputs):
        return []  # inputs the samples do not name (fixed with --input): nothing to feed them
    count = len(next(iter(arrays.values())))

    float_aug = str(Path(workdir) / "explain.float.onnx")
    qdq_aug = str(Path(workdir) / "explain.qdq.onnx")
    modify_model_output_intermediate_tensors(float_onnx, float_aug)
    modify_model_output_intermediate_tensors(qdq_onnx, qdq_aug)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as collect_activations runs
    sessions = [ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
                for path in (qdq_aug, float_aug)]
    postfix = qdq_loss_debug._TENSOR_SAVE_POSTFIX  # the intermediate outputs' mark
    signal: dict[str, float] = {}
    noise: dict[str, float] = {}
    for i in range(count):  # every input by name (a streaming model's state beside its frames)
        feed = {name: (v[i : i + 1].astype(np.float32) if v.dtype.kind == "f" else v[i : i + 1])
                for name, v in arrays.items()}
        qdq_acts, float_acts = (_saved_activations(session, feed, postfix) for session in sessions)
        for tensor, match in create_activation_matching(qdq_acts, float_acts).items():
            if match.get("float") is None or match.get("post_qdq") is None:
                continue
            reference = np.asarray(match["float"][0], np.float64).ravel()
            quantized = np.asarray(match["post_qdq"][0], np.float64).ravel()
            signal[tensor] = signal.get(tensor, 0.0) + float(np.dot(reference, reference))
            noise[tensor] = noise.get(tensor, 0.0) + float(np.sum((reference - quantized) ** 2))
        del qdq_acts, float_acts
    tiny = np.finfo("float").eps  # qdq_loss_debug's floor on both norms
    errors = {tensor: {"xmodel_err": 20 * np.log10(max(np.sqrt(signal[tensor]), tiny) / max(np.sqrt(noise[tensor]), tiny))}
              for tensor in signal}
    producers = {out: node for node in onnx.load(float_onnx).graph.node for out in node.output}
    rows = []
    for tensor, error in errors.items():
        node = producers.get(tensor)
        sqnr = float(error["xmodel_err"])
        # the layer whose scope names the tensor (tf2onnx keeps Keras scopes); else the node computing it,
        # as the float-op report names it and --keep-float takes it
        layer = next((name for name in layer_names if in_layer(tensor, name)), None) or (
            node.name if node is not None and node.name else tensor.split("/")[1] if "/" in tensor else tensor)
        rows.append({
            "layer": layer, "op": node.op_type if node is not None else "", "tensor": tensor,
            "sqnr_db": sqnr if np.isfinite(sqnr) else None,
        })
    return worst_layers(rows)


def _saved_activations(session: Any, feed: dict[str, np.ndarray], postfix: str) -> dict[str, list[np.ndarray]]:
    """One sample's intermediate tensors from a ``modify_model_output_intermediate_tensors``
    model, by tensor name (as ``collect_activations`` names them: ``postfix`` marks them)."""
    values = session.run(None, feed)
    return {output.name[: -len(postfix)]: [value] for output, value in zip(session.get_outputs(), values)
            if output.name.endswith(postfix)}


def mobile_usability(model: str) -> dict[str, Any]:
    """How much of the graph NNAPI and the CoreML EPs would take, as-is and with fixed shapes."""
    import logging
    import tempfile

    _ort_tools_without_torch()
    from onnxruntime.tools.mobile_helpers import usability_checker as uc
    from onnxruntime.tools.onnx_model_utils import ModelProtoWithShapeInfo, optimize_model

    logging.getLogger().setLevel(logging.ERROR)
    checks = {
        "nnapi": lambda m, fixed: uc.check_nnapi_partitions(m, fixed),
        "coreml_neuralnetwork": lambda m, fixed: uc.check_coreml_partitions(
            m, fixed, "coreml_supported_neuralnetwork_ops.md"
        ),
        "coreml_mlprogram": lambda m, fixed: uc.check_coreml_partitions(m, fixed, "coreml_supported_mlprogram_ops.md"),
    }
    report: dict[str, Any] = {"tool": "onnxruntime.tools.mobile_helpers.usability_checker"}
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "model.onnx"
        optimize_model(Path(model), optimized, use_external_initializers=True)
        with_shapes = ModelProtoWithShapeInfo(optimized).model_with_shape_info
        for ep, check in checks.items():
            entry = {}
            for label, fixed in (("as_is", True), ("fixed_shapes", False)):
                info = check(with_shapes, fixed)
                entry[label] = {
                    "supported_nodes": info.num_supported_nodes,
                    "nodes": info.num_nodes,
                    "partitions": info.num_partitions,
                    "suitability": info.suitability().name,
                    "unsupported_ops": sorted(info.unsupported_ops),
                }
            report[ep] = entry
    return report


def _write_float_model(float_onnx: str, output: Path) -> None:
    """The float graph written where the INT8 build was (one file, its external data folded in),
    by a temporary file and a rename."""
    import onnx

    from ...fsutil import write_bytes_atomic

    write_bytes_atomic(output, onnx.load(float_onnx).SerializeToString())


def _runtime_graph(path: str) -> dict[str, Any]:
    """Int8 and float compute nodes after ONNX Runtime's own optimization on this CPU
    (``fused.runtime_graph``), read in a child like every step that loads an artifact (a crash
    in the runtime is never the packager's end, and its session's memory goes with the child);
    a failure to read it is recorded, never the artifact's failure."""
    try:
        return dict(worker.call(runtime_graph_or_error, what="ONNX Runtime's optimized graph", path=path))
    except EdgekitError as exc:
        return {"error": first_line(exc)[:200]}


def runtime_graph_or_error(path: str) -> dict[str, Any]:
    """Child side of ``_runtime_graph``: the counts, or the error ONNX Runtime raised reading them."""
    from .fused import runtime_graph

    try:
        return runtime_graph(path)
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime raises its own types; the count is informative only
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"}
