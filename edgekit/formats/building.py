"""The build side of a format: what a ``Builder`` reads (``BuildContext``), what it returns
(``BuildResult``), and helpers the builders share. Imported only when packaging."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple

from ..conversion.forms import ModelForm
from ..machine.build_target import BuildTarget
from ..manifest import Artifact, QuantParams
from .plan import FLAGS, FLOAT, INT16, PrecisionPlan
from ..conversion.source_precision import FLOAT_SOURCE, SourcePrecision



MINMAX = "minmax"  # activation ranges from the calibration samples' minimum and maximum
HISTOGRAM = "histogram"  # PT2E's HistogramObserver (``simulation/estimators.py``)


class Variant(NamedTuple):
    """Another quantized build of a format for other devices (an ONNX INT8 scheme for other CPUs):
    its artifact key's suffix, what it is in words, and the build options it sets."""

    name: str  # the artifact key's suffix: onnx-NAME
    scheme: str  # said while it builds
    options: Mapping[str, Any]  # build options over the main build's (the variant's name among them)

    def context(self, main: BuildContext) -> BuildContext:
        """The main build's context with this variant's options; a variant never builds a float
        fallback (the main build's serves every scheme)."""
        return replace(main, options=MappingProxyType({**main.options, "variant": self.name, **self.options}),
                       also_float=False)


