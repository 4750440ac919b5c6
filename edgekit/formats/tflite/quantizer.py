"""INT8 TFLite from a float ``.tflite`` with LiteRT Quantizer: per-layer precision on every route.

Every TFLite route converts to a float ``.tflite`` first (TensorFlow's converter, litert-torch);
LiteRT Quantizer (``litert-quantizer``, the maintained successor of the converter's
post-training quantization) then quantizes that file with a recipe: int8 weights and int8
activations for every op it supports, a layer's ops left in float, or given 16-bit activations
(int16x8, which LiteRT's reference kernels and XNNPACK run). So a layer's precision is
controlled the same way whichever source the model came from, and the float conversion runs
once while the quantization runs as many times as a search needs: the calibration statistics
(each tensor's min/max over the calibration samples, with every op float) are computed once per
float model and kept beside it.

Child side (``worker.call``): imports LiteRT Quantizer and LiteRT, never TensorFlow.
"""

from __future__ import annotations

import functools
import pickle
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...conversion import worker
from ...conversion.messages import Message
from ...errors import ConversionError, EdgekitError, first_line
from ...conversion.layer_names import in_layer, within
from ..building import read_samples
from ..plan import FLOAT, INT16  # a layer's precision other than the default int8 (formats/plan.py)

SCOPES, MODULES = "scopes", "modules"  # how a converter names tensors: TensorFlow scopes, PyTorch module paths


@dataclass(frozen=True)
class QuantizerRequest(Message):
    """LiteRT Quantizer on a float ``.tflite``: ``layers`` (layer -> ``"float"`` or ``"int16"``) the
    per-layer recipe; ``learned_ranges`` / ``learned_weight_scales``: a quantized source's own."""

    float_model: str
    calibration_npy: str
    output: str
    layers: dict[str, str] | None = None
    namer: str = SCOPES
    layer_names: tuple[str, ...] = ()
    explain_npy: str | None = None
    output_layers: dict[str, str] | None = None
    learned_ranges: dict[str, dict[str, Any]] | None = None
    learned_weight_scales: dict[str, list[float]] | None = None


@dataclass(frozen=True)
class QuantizerReport(Message):
    litert_quantizer: str
    seconds: float
    layers: dict[str, str]
    fixed_output_scales: list[str]
    left_float: list[dict[str, str]]
    explain: Any = None  # the per-layer report, stored as made
    learned_ranges: Any = None  # the source's ranges carried and not found, stored as found


