"""Child side of the simulation: the float ONNX graph with every format's INT8 grid applied in
float arithmetic, so that ONNX Runtime runs a precision plan in one forward pass.

What every INT8 format does to a layer, written into the graph:

* **weights**: per output channel, symmetric, on the integer grid [-127, 127] (TFLite's rule; ONNX
  S8S8, CoreML and XNNPACK use the same grid): each weight initializer is replaced by its
  dequantized values, so no runtime can fuse it back into integer kernels;
* **activations**: per tensor, asymmetric int8 in [-128, 127], the range from the float model on
  the calibration samples (min/max, widened to hold 0), as a QuantizeLinear/DequantizeLinear pair
  where the tensor is written: after the op, or after the Relu/Clip the op fuses. Data movement
  (Reshape, Transpose, MaxPool, ...) passes quantized values through untouched.

A layer the plan keeps in float keeps its weights and writes a float tensor. The ranges come from
one pass over the calibration samples and are reused by every try, so a try costs building a graph
(milliseconds) and the forward passes that judge it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..conversion.layer_names import LayerNames
from .estimators import MINMAX

# ops that compute: their outputs are requantized (or their fused activation's are)
COMPUTE_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Concat", "AveragePool",
               "GlobalAveragePool", "ReduceMean", "Sigmoid", "Tanh", "Softmax", "HardSigmoid", "HardSwish",
               "LeakyRelu", "PRelu", "Resize", "BatchNormalization", "InstanceNormalization", "LayerNormalization",
               "Pow", "Sqrt", "Exp", "Log", "Erf", "Gelu", "Einsum", "Sum", "Mean", "Max", "Min", "Elu", "Selu",
               "Softplus", "Reciprocal", "ReduceSum", "ReduceMax", "LSTM", "GRU", "RNN"}
FUSED_ACTIVATIONS = {"Relu", "Clip"}  # folded into the op before them: the pair goes after them
# weight initializer input and its output-channel axis, by op (Gemm's depends on transB)
WEIGHT_INPUT = {"Conv": (1, 0), "ConvTranspose": (1, 1), "MatMul": (1, -1), "Gemm": (1, None)}
WEIGHT_BITS = 127  # symmetric [-127, 127]
_FLOAT_TYPES = {1}  # TensorProto.FLOAT: the activations the formats quantize


BATCH = 8  # samples per forward pass while every intermediate tensor is an output: memory stays a few batches of them
# at most this many bytes of intermediate tensors per forward pass: a model whose every tensor of one sample
# is large (a 256x256 U-Net) runs fewer samples at a time (``fitting_batch``), so memory stays bounded
INTERMEDIATES_BYTES = 256 * 2**20


def fixed_batch(session: Any) -> bool:
    """Whether the graph takes one sample per pass: an input whose first axis is fixed to 1 (a
    model exported with batch 1, or one with no batch axis, given one at its edge)."""
    return any(i.shape and i.shape[0] == 1 for i in session.get_inputs())


def fitting_batch(per_sample_bytes: int, most: int = BATCH) -> int:
    """Samples per pass whose intermediate tensors fit in ``INTERMEDIATES_BYTES`` (at least one, at
    most ``most``)."""
    return max(1, min(most, INTERMEDIATES_BYTES // max(1, per_sample_bytes)))


def activation_ranges(float_onnx: str, calibration_npy: str, output: str, batch: int = BATCH,
                      layer_names: list[str] | None = None, estimator: str = MINMAX) -> dict[str, Any]:
    """The range of every float tensor of the graph over the calibration samples, as the format's
    quantizer would set it (``estimators.py``: min and max, or PT2E's histogram search), written
    to ``output`` (JSON) and returned with the number of samples and each plan layer's relative
    cost (``costs.layer_costs``, from the tensors' shapes in the first batch)."""
    import onnx
    import onnxruntime as ort

    from ..formats.building import read_samples
    from .estimators import estimator as new_estimator

    model = onnx.load(float_onnx)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types unknown: every node output is read, kept if float
        pass
    types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.value_info, *model.graph.output,
                                                            *model.graph.input]}
    known = {o.name for o in model.graph.output}
    wanted = [out for node in model.graph.node for out in node.output
              if out and out not in known and types.get(out, 1) in _FLOAT_TYPES]
    for name in wanted:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    samples = read_samples(calibration_npy)
    feeds_by_name = _feeds(samples, [i.name for i in session.get_inputs()])
    names = [o.name for o in session.get_outputs()]
    total = len(next(iter(feeds_by_name.values())))
    # what a quantizer observes: every op's output that computes (or the activation it fuses) and the inputs
    observed = {out for node in model.graph.node if node.op_type in COMPUTE_OPS | FUSED_ACTIVATIONS
                for out in node.output} | set(feeds_by_name)
    ranges = new_estimator(estimator, observed)
    shapes: dict[str, tuple[int, ...]] = {}
    start, step = 0, 1  # one sample first: its tensors' size sets how many samples a pass holds
    while start < total:
        feeds = {k: np.asarray(v[start:start + step]) for k, v in feeds_by_name.items()}
        values = session.run(names, feeds)
        if not start and not fixed_batch(session):
            step = fitting_batch(sum(np.asarray(v).nbytes for v in values), batch)
        start += len(next(iter(feeds.values())))
        for name, value in [*feeds.items(), *zip(names, values)]:
            value = np.asarray(value)
            if name not in shapes:
                shapes[name] = tuple(int(d) for d in value.shape)
            if value.dtype.kind != "f" or not value.size:
                continue
            finite = value[np.isfinite(value)]
            if finite.size:
                ranges.update(name, finite)
    found = {"samples": total, "estimator": estimator, "ranges": ranges.ranges()}
    Path(output).write_text(json.dumps(found))
    from .costs import layer_costs, layer_links

    shapes.update({k: tuple(int(d) for d in np.asarray(v[:1]).shape) for k, v in feeds_by_name.items()})
    names = LayerNames.of_onnx(model, layer_names or ())
    if not layer_names and not names.by_module:  # a graph naming its own nodes: each node is a layer
        names = LayerNames(tuple(n.name for n in model.graph.node if n.name), names.module_paths)
    return {"samples": total, "tensors": len(found["ranges"]), "module_paths": dict(names.module_paths),
            "costs": layer_costs(model, shapes, names.plan_layer), "links": layer_links(model, shapes, names.plan_layer)}


