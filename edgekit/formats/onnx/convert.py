"""ONNX conversions, child side: ONNX Runtime's static QDQ quantization of a float graph
(``quantize``: opset raised where needed, ``quant_pre_process``, layers kept in float or at 16
bits, every scheme variant of the model in the same child), the per-layer error report
(``explain``), the mobile usability check and the runtime's optimized graph. Each runs in a
converter child (``worker.convert``) and answers with a typed report.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import worker
from ...conversion.layer_names import ONNX_NODE, LayerNames, in_layer
from ...conversion.messages import Message, PathRequest
from ...errors import ConversionError, EdgekitError, OTHER_ROUTES, first_line
from ..building import MINMAX, read_samples, worst_layers
from ..plan import FLAGS, FLOAT, INT16, PrecisionPlan

OPSET = 17


@dataclass(frozen=True)
class SchemeBuild(Message):
    """Another INT8 scheme of the same model, written to ``path`` with its report beside it."""

    path: str
    activation_type: str
    reduce_range: bool


@dataclass(frozen=True)
class QuantizeRequest(Message):
    """``quantize_static`` of ``float_onnx`` into ``output``: the ``plan``'s float layers stay float,
    its int16 layers get 16-bit activations; ``also``: more schemes of the same model."""

    float_onnx: str
    calibration_npy: str
    output: str
    calibration_method: str = MINMAX
    activation_type: str = "s8"
    reduce_range: bool = False
    plan: PrecisionPlan = PrecisionPlan()
    max_intermediate_outputs: int | None = None
    workdir: str = ""
    also: tuple[SchemeBuild, ...] = ()


@dataclass(frozen=True)
class QuantizeReport(Message):
    """What one INT8 graph was made from and how: the same for a quantization and for a quantized
    source kept as given (``scheme``, ``quantized_biases``, ``weights_on_grid`` then set)."""

    seconds: float
    onnxruntime: str
    opset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    prepared: str  # the graph quantized (pre-processed), the float side of --explain
    excluded_nodes: tuple[tuple[str, ...], ...] = ()
    upgraded_from_opset: int | None = None
    shape_inference: str = "symbolic"
    scheme: Any = None  # a quantized source's scheme, stored as read
    quantized_biases: tuple[str, ...] = ()
    weights_on_grid: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExplainRequest(Message):
    float_onnx: str
    qdq_onnx: str
    samples_npy: str
    layer_names: tuple[str, ...]
    workdir: str


@dataclass(frozen=True)
class ExplainReport(Message):
    rows: list[dict[str, Any]]  # worst layers first, stored as made


@dataclass(frozen=True)
class GraphRecord(Message):
    """A record of the graph the parent stores without reading it (mobile usability, the
    runtime's optimized graph)."""

    record: dict[str, Any]


def _layer_nodes(model: Any, layers: list[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Nodes that belong to the named layers, each with the plan's name: a node by its name or
    scope (tf2onnx keeps TF scope names: model/LAYER_1/op), a PyTorch module by the nodes
    exported from it (``LayerNames.resolve``)."""
    found: list[tuple[str, str, str]] = []
    missing = []
    producer = {out: n for n in model.graph.node for out in n.output}
    names = LayerNames.of_onnx(model)
    for layer in layers:
        own, _ = names.resolve({layer: ""}, ONNX_NODE)
        if list(own) == [layer]:  # a node, a scope or a Keras layer: matched by scope, as the converters name them
            nodes = [(n.name, n.op_type, layer) for n in model.graph.node if in_layer(n.name, layer)]
        else:  # a PyTorch module: exactly the nodes its export recorded (no regex per node and name)
            nodes = [(n.name, n.op_type, layer) for n in model.graph.node if n.name in own]
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


def quantize(request: QuantizeRequest) -> QuantizeReport:
    """``quantize_static`` of ``float_onnx`` into ``output`` (child side); ``also``: more schemes of
    the same model (``path``, ``activation_type``, ``reduce_range``), each written with its info
    beside it, so the scheme variants cost no process or pre-processing of their own."""
    import onnx

    float_onnx, output, workdir = request.float_onnx, request.output, request.workdir

    work = Path(workdir or Path(output).parent)
    source, upgraded_from = _upgrade_opset(float_onnx, work)
    prepared = str(work / "model.prep.onnx")
    shape_inference = _pre_process(source, prepared)
    model = onnx.load(prepared)
    if _flatten_gemm_biases(model):
        onnx.save(model, prepared)
    excluded, missing = _layer_nodes(model, list(request.plan.floats))
    excluded = _with_folding_producers(model, excluded)
    wide, missing_wide = _layer_nodes(model, list(request.plan.int16))
    for flag, absent in ((FLAGS[FLOAT], missing), (FLAGS[INT16], missing_wide)):
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
    samples = read_samples(request.calibration_npy)
    if list(samples) == [""]:
        samples = {graph_inputs[0]: samples[""]}
    missing = [n for n in graph_inputs if n not in samples]
    if missing:
        raise ConversionError(f"calibration data has no samples for ONNX input(s) {missing} (it has {list(samples)})")
    settings = {"calibration_method": request.calibration_method,
                "max_intermediate_outputs": request.max_intermediate_outputs,
                "excluded": excluded, "int16_tensors": _activations_of(model, [name for name, _, _ in wide])}
    recorded = {"prepared": prepared, "upgraded_from_opset": upgraded_from, "shape_inference": shape_inference}
    made = QuantizeReport(**_quantize_static(prepared, output, samples, graph_inputs, request.activation_type,
                                             request.reduce_range, settings), **recorded)
    for other in request.also:
        try:
            produced = QuantizeReport(**_quantize_static(prepared, other.path, samples, graph_inputs,
                                                         other.activation_type, other.reduce_range, settings),
                                      **recorded)
        except EdgekitError:  # that variant's own build tries again and reports its failure
            continue
        Path(other.path).with_suffix(".json").write_text(json.dumps(produced.to_json()))
    return made


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
    exact = exact_comparisons(quantized.graph)
    if exact:
        onnx.save(quantized, path)
    return {
        "seconds": round(time.perf_counter() - started, 3),
        "onnxruntime": onnxruntime.__version__,
        "opset": next((o.version for o in quantized.opset_import if o.domain in ("", "ai.onnx")), OPSET),
        "inputs": tuple(i.name for i in quantized.graph.input),
        "outputs": tuple(o.name for o in quantized.graph.output),
        "excluded_nodes": tuple(tuple(entry) for entry in settings["excluded"]),
    }


COMPARISONS = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"}  # ONNX has no NotEqual: Not(Equal)


def exact_comparisons(graph: Any) -> int:
    """Comparisons read the float value the quantizer had, not its quantized copy; how many inputs
    were rewired. A comparison has no int8 kernel: it ran in float on the dequantized value, where a
    mask sentinel (Keras ``Masking(-1)``: padded steps equal -1) lands a rounding step away from
    itself and every padded step counts as data. Where the original is a float tensor of the graph
    (not a weight's int8 initializer), it is fed unchanged."""
    dequantized = {n.output[0]: n for n in graph.node if n.op_type == "DequantizeLinear"}
    quantized = {n.output[0]: n for n in graph.node if n.op_type == "QuantizeLinear"}
    rewired = 0
    for node in graph.node:
        if node.op_type not in COMPARISONS:
            continue
        for position, name in enumerate(node.input):
            pair = dequantized.get(name)
            source = quantized.get(pair.input[0]) if pair is not None else None
            if source is not None:
                node.input[position] = source.input[0]
                rewired += 1
    return rewired


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


def explain(request: ExplainRequest) -> ExplainReport:
    """Per-tensor SQNR of the QDQ model's activations against the float model's, matched as
    ONNX Runtime's ``qdq_loss_debug`` matches them. Its ``collect_activations`` keeps every
    intermediate tensor of every sample of both models in memory (gigabytes on a detector);
    here each sample's are reduced to sums of squares before the next runs, so memory is one
    sample's activations whatever the sample count."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import qdq_loss_debug
    from onnxruntime.quantization.qdq_loss_debug import create_activation_matching, modify_model_output_intermediate_tensors

    float_onnx, qdq_onnx, workdir = request.float_onnx, request.qdq_onnx, request.workdir
    layer_names = list(request.layer_names)
    loaded = read_samples(request.samples_npy)
    graph = onnx.load(float_onnx, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in initializers]
    arrays = {inputs[0]: np.asarray(loaded[""])} if list(loaded) == [""] else \
        {name: np.asarray(loaded[name]) for name in inputs if name in loaded}
    if sorted(arrays) != sorted(inputs):
        return ExplainReport(rows=[])  # inputs the samples do not name (fixed with --input): nothing to feed them
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
    return ExplainReport(rows=worst_layers(rows))


def _saved_activations(session: Any, feed: dict[str, np.ndarray], postfix: str) -> dict[str, list[np.ndarray]]:
    """One sample's intermediate tensors from a ``modify_model_output_intermediate_tensors``
    model, by tensor name (as ``collect_activations`` names them: ``postfix`` marks them)."""
    values = session.run(None, feed)
    return {output.name[: -len(postfix)]: [value] for output, value in zip(session.get_outputs(), values)
            if output.name.endswith(postfix)}


def mobile_usability(request: PathRequest) -> GraphRecord:
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
        optimize_model(Path(request.path), optimized, use_external_initializers=True)
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
    return GraphRecord(record=report)


def runtime_graph_or_error(request: PathRequest) -> GraphRecord:
    """Child side of ``_runtime_graph``: the counts, or the error ONNX Runtime raised reading them."""
    from .fused import runtime_graph

    try:
        return GraphRecord(record=runtime_graph(request.path))
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime raises its own types; the count is informative only
        said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return GraphRecord(record={"error": f"{type(exc).__name__}: {said}"})