def quantize_float_tflite(request: QuantizerRequest) -> QuantizerReport:
    """Write ``output``: the float model with int8 weights and activations, except the ops of
    each layer in ``layers`` (layer -> ``"float"`` or ``"int16"``). ``namer`` says how tensor
    names map to layers (``SCOPES``: TensorFlow name scopes, ``MODULES``: PyTorch module paths);
    ``output_layers`` (model output -> the layer computing it) names the ops that write the
    model's outputs, which converters name after the signature's output instead.
    ``learned_ranges`` (a quantized source's activation ranges by its tensor name, with the node
    computing each, ``conversion.quantized.strip_qdq``) replace the calibrated ranges of the ops
    those nodes became, so the learned scales and zero points are the artifact's."""
    from litert_quantizer import quantizer, recipe

    from .requantize import fix_int8_output_scales

    float_model, calibration_npy, output = request.float_model, request.calibration_npy, request.output
    layers, namer, layer_names, explain_npy = request.layers, request.namer, list(request.layer_names), request.explain_npy
    output_layers, learned_ranges = request.output_layers, request.learned_ranges
    learned_weight_scales = request.learned_weight_scales

    started = time.perf_counter()
    qt = quantizer.Quantizer(float_model)
    qt.load_quantization_recipe(recipe.static_wi8_ai8())
    writers = output_writers(float_model, output_layers or {})
    scopes = _layer_scopes(float_model, layers or {}, namer, layer_names or [], writers)
    for layer, precision in (layers or {}).items():
        # an op's scope is its output tensors' names, each followed by ";" (LiteRT Quantizer's get_op_scope)
        pattern = "(^|;)(" + "|".join(re.escape(name) for name in scopes[layer]) + ");"
        if precision == FLOAT:
            from litert_quantizer import qtyping

            qt.update_quantization_recipe(regex=pattern, operation_name="*", op_config=qtyping.OpQuantizationConfig(),
                                          algorithm_key="no_quantize")
        elif precision == INT16:
            qt.add_static_config(pattern, "*", activation_num_bits=16, weight_num_bits=8)
        else:
            raise EdgekitError(f"unknown layer precision {precision!r} for {layer}", hint="use float or int16")
    left_float = _float_by_kind(qt, float_model)
    calibration = _calibration(qt, float_model, calibration_npy)
    carried = _carry_ranges(calibration, float_model, learned_ranges, namer, layer_names or []) \
        if learned_ranges else None
    while True:
        try:
            result = qt.quantize(calibration, enable_progress_report=False)
            result.export_model(output, overwrite=True)
            break
        except EdgekitError:
            raise
        except Exception as exc:  # the quantizer's own errors: an op or a recipe it cannot apply
            failing = _failing_op(exc)
            if failing is not None and len(left_float) < MAX_OPS_LEFT_FLOAT \
                    and failing not in [(f["op"], f["scope"]) for f in left_float]:
                # that one op in float (named in the artifact's float ops), the rest quantized as before
                from litert_quantizer import qtyping

                left_float.append({"op": failing[0], "scope": failing[1], "error": first_line(exc)[:200]})
                qt.update_quantization_recipe(regex="^" + re.escape(failing[1]), operation_name=failing[0],
                                              op_config=qtyping.OpQuantizationConfig(), algorithm_key="no_quantize")
                continue
            raise ConversionError(f"LiteRT Quantizer failed: {type(exc).__name__}: {first_line(exc)[:300]}"
                                  + (f" (on {failing[0]} {failing[1].rstrip(';')})" if failing else ""),
                                  hint="keep the layer it names in float (--keep-float LAYER), or package the other "
                                       "formats") from None
    seconds = time.perf_counter() - started
    explained = _explain(qt, float_model, explain_npy, namer, layer_names or [], writers) if explain_npy else None
    fixed = fix_int8_output_scales(output)
    if carried is not None and learned_weight_scales:
        carried["weights"] = _weight_grids(output, learned_weight_scales, namer, layer_names or [],
                                           dict(output_layers or {}))
    return QuantizerReport(litert_quantizer=_version("litert-quantizer"), seconds=round(seconds, 3),
                           layers=dict(layers or {}), fixed_output_scales=list(fixed), explain=explained,
                           left_float=left_float, learned_ranges=carried)


def _float_by_kind(qt: Any, float_model: str) -> list[dict[str, str]]:
    """The recipe's rules for what stays float whatever the plan says, and the float ops recorded
    for them: a DIV by a computed value, comparisons and the model inputs they read, control flow."""
    from litert_quantizer import qtyping

    left_float: list[dict[str, str]] = []
    for scope in computed_divisors(float_model):
        qt.update_quantization_recipe(regex="(^|;)" + re.escape(scope) + ";", operation_name="DIV",
                                      op_config=qtyping.OpQuantizationConfig(), algorithm_key="no_quantize")
        left_float.append({"op": "DIV", "scope": scope + ";", "error": DIVISOR_NOTE})
    for op in COMPARISONS:  # no recipe name in pattern: every op of the type, wherever it is
        qt.update_quantization_recipe(regex=".*", operation_name=op, op_config=qtyping.OpQuantizationConfig(),
                                      algorithm_key="no_quantize")
    compared = compared_inputs(float_model)
    if compared:  # the comparison reads the float input; the model's other readers get a QUANTIZE of it
        qt.update_quantization_recipe(regex="^(" + "|".join(re.escape(scope) for scope in compared) + ")$",
                                      operation_name="INPUT", op_config=qtyping.OpQuantizationConfig(),
                                      algorithm_key="no_quantize")
    for op, scopes in control_flow_scopes(float_model).items():
        qt.update_quantization_recipe(regex="^(" + "|".join(re.escape(scope) for scope in scopes) + ")$",
                                      operation_name="*", op_config=qtyping.OpQuantizationConfig(),
                                      algorithm_key="no_quantize")
        left_float.append({"op": op.split(" ")[0], "scope": scopes[0], "error": LOOP_NOTE})
    return left_float