def _feeds(samples: dict[str, Any], inputs: list[str]) -> dict[str, Any]:
    if "" in samples:
        return {inputs[0]: samples[""]}
    return {name: samples[name] for name in inputs if name in samples}


def simulated_graph(float_onnx: str, ranges_json: str, output: str, floats: list[str],
                    layer_names: list[str], rules: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the simulated INT8 graph of ``float_onnx`` to ``output`` with the layers in
    ``floats`` left in float; return what it quantized, by layer (the plan's vocabulary).
    ``rules``: a format's grid (``QuantGrid.rules``): ``tied_ops``, the ops whose inputs and output
    its quantizer puts on one scale (each of their int8 tensors takes the union of all their
    ranges); ``symmetric``, activations on a symmetric grid around 0 (Core ML's);
    ``fixed_outputs``, op types whose int8 output grid the runtime fixes; ``quantized_ops``, the
    only op types its quantizer quantizes (the others compute in float)."""
    import onnx

    model = onnx.load(float_onnx)
    simulation = _Simulation(model.graph, json.loads(Path(ranges_json).read_text())["ranges"], set(floats),
                             LayerNames.for_plan(model, layer_names), rules or {})
    found = simulation.weights()
    pairs = simulation.activations()
    _sort_topologically(model.graph)
    onnx.save(model, output)
    # the activations a format's grid put elsewhere than the common grid (0: the same graph)
    return {"pairs": pairs, "regridded": simulation.regridded, **found}


class _Simulation:
    """One graph being rewritten: its layers, readers and ranges, and the plan's float layers."""

    def __init__(self, graph: Any, ranges: dict[str, list[float]], kept: set[str], names: LayerNames,
                 rules: dict[str, Any]) -> None:
        self.graph, self.ranges, self.kept = graph, ranges, kept
        self.tied_ops = set(rules.get("tied_ops") or ())
        self.symmetric = bool(rules.get("symmetric"))
        self.fixed = {op: (float(scale), int(zero)) for op, scale, zero in rules.get("fixed_outputs") or ()}
        only = rules.get("quantized_ops")
        self.computes_int8 = COMPUTE_OPS if only is None else COMPUTE_OPS & set(only)
        self.initializers = {i.name: i for i in graph.initializer}
        self.readers: dict[str, list[Any]] = {}
        for node in graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.layers = {node.name: names.plan_layer(node.name or node.output[0]) for node in graph.node}
        self.regridded = 0

    def int8(self, node: Any) -> bool:
        """Whether ``node`` computes in int8: an op the format's quantizer quantizes, of a layer the
        plan does not keep float."""
        return node.op_type in self.computes_int8 and self.layers[node.name] not in self.kept

    def weights(self) -> dict[str, Any]:
        """Each int8 layer's weights on the grid; the layers by precision."""
        from onnx import numpy_helper

        weighted, quantized, floats = [], set(), set()
        for node in self.graph.node:
            if node.op_type not in WEIGHT_INPUT or len(node.input) < 2 or node.input[1] not in self.initializers:
                continue
            layer = self.layers[node.name]
            if layer:  # a weighted op no layer name covers is int8 in every plan
                weighted.append(layer)
            if layer in self.kept:
                floats.add(layer)
                continue
            tensor = self.initializers[node.input[1]]
            if tensor.data_type not in _FLOAT_TYPES:
                continue
            values = numpy_helper.to_array(tensor).astype(np.float64)
            tensor.CopyFrom(numpy_helper.from_array(_on_grid(values, _weight_axis(node, values)).astype(np.float32),
                                                    tensor.name))
            quantized.add(layer or node.name)
        return {"weighted_layers": list(dict.fromkeys(weighted)), "float_layers": sorted(floats),
                "int8_layers": sorted(quantized - floats)}

    def read_in_int8(self, tensor: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether an int8 op reads ``tensor``, directly or through data movement."""
        for reader in self.readers.get(tensor, []):
            if self.int8(reader):
                return True
            if reader.op_type not in COMPUTE_OPS and reader.output and reader.output[0] not in seen:
                if self.read_in_int8(reader.output[0], seen | {reader.output[0]}):
                    return True
        return False

    def quantized_tensors(self) -> list[tuple[Any, int, str]]:
        """(writer, output index, tensor) of every activation an int8 op writes or reads; a graph
        input has no writer (None)."""
        outputs = {o.name for o in self.graph.output}
        found: list[tuple[Any, int, str]] = []
        for node in list(self.graph.node):
            if node.op_type not in COMPUTE_OPS:
                continue
            for index, tensor in enumerate(node.output):
                if not tensor or tensor not in self.ranges:
                    continue
                writer = node
                after = self.readers.get(tensor, [])
                if len(after) == 1 and after[0].op_type in FUSED_ACTIVATIONS and tensor not in outputs:
                    writer, index, tensor = after[0], 0, after[0].output[0]  # Conv -> Relu: after the Relu
                    if tensor not in self.ranges:
                        continue
                if self.int8(node) or self.read_in_int8(tensor):
                    found.append((writer, index, tensor))
        for value in self.graph.input:  # the model's input, where an int8 op reads it (int8 IO)
            if value.name in self.ranges and value.name not in self.initializers and self.read_in_int8(value.name):
                found.append((None, 0, value.name))
        return found

    def activations(self) -> int:
        """A QuantizeLinear/DequantizeLinear pair where each quantized activation is written."""
        from onnx import helper, numpy_helper

        inner_reads = _read_by_subgraphs(self.graph)
        added = [entry for entry in self.quantized_tensors() if entry[2] not in inner_reads]
        tied = self.tied_ranges({tensor for _, _, tensor in added})
        grids = {tensor: self.fixed[node.op_type] if node is not None and node.op_type in self.fixed and self.int8(node)
                 else _activation_grid(*tied.get(tensor, self.ranges[tensor]), symmetric=self.symmetric)
                 for node, _, tensor in added}
        self.regridded = sum(1 for _, _, tensor in added if grids[tensor] != _activation_grid(*self.ranges[tensor]))
        # ops the common grid runs in int8 that this format's quantizer leaves float
        self.regridded += sum(1 for node in self.graph.node if node.op_type in COMPUTE_OPS - self.computes_int8
                              and self.layers[node.name] not in self.kept)
        for node, index, tensor in added:
            scale, zero = grids[tensor]
            if node is None:  # a graph input keeps its name: its readers read the pair's output instead
                source, result = tensor, f"{tensor}__sim"
                for reader in self.readers.get(tensor, []):
                    if reader.op_type not in COMPARISONS:
                        reader.input[:] = [result if name == tensor else name for name in reader.input]
            else:
                source, result = f"{tensor}__float", tensor
                node.output[index] = source
                for reader in self.readers.get(tensor, []):
                    if reader.op_type in COMPARISONS:
                        reader.input[:] = [source if name == tensor else name for name in reader.input]
            self.graph.initializer.extend([numpy_helper.from_array(np.array(scale, np.float32), f"{tensor}__scale"),
                                           numpy_helper.from_array(np.array(zero, np.int8), f"{tensor}__zero")])
            self.graph.node.extend([
                helper.make_node("QuantizeLinear", [source, f"{tensor}__scale", f"{tensor}__zero"], [f"{tensor}__q"],
                                 name=f"{tensor}__quantize"),
                helper.make_node("DequantizeLinear", [f"{tensor}__q", f"{tensor}__scale", f"{tensor}__zero"],
                                 [result], name=f"{tensor}__dequantize")])
        return len(added)


    def tied_ranges(self, quantized: set[str]) -> dict[str, tuple[float, float]]:
        """The range each int8 tensor takes where a tied op (``tied_ops``) reads or writes it: the
        union of the ranges of the op's inputs (where each is quantized, through data movement)
        and its output; a tensor in two such groups takes the union of both."""
        writers = {out: node for node in self.graph.node for out in node.output}

        def source(tensor: str) -> str | None:  # the quantized tensor a data-movement chain starts from
            seen = set()
            while tensor not in quantized:
                node = writers.get(tensor)
                if node is None or node.op_type in COMPUTE_OPS or tensor in seen or not node.input:
                    return None
                seen.add(tensor)
                tensor = node.input[0]
            return tensor

        def written(tensor: str) -> str:  # an op's output, or its fused activation's where that is quantized
            after = self.readers.get(tensor, [])
            return after[0].output[0] if len(after) == 1 and after[0].op_type in FUSED_ACTIVATIONS \
                and after[0].output[0] in quantized else tensor

        groups = []
        for node in self.graph.node:
            if node.op_type not in self.tied_ops or not self.int8(node) or not node.output:
                continue
            members = {found for name in node.input if name and (found := source(name))}
            if written(node.output[0]) in quantized:
                members.add(written(node.output[0]))
            if len(members) > 1:
                groups.append(members)
        tied: dict[str, tuple[float, float]] = {}
        for _ in range(2):  # a tensor in two groups: the second pass carries the first's union over
            for members in groups:
                low = min(tied.get(t, self.ranges[t])[0] for t in members if t in self.ranges)
                high = max(tied.get(t, self.ranges[t])[1] for t in members if t in self.ranges)
                tied.update({t: (low, high) for t in members})
        return tied


def _weight_axis(node: Any, values: np.ndarray) -> int:
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else values.ndim - 1
    axis = WEIGHT_INPUT[node.op_type][1]
    return axis % values.ndim


def _on_grid(values: np.ndarray, axis: int) -> np.ndarray:
    """Per-channel symmetric int8 on [-127, 127], dequantized."""
    moved = np.moveaxis(values, axis, 0).reshape(values.shape[axis], -1)
    peak = np.abs(moved).max(axis=1)
    scale = np.where(peak > 0, peak / WEIGHT_BITS, 1.0)
    grid = np.clip(np.round(moved / scale[:, None]), -WEIGHT_BITS, WEIGHT_BITS) * scale[:, None]
    shape = list(np.moveaxis(values, axis, 0).shape)
    return np.moveaxis(grid.reshape(shape), 0, axis)


def _activation_grid(low: float, high: float, symmetric: bool = False) -> tuple[float, int]:
    """Scale and int8 zero point of an asymmetric per-tensor range holding 0 (as TFLite nudges it);
    ``symmetric``: [-127, 127] around 0, the zero point 0."""
    low, high = min(low, 0.0), max(high, 0.0)
    if symmetric:
        peak = max(-low, high)
        return (float(peak / 127.0) if peak > 0 else 1.0), 0
    scale = (high - low) / 255.0 if high > low else 1.0
    zero = int(np.clip(np.round(-128 - low / scale), -128, 127))
    return float(scale), zero


def _outer_reads(node: Any) -> set[str]:
    """The values a node's subgraphs (a Loop's body, an If's branches) read from the graph around
    them: inputs too, though not listed as such (a Loop placed before the writer of a value its
    body reads made ONNX Runtime abort)."""
    found: set[str] = set()
    for attribute in node.attribute:
        for graph in [attribute.g] if attribute.type == attribute.GRAPH else list(attribute.graphs):
            local = {v.name for v in graph.input} | {i.name for i in graph.initializer} | {""}
            for inner in graph.node:
                found.update(n for n in [*inner.input, *_outer_reads(inner)] if n not in local)
                local.update(inner.output)
    return found


# a comparison has no int8 kernel: every format's build compares the float value (a mask sentinel,
# Keras Masking(-1), a rounding step off itself made every padded step count as data)
COMPARISONS = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"}
# ops ONNX Runtime's QDQ propagation moves a DequantizeLinear across
PROPAGATED = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Gather", "Expand"}


def _read_by_subgraphs(graph: Any) -> set[str]:
    """The values a Loop/If body reads from outside, and those they are moved from: they stay
    float. ONNX Runtime's optimizer propagates a QDQ pair across data movement and then aborts
    on the subgraph's read of the renamed value (and each format's build keeps the body float)."""
    writers = {out: node for node in graph.node for out in node.output}
    pending = [name for node in graph.node for name in _outer_reads(node)]
    found: set[str] = set()
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        writer = writers.get(name)
        if writer is not None and writer.op_type in PROPAGATED and writer.input:
            pending.append(writer.input[0])
    return found


def _sort_topologically(graph: Any) -> None:
    """Nodes in an order where every input is written before it is read (the pairs were appended)."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(graph.node)
    ordered = []
    reads = {id(node): [*node.input, *_outer_reads(node)] for node in pending}
    while pending:
        progressed = []
        for node in pending:
            if all(name in available for name in reads[id(node)]):
                ordered.append(node)
                available.update(node.output)
            else:
                progressed.append(node)
        if len(progressed) == len(pending):  # a reference to something no node writes: keep the rest as they were
            ordered += progressed
            break
        pending = progressed
    graph.ClearField("node")
    graph.node.extend(ordered)


def layer_report(float_onnx: str, simulated_onnx: str, samples_npy: str, layer_names: list[str],
                 limit: int = 64) -> list[dict[str, Any]]:
    """Each computing layer's output in the simulation against float (SQNR, dB) on the first
    ``limit`` samples: where the INT8 grid costs most, for the search to rank layers by."""
    import onnx
    import onnxruntime as ort

    from ..formats.building import read_samples

    float_model = onnx.load(float_onnx)
    names = LayerNames.for_plan(float_model, layer_names)
    tensors = []
    for position, node in enumerate(float_model.graph.node):
        layer = names.plan_layer(node.name or node.output[0])
        # every op that computes, weights or not: a Concat joining two quantities, a Sigmoid, a Softmax
        if node.op_type in COMPUTE_OPS and node.output and node.output[0] and layer:
            tensors.append((node.output[0], layer, node.op_type, position))
    if not tensors:
        return []
    samples = read_samples(samples_npy)
    sessions = []
    for path in (float_onnx, simulated_onnx):
        model = onnx.load(path)
        known = {o.name for o in model.graph.output}
        for tensor, *_ in tensors:
            if tensor not in known:
                model.graph.output.append(onnx.helper.make_empty_tensor_value_info(tensor))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sessions.append(ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]))
    feeds_by_name = _feeds(samples, [i.name for i in sessions[0].get_inputs()])
    total = min(limit, len(next(iter(feeds_by_name.values()))))
    names = [t for t, *_ in tensors]
    noise, signal = np.zeros(len(names)), np.zeros(len(names))
    start, step = 0, 1  # summed batch by batch: every weighted layer's output is held for one only
    while start < total:
        feeds = {k: np.asarray(v[start:min(start + step, total)]) for k, v in feeds_by_name.items()}
        reference, got = (session.run(names, feeds) for session in sessions)
        if not start and not fixed_batch(sessions[0]):  # both graphs' tensors, and their float64 copies below
            step = fitting_batch(6 * sum(np.asarray(v).nbytes for v in reference))
        start += len(next(iter(feeds.values())))
        for i, (want, have) in enumerate(zip(reference, got)):
            want, have = np.asarray(want, np.float64), np.asarray(have, np.float64)
            noise[i] += float(np.sum((want - have) ** 2))
            signal[i] += float(np.sum(want ** 2))
    rows = []
    for i, (tensor, layer, op, position) in enumerate(tensors):
        sqnr = 10 * np.log10(signal[i] / noise[i]) if noise[i] > 0 and signal[i] > 0 else (200.0 if signal[i] else 0.0)
        rows.append({"layer": layer, "op": op, "tensor": tensor, "sqnr_db": round(float(sqnr), 3), "order": position})
    return rows