@dataclass(frozen=True)
class BuildContext:
    """What every format's builder reads; one per packaging run, never written to.

    Format-specific settings (``--calibration-method``, ``--coreml-activations``, ...) are in
    ``options``; each builder reads the keys it knows.
    """

    calibration_npy: str  # preprocessed float32 calibration inputs, shape (N, ...)
    eval_npy: str  # validation inputs (for formats that validate without a runtime)
    package_dir: Path  # the package being staged; artifacts go below it
    workdir: Path  # scratch space for intermediates (float ONNX, ...), removed afterwards
    # the form of the model this format converts from, as its route produced it (edgekit.routing.routes):
    # a builder reads this, never what kind of file the user passed
    model: ModelForm = ModelForm("", "")
    layer_names: tuple[str, ...] = ()  # to name layers in op errors
    output_layers: Mapping[str, str] = field(default_factory=dict)  # model output name -> the layer computing it
    output_names: tuple[str, ...] = ()  # the model's outputs, in order
    # the layers this build leaves out of int8 (float, or 16-bit activations with 8-bit weights)
    plan: PrecisionPlan = field(default_factory=PrecisionPlan)
    # float, or learned (QAT, another tool's QDQ graph): its ranges kept, never chosen again
    source_precision: SourcePrecision = FLOAT_SOURCE
    allow_float_ops: bool = True  # False: --full-integer refuses float ops inside a TFLite network
    explain_npy: str | None = None  # samples for the per-layer error report (--explain); None = no report
    sensitivity_npy: str | None = None  # the same samples, for --auto-fix's layer search to ask for the report
    timeout_s: float | None = None
    # a search try: only the artifact its gates judge; companions (.ort, reports) and scheme
    # variants are made when the configuration the search keeps is built again for the package
    trial: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    also_float: bool = False  # build the float fallback beside the INT8 artifact (never for a quantized source)
    device_profiles: tuple[BuildTarget, ...] = ()  # the devices the package is for (--profile)

    def option(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    def with_plan(self, plan: PrecisionPlan) -> BuildContext:
        """This context building ``plan`` (in place of the one it had)."""
        return replace(self, plan=plan)


class Fix(NamedTuple):
    """One rebuild ``--auto-fix`` may try when a gate fails, and the flag a user would pass for it.

    An option edit sets the ``BuildContext.options`` key ``option`` to ``value``; a plan edit
    (``precision`` set) raises the layer ``value`` to that precision in ``BuildContext.plan``.
    ``when``: ``"always"``, ``"saturated"``
    for a fix that only helps where this CPU's fused int8 kernels lose what the quantization keeps,
    or ``"no_layers"`` for one tried only where the route honours no per-layer precision (there is
    no plan to search: the format's coarser rebuild is all that is left)."""

    flag: str
    option: str
    value: Any
    when: str = "always"
    precision: str | None = None  # a plan edit: the layer ``value`` at this precision

    def apply(self, context: BuildContext) -> BuildContext | None:
        """The context with this fix in effect; None when it already is (or, for 16-bit
        activations, when the layer is already float: never lowered)."""
        if self.precision is not None:
            plan = context.plan.edited(self.value, self.precision)
            return None if plan is None else replace(context, plan=plan)
        if context.options.get(self.option) == self.value:
            return None
        return replace(context, options=MappingProxyType({**context.options, self.option: self.value}))


def plan_fix(layer: str, precision: str) -> Fix:
    """A plan edit: ``layer`` in float, or at 16-bit activations (8-bit weights), as its flag says."""
    return Fix(f"{FLAGS[precision]} {layer}", "plan", layer, precision=precision)


def float_fix(layer: str) -> Fix:
    return plan_fix(layer, FLOAT)


def int16_fix(layer: str) -> Fix:
    """16-bit activations on ``layer`` (8-bit weights): tried before float where the route runs them."""
    return plan_fix(layer, INT16)


@dataclass(frozen=True)
class BuildResult:
    """What a builder made: the manifest entry, outputs it computed without a device runtime
    (CoreML on Linux, by edgekit's MIL evaluator) for the validation step, and the float model it
    converted before quantizing, so that validation can tell a conversion loss from a
    quantization loss."""

    artifact: Artifact
    evaluated_npy: str | None = None
    evaluated_by: str = ""
    not_measured: str = ""  # why the builder could not compute its outputs (the evaluator's missing ops)
    float_model: str | None = None  # the converted float model, run by the format's backend
    float_evaluated_npy: str | None = None  # or its outputs on the validation samples, computed by the builder
    float_by: str = ""  # what the float model is and what ran it
    # the float fallback artifact (BuildContext.also_float): a file or .mlpackage in the
    # workdir, its precision, and its outputs on the validation samples when no runtime here runs it
    fallback_model: str | None = None
    fallback_precision: str = ""
    fallback_evaluated_npy: str | None = None


def save_samples(path_without_suffix: Path, arrays: Mapping[str, Any]) -> str:
    """Model-ready samples for converters: ``.npy`` for a one-input model, ``.npz`` by input name."""
    import numpy as np

    if len(arrays) == 1:
        path = path_without_suffix.with_suffix(".npy")
        np.save(path, next(iter(arrays.values())))
    else:
        path = path_without_suffix.with_suffix(".npz")
        np.savez(path, **dict(arrays))
    return str(path)


def read_samples(path: str) -> dict[str, Any]:
    """What ``save_samples`` wrote: ``{"": array}`` for one input, else arrays by input name."""
    import numpy as np

    if path.endswith(".npz"):
        with np.load(path) as stored:
            return {name: stored[name] for name in stored.files}
    return {"": np.load(path, mmap_mode="r")}


def worst_layers(rows: list[dict], limit: int = 20) -> list[dict]:
    """Per-layer error rows sorted worst first (lowest SQNR), non-finite SQNR (exact) last."""
    finite = [r for r in rows if r.get("sqnr_db") is not None and r["sqnr_db"] == r["sqnr_db"] and abs(r["sqnr_db"]) != float("inf")]
    exact = [r for r in rows if r not in finite]
    return (sorted(finite, key=lambda r: r["sqnr_db"]) + exact)[:limit]


@dataclass(frozen=True)
class QuantGrid:
    """How a format's quantizer places activation scales beyond the grid every format shares
    (per-channel symmetric int8 weights, per-tensor asymmetric int8 activations from min/max):
    the ops whose inputs and output it ties to one scale. The INT8 simulation runs a format's
    grid (``simulation/graph.py``), so the plan a format builds first is judged in its arithmetic."""

    name: str = "common"
    tied_ops: tuple[str, ...] = ()  # ONNX op types: a Concat whose inputs share its output's scale
    symmetric_activations: bool = False  # activations on [-127, 127] around 0 (half the levels after a ReLU)
    # (ONNX op type, scale, zero point): outputs the runtime's int8 kernels write on a fixed grid,
    # whatever the calibration saw (TFLite's LOGISTIC and SOFTMAX on 1/256 from -128, TANH on 1/128)
    fixed_outputs: tuple[tuple[str, float, int], ...] = ()
    # ONNX op types the format's quantizer only quantizes (None: every op that computes); the others
    # run in float between int8 ones (XNNPACK's quantizer annotates no sigmoid, exp or softmax)
    quantized_ops: tuple[str, ...] | None = None
    # how its quantizer sets an activation's range from the calibration samples
    # (``simulation/estimators.py``): "minmax", or "histogram" (PT2E's HistogramObserver)
    ranges: str = "minmax"

    @property
    def common(self) -> bool:
        """Whether this is the grid the shared search runs (nothing to check again)."""
        return not (self.tied_ops or self.symmetric_activations or self.fixed_outputs) \
            and self.quantized_ops is None and self.ranges == "minmax"

    def rules(self) -> dict[str, Any]:
        """The grid as the simulation's child takes it (``simulation/graph.py``)."""
        return {"tied_ops": list(self.tied_ops), "symmetric": self.symmetric_activations,
                "fixed_outputs": [list(f) for f in self.fixed_outputs],
                "quantized_ops": None if self.quantized_ops is None else list(self.quantized_ops)}


COMMON_GRID = QuantGrid()


class Builder(ABC):
    """The build side of a format: converts, calibrates, writes one artifact."""

    name: ClassVar[str]
    backend: ClassVar[str]  # the backend that validates the artifact on the build machine
    unmeasured_reason: ClassVar[str] = "no runtime for it on this machine"
    cheap_tries: ClassVar[bool] = False  # a search try costs a forward pass, not a conversion (the simulation)
    # whether the runtimes this format targets run 16-bit activations on fast kernels; where they do
    # not (TFLite's int16x8 kernels are reference kernels; ONNX Runtime's and XNNPACK's run int16
    # several times slower than int8 and slower than float on CPUs), the layer search raises layers
    # to float, never to 16-bit activations, which would ship an INT8 artifact slower than float
    fast_int16_activations: ClassVar[bool] = False
    grid: ClassVar[QuantGrid] = COMMON_GRID  # its quantizer's scale rules, run by the INT8 simulation

    @abstractmethod
    def build(self, context: BuildContext, on_progress: Callable[[int, int], None] | None = None) -> BuildResult:
        """Convert, calibrate and write the artifact; ``on_progress(done, total)`` during calibration."""

    def range_method(self, context: BuildContext) -> str:
        """How activation ranges were chosen (recorded in the manifest)."""
        return MINMAX

    def fixes(self) -> tuple[Fix, ...]:
        """This format's own rebuilds for a failed gate, most likely first (``--auto-fix`` tries
        them in order, after keeping the failing output's layer in float where the route can)."""
        return ()

    def saturation_explanation(self) -> str:
        """Why this format's fused int8 kernels can lose what its quantization keeps (said when
        validation measures it: see ``unfused_backend_options``)."""
        return ""

    def variants(self, context: BuildContext) -> list[Variant]:
        """More quantized builds of this format, one per device kind that needs another scheme;
        none by default."""
        return []

    def judged_as_quantized(self, context: BuildContext) -> str | None:
        """Why this artifact is judged by its quantization itself (``unfused_backend_options``:
        the exact int8 arithmetic of the devices it is built for) rather than by this machine's
        fused kernels; None, the default, when this machine runs it as those devices do."""
        return None

    def unfused_backend_options(self) -> dict[str, Any] | None:
        """Backend options that evaluate the quantization itself rather than this CPU's fused int8
        kernels (which may saturate where a device's would not); None when the runtime does not fuse."""
        return None

    def fused_kernels(self) -> str:
        """This CPU's fused int8 kernels in words, where the runtime fuses (``unfused_backend_options``):
        what the build line names when they and the quantization disagree."""
        return ""

    def held_out_of_int8(self, artifact: Artifact) -> list[tuple[str, str, str]] | None:
        """What the built artifact holds out of int8, read from the artifact: ``(precision, layer,
        tensor)`` per op (``layer_names.read_back`` checks a plan against it); None where this
        format reads no such record back. By default its float ops and 16-bit layers, where its
        precision record was read from the artifact's ops (``formats/precision.py``)."""
        precision = artifact.about.precision
        if "float_layers" not in precision:
            return None
        ops = [("float", str(op.get("layer") or ""), str(op.get("tensor") or "")) for op in artifact.float_ops]
        return ops + [("int16", str(layer), "") for layer in precision.get("int16_layers") or []]

    def place_fallback(self, source: Path, target: Path) -> None:
        """Put the float fallback file (or .mlpackage folder) into the package."""
        import shutil

        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)

    def fallback_io(self, path: Path, quantized: Artifact) -> tuple[list[QuantParams], list[QuantParams]]:
        """The float fallback's inputs and outputs: the quantized artifact's names, float32 (a
        format whose float file could name them differently reads them from the file)."""
        return ([QuantParams(name=q.name, dtype="float32") for q in quantized.inputs],
                [QuantParams(name=q.name, dtype="float32") for q in quantized.outputs])