def _carry_ranges(calibration: dict[str, Any], float_model: str, learned: dict[str, dict[str, Any]], namer: str,
                  layer_names: list[str]) -> dict[str, Any]:
    """Set each learned range on the tensor of the op its node became (the last op of that layer:
    an activation fused into its convolution writes the layer's output) or on the model input it
    quantizes; what was carried and what was left to calibration, for the artifact's record."""
    from .backend import _interpreter_module, output_tensor_names

    module, _ = _interpreter_module()
    interpreter = module.Interpreter(model_path=float_model)
    input_tensors = [d["name"] for d in interpreter.get_input_details()]
    output_tensors = output_tensor_names(interpreter)
    names = op_tensor_names(float_model)
    belongs = layer_test(namer, layer_names)
    carried, missing = {}, []
    for tensor, found in learned.items():
        if found.get("input") is not None and found["input"] < len(input_tensors):
            target = input_tensors[found["input"]]
        elif found.get("output") in output_tensors:
            target = output_tensors[found["output"]]
        else:
            owned = [n for n in names if found.get("producer") and any(
                belongs(part + ";", found["producer"]) or belongs(part, found["producer"]) for part in n.split(";") if part)]
            target = owned[-1] if owned else None
        if target is None or target not in calibration:
            missing.append(tensor)
            continue
        calibration[target] = {"min": np.asarray(found["min"], np.float32).reshape(np.shape(calibration[target]["min"])),
                               "max": np.asarray(found["max"], np.float32).reshape(np.shape(calibration[target]["max"]))}
        carried[tensor] = {"tflite_tensor": target, "scale": found["scale"], "zero_point": found["zero_point"]}
    targets = {c["tflite_tensor"] for c in carried.values()}
    kinds = _ops_by_tensor(float_model)  # data movement keeps its input's scale: never a range of its own
    calibrated = [_layer_name(n, namer, layer_names) for n in names
                  if n not in targets and n in calibration and kinds.get(n) not in SAME_SCALE_OPS]
    return {"carried": carried, "not_found": missing, "calibrated_here": list(dict.fromkeys(calibrated))}


SAME_SCALE_OPS = {"TRANSPOSE", "RESHAPE", "PAD", "PADV2", "SQUEEZE", "EXPAND_DIMS", "GATHER", "SLICE", "STRIDED_SLICE",
                  "MAX_POOL_2D", "SPACE_TO_DEPTH", "DEPTH_TO_SPACE", "CONCATENATION", "SPLIT", "SPLIT_V", "PACK",
                  "UNPACK", "TILE", "BROADCAST_TO"}


def _layer_name(tensor: str, namer: str, layer_names: list[str]) -> str:
    """The layer an op's tensor belongs to, for messages."""
    if namer == MODULES:
        from .from_torch import torch_layer

        return torch_layer(tensor, layer_names)
    return tensor.split(";")[0]


def _weight_grids(artifact: str, learned: dict[str, list[float]], namer: str, layer_names: list[str],
                  output_layers: dict[str, str] | None = None) -> dict[str, Any]:
    """Per weighted layer, whether the artifact's weight scales are the learned ones: TFLite's int8
    weights are symmetric in [-127, 127], so a channel whose learned grid reaches -128 is
    quantized again at 128/127 of its scale (said, per layer, never hidden). An op writing a model
    output carries the signature's output name, not its layer's: ``output_layers`` (model output
    -> the layer computing it) names it."""
    from .backend import _interpreter_module, output_tensor_names

    module, _ = _interpreter_module()
    interpreter = module.Interpreter(model_path=artifact)
    tensors = {int(d["index"]): d for d in interpreter.get_tensor_details()}
    writes = {tensor: (output_layers or {}).get(output) for output, tensor in output_tensor_names(interpreter).items()}
    belongs = layer_test(namer, layer_names)
    found: dict[str, Any] = {}
    for op in interpreter._get_ops_details():  # noqa: SLF001 - LiteRT's only op listing
        if len(op["inputs"]) < 2 or not len(op["outputs"]) or int(op["inputs"][1]) < 0:
            continue
        name = tensors[int(op["outputs"][0])]["name"]
        layer = next((node for node in learned if any(belongs(part, node) for part in name.split(";") if part)), None)
        if layer is None and writes.get(name) in learned:
            layer = writes[name]
        scales = tensors[int(op["inputs"][1])]["quantization_parameters"]["scales"]
        if layer is None or layer in found or len(scales) != len(learned[layer]):
            continue
        same = int(np.sum(np.isclose(scales, learned[layer], rtol=1e-5, atol=0)))
        found[layer] = {"channels": len(scales), "learned_scale_kept": same,
                        "requantized": len(scales) - same}
    return found


MAX_OPS_LEFT_FLOAT = 16  # the quantizer failing on more ops than this: the model is not for this route


def _failing_op(exc: BaseException) -> tuple[str, str] | None:
    """The op LiteRT Quantizer was materializing when it failed: (op name, op scope), read from
    its parameter generator's frame (it names neither in the error)."""
    traceback = exc.__traceback__
    found = None
    while traceback is not None:
        local = traceback.tb_frame.f_locals
        if traceback.tb_frame.f_code.co_name == "generate_quantization_parameters" and "op_scope" in local \
                and "op_key" in local:
            key = local["op_key"]
            found = (str(getattr(key, "value", key)), str(local["op_scope"]))
        traceback = traceback.tb_next
    return found if found and found[1] else None


def _explain(qt: Any, float_model: str, explain_npy: str, namer: str, layer_names: list[str],
             writers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per-layer SQNR of the quantized model's activations against the float model's (LiteRT
    Quantizer's tensor-by-tensor validation), worst first: the candidates for --keep-float."""
    from litert_quantizer.utils import validation_utils

    from ...conversion.layer_names import layer_of
    from ..building import worst_layers
    from .from_torch import torch_layer

    signature, inputs = _signature(float_model)
    samples = read_samples(explain_npy)
    names = {"": next(iter(inputs))} if list(samples) == [""] else {name: name for name in samples}
    count = len(next(iter(samples.values())))
    data = [{names[key]: np.asarray(x[i:i + 1]).astype(inputs[names[key]]) for key, x in samples.items()}
            for i in range(count)]
    compared = qt.validate({signature: data}, error_metrics=[validation_utils.ValidationErrorMetric.SNR],
                           use_xnnpack=False, num_threads=1)
    ops = _ops_by_tensor(float_model)  # in the graph's op order
    # each op's place in the graph, input to output: the search's blocks ("the layers nearest the
    # outputs") order a route's layers by it where the source does not name them (a PyTorch program)
    place = {tensor: i for i, tensor in enumerate(ops)}
    namer_of = torch_layer if namer == MODULES else layer_of
    rows = []
    for tensor, metrics in compared.get_all_tensor_results().items():
        if tensor not in ops or "snr" not in metrics:
            continue  # inputs and constants: not an op's result
        ratio = float(metrics["snr"])
        layer = (writers or {}).get(tensor) or namer_of(tensor, layer_names)
        rows.append({"layer": layer, "op": ops[tensor], "tensor": tensor, "order": place[tensor],
                     "sqnr_db": float(10 * np.log10(ratio)) if ratio > 0 and np.isfinite(ratio) else None})
    return worst_layers(rows)


DIVISOR_NOTE = ("divides by a computed value: LiteRT's int8 DIV refuses any divisor that rounds to its zero point "
                "(div.cc: data[i] != zero_point), so a small divisor would fail at run time")


# a comparison compares the float value, as every other format's build does: quantized, a mask's
# sentinel (Keras Masking's x != -1) and the values beside it can share one int8 step and padded steps
# then count as data (a masked GRU: 75% of float's decisions)
COMPARISONS = ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL")
LOOP_NOTE = ("a loop (a recurrent layer's steps, or an If's branches): LiteRT Quantizer writes a loop body's "
             "tensors with the types of its outer graph, which LiteRT then refuses to load; its ops run in float")
CONTROL_FLOW_OPS = {"WHILE", "IF", "CALL_ONCE"}


def compared_inputs(float_model: str) -> list[str]:
    """The recipe scope of each main-graph model input a comparison reads: it stays float. An int8
    input carries a mask's sentinel (Keras Masking's -1) as the nearest grid point, which a float
    comparison with -1 then calls data (a masked GRU: 75% of float's decisions)."""
    from ai_edge_litert.schema_py_generated import BuiltinOperator
    from litert_quantizer.utils import tfl_flatbuffer_utils as flatbuffer

    model = flatbuffer.read_model(float_model)
    codes = {getattr(BuiltinOperator, name) for name in COMPARISONS}
    found = []
    for main in sorted({int(s.subgraphIndex) for s in (model.signatureDefs or [])} or {0}):
        graph = model.subgraphs[main]
        read = {int(t) for op in graph.operators if model.operatorCodes[op.opcodeIndex].builtinCode in codes
                for t in op.inputs}
        for io in flatbuffer.get_subgraph_input_output_operators(graph):
            if str(getattr(io.op_key, "value", io.op_key)) == "INPUT" and read & {int(t) for t in io.outputs}:
                found.append(flatbuffer.get_op_scope(io, graph.tensors))
    return found


def control_flow_scopes(float_model: str) -> dict[str, list[str]]:
    """Per control-flow op of the model's main graphs (``"WHILE 3"``, by its index): its own scope
    first, then the scope of every op and every input/output of the subgraphs it runs (loop
    bodies, conditions, branches, transitively). They stay float: LiteRT Quantizer calibrates and
    quantizes each subgraph on its own, so a body's inputs get the outer graph's int8 types while
    its ops stay float (``SLICE ... FLOAT32 != INT8``) and LiteRT refuses the file."""
    from ai_edge_litert.schema_py_generated import BuiltinOperator
    from litert_quantizer.utils import tfl_flatbuffer_utils as flatbuffer

    model = flatbuffer.read_model(float_model)
    names = {getattr(BuiltinOperator, name): name for name in CONTROL_FLOW_OPS}  # the quantizer's table lacks them

    def op_name(op: Any) -> str:
        return names.get(model.operatorCodes[op.opcodeIndex].builtinCode, "")

    def called(op: Any) -> list[int]:
        options = op.builtinOptions
        return [int(getattr(options, field)) for field in ("condSubgraphIndex", "bodySubgraphIndex",
                                                             "thenSubgraphIndex", "elseSubgraphIndex", "initSubgraphIndex")
                if options is not None and getattr(options, field, None) is not None]

    mains = {int(s.subgraphIndex) for s in (model.signatureDefs or [])} or {0}
    found: dict[str, list[str]] = {}
    for main in sorted(mains):
        graph = model.subgraphs[main]
        for index, op in enumerate(graph.operators):
            if op_name(op) not in CONTROL_FLOW_OPS:
                continue
            scopes, pending, seen = [flatbuffer.get_op_scope(op, graph.tensors)], called(op), set()
            while pending:
                sub = pending.pop()
                if sub in seen or sub in mains or not 0 <= sub < len(model.subgraphs):
                    continue
                seen.add(sub)
                body = model.subgraphs[sub]
                for inner in list(body.operators) + list(flatbuffer.get_subgraph_input_output_operators(body)):
                    scopes.append(flatbuffer.get_op_scope(inner, body.tensors))
                    if not hasattr(inner, "op_key") and op_name(inner) in CONTROL_FLOW_OPS:
                        pending.extend(called(inner))
            found[f"{op_name(op)} {main}.{index}"] = list(dict.fromkeys(scopes))
    return found


def computed_divisors(float_model: str) -> list[str]:
    """The output tensor (the recipe scope) of every DIV whose divisor is computed, not a constant:
    quantized, its divisor's small values round to the zero point and LiteRT's int8 kernel then
    refuses to run (a histogram divided by its length). They stay float. Read once per float model
    in a child (a search quantizes the same file many times)."""
    stat = Path(float_model).stat()
    return list(_computed_divisors(float_model, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _computed_divisors(float_model: str, size: int, modified_ns: int) -> tuple[str, ...]:
    return computed_divisors_of(model_path=float_model)


def computed_divisors_of(**model: Any) -> tuple[str, ...]:
    """``computed_divisors`` of a model given as the interpreter takes it (``model_path=`` or
    ``model_content=``: a model in memory needs no file, so a full disk cannot fail the check)."""
    from .backend import _interpreter_module

    module, _ = _interpreter_module()
    interpreter = module.Interpreter(**model)
    names = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
    ops = interpreter._get_ops_details()
    computed = {int(t) for op in ops for t in op["outputs"]} | {int(d["index"]) for d in interpreter.get_input_details()}
    return tuple(names[int(op["outputs"][0])] for op in ops
                 if op["op_name"] == "DIV" and len(op["inputs"]) > 1 and int(op["inputs"][1]) in computed)


def _ops_by_tensor(float_model: str) -> dict[str, str]:
    from .backend import _interpreter_module

    module, _ = _interpreter_module()
    interpreter = module.Interpreter(model_path=float_model)
    details = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
    return {details[int(op["outputs"][0])]: op["op_name"] for op in interpreter._get_ops_details() if len(op["outputs"])}


def _calibration(qt: Any, float_model: str, calibration_npy: str) -> Any:
    """Each tensor's range over the calibration samples: computed once per float model and
    calibration set, then read back for every quantization of it."""
    from litert_quantizer import calibrator
    from litert_quantizer.utils import qsv_utils

    from ...fsutil import sha256_file

    key = f"{sha256_file(float_model)[:16]}-{sha256_file(calibration_npy)[:16]}"
    stored = Path(float_model).with_name(f"{Path(float_model).name}.{key}.ranges.pickle")
    if stored.is_file():
        with open(stored, "rb") as file:
            return pickle.load(file)  # written below, in this run's own work folder
    signature, inputs = _signature(float_model)  # input name -> dtype
    samples = read_samples(calibration_npy)
    count = len(next(iter(samples.values())))
    names = {"": next(iter(inputs))} if list(samples) == [""] else {name: name for name in samples}
    missing = [name for name in names.values() if name not in inputs]
    if missing:
        raise ConversionError(f"the float TFLite model's signature has inputs {list(inputs)}, not {missing}",
                              hint="report this model: its converted signature lost the input names")
    dataset = []
    for i in range(count):
        if i % 20 == 0:
            worker.report_progress(i, count)
        dataset.append({names[key]: np.asarray(x[i:i + 1]).astype(inputs[names[key]]) for key, x in samples.items()})
    worker.report_progress(count, count)
    # every tensor's range is collected with the whole model float: a layer's precision changes the
    # recipe, never the ranges, so one calibration serves every recipe
    # min and max over every sample: the quantizer's own default (a moving average of each sample's
    # range, 0.95 per step) clips what few samples reach, and those are the ones a gate then loses
    qt_all = _full_recipe_quantizer(float_model)
    calibration = calibrator.Calibrator(Path(float_model).read_bytes(),
                                        mode=calibrator.CalibrationMode.CALIBRATION_PROFILER_BASED,
                                        qsv_update_func=qsv_utils.min_max_update)
    calibration.calibrate({signature: dataset}, qt_all._recipe_manager)  # noqa: SLF001 (pinned 0.11)
    found = calibration.get_model_qsvs()
    partial = stored.with_name(f".{stored.name}.partial")
    with open(partial, "wb") as file:
        pickle.dump(found, file)
    partial.replace(stored)
    return found


def _full_recipe_quantizer(float_model: str) -> Any:
    """A quantizer whose recipe covers every op, so calibration records every tensor."""
    from litert_quantizer import quantizer, recipe

    qt = quantizer.Quantizer(float_model)
    qt.load_quantization_recipe(recipe.static_wi8_ai8())
    return qt


def _signature(float_model: str) -> tuple[str, dict[str, Any]]:
    """The model's one signature key and its inputs' dtypes by name."""
    from .backend import _interpreter_module

    module, _ = _interpreter_module()
    interpreter = module.Interpreter(model_path=float_model)
    signatures = interpreter.get_signature_list()
    if len(signatures) != 1:
        raise ConversionError(f"the float TFLite model has {len(signatures)} signatures; edgekit quantizes one",
                              hint="export the model with a single serving signature")
    key = next(iter(signatures))
    details = interpreter.get_signature_runner(key).get_input_details()
    return key, {name: np.dtype(detail["dtype"]) for name, detail in details.items()}


def op_tensor_names(float_model: str) -> list[str]:
    """The output tensor name of every op: what LiteRT Quantizer's recipe scopes match."""
    from .backend import _interpreter_module

    module, _ = _interpreter_module()
    interpreter = module.Interpreter(model_path=float_model)
    details = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
    return [details[int(op["outputs"][0])] for op in interpreter._get_ops_details() if len(op["outputs"])]


def output_writers(float_model: str, output_layers: dict[str, str]) -> dict[str, str]:
    """The tensor behind each signature output -> the layer computing that output: a converter
    names the op writing a model output after the signature (``serving_default_output_1_output``),
    not after its layer, so that layer is found through the output it computes."""
    if not output_layers:
        return {}
    from .backend import _interpreter_module, output_tensor_names

    module, _ = _interpreter_module()
    tensors = output_tensor_names(module.Interpreter(model_path=float_model))
    return {tensors[o]: layer for o, layer in output_layers.items() if layer and tensors.get(o)}


def _layer_scopes(float_model: str, layers: dict[str, str], namer: str, layer_names: list[str],
                  writers: dict[str, str] | None = None) -> dict[str, list[str]]:
    """The op output tensors of each layer (the ops writing the outputs it computes among them);
    a layer with none is refused by name."""
    if not layers:
        return {}
    names = op_tensor_names(float_model)
    belongs = layer_test(namer, layer_names)
    found = {layer: [n for n in names if belongs(n, layer) or (writers or {}).get(n) == layer] for layer in layers}
    missing = [layer for layer, tensors in found.items() if not tensors]
    known = [layer for layer in missing if layer in layer_names]
    if known:  # a real layer whose op the converter fused away or named after the model's output
        what = "16-bit activations" if set(known) <= {k for k, v in layers.items() if v != "float"} else "its precision"
        raise EdgekitError(f"layer(s) {', '.join(known)} of the model cannot take {what} on TFLite: the converter "
                           "left no op named after them (an op fused into its neighbour, or a final op such as a "
                           "Softmax that writes the model's output under the signature's name)",
                           hint="name the layer before it (--explain lists the layers TFLite keeps), or leave it out")
    if missing:
        raise EdgekitError(f"no TFLite ops belong to layer(s) {', '.join(missing)}",
                           hint="use layer names as --explain lists them")
    return found


def layer_test(namer: str, layer_names: list[str]) -> Callable[[str, str], bool]:
    """Whether an op's tensor comes from a layer: a Keras layer's scope, or a PyTorch module by its
    attribute path (``down`` holds ``down.0``; ``torch_layer`` names it ``down.0 (Conv2d)``)."""
    if namer != MODULES:
        return in_layer
    from .from_torch import torch_layer

    def belongs(tensor: str, layer: str) -> bool:
        # an op fused from several modules names each (a Conv2d with its ReLU: ``...ReLU_act2;;...Conv2d_conv2;1``)
        for part in [p for p in tensor.split(";") if "/" in p] or [tensor]:
            named = torch_layer(part, layer_names)
            path = named.split(" (")[0]
            if layer in (named, part) or within(path, layer):
                return True
        return False

    return belongs


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)
