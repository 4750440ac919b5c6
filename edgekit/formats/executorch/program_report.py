"""What a lowered ExecuTorch program computes, read back from it (child side): which ops XNNPACK
runs (placement), in what precision, and each layer's error against the float program."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ...conversion.layer_names import traced_modules
from .ops import NOT_COMPUTE, QDQ, TAIL_OPS, WEIGHTED, op_name


def _layer(node: Any, named: dict[str, str], ops_by_name: bool = False) -> str | None:
    """The user's layer a node was traced inside: its innermost module path below the wrapper,
    by ONNX node name on a module rebuilt from ONNX; None for an op of the model's own forward,
    or with ``ops_by_name`` (a graph before lowering, whose names ``--keep-float`` takes) its
    traced name (``cat``, ``tanh_1``)."""
    paths = [p[len("inner."):] for p in traced_modules(node) if p.startswith("inner.")]
    if paths:
        return named.get(paths[-1], paths[-1])
    return node.name if ops_by_name and any(p == "inner" for p in traced_modules(node)) else None


def weighted_layers(graph_module: Any, named: dict[str, str]) -> list[str]:
    """Layers with weights (convolutions, linear layers, matmuls), in graph order."""
    found = [_layer(node, named, ops_by_name=True) for node in graph_module.graph.nodes
             if node.op == "call_function" and op_name(node.target) in WEIGHTED | {"conv2d", "conv1d", "matmul"}]
    return list(dict.fromkeys(layer for layer in found if layer))


def placement_of(graph_module: Any, named: dict[str, str] | None = None) -> dict[str, Any]:
    """The ops inside XNNPACK delegate calls (counted from each lowered module's original graph),
    the ops left outside them (portable kernels), by op name, and each weighted layer's precision
    as lowered: ``int8`` where its weight comes out of a dequantize op, else ``float``."""
    delegated: Counter[str] = Counter()
    portable: Counter[str] = Counter()
    layers: dict[str, str] = {}
    partitions = 0

    def weighted(node: Any, where: str) -> None:
        layer = _layer(node, named or {})
        if layer is not None and len(node.args) > 1:
            layers[layer] = ("int8" if _weight_quantized(node) else "float") + where

    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        if name == "executorch_call_delegate":
            partitions += 1
            lowered = getattr(graph_module, node.args[0].target)
            for inner in lowered.original_module.graph.nodes:
                if inner.op == "call_function":
                    delegated[op_name(inner.target)] += 1
                    if op_name(inner.target) in WEIGHTED:
                        weighted(inner, "")
        elif name != "getitem":
            portable[name] += 1
            if name in WEIGHTED:
                weighted(node, " (portable)")
    return {"partitions": partitions, "delegated": dict(sorted(delegated.items())),
            "portable": dict(sorted(portable.items())), "delegated_ops": sum(delegated.values()),
            "portable_ops": sum(portable.values()), "layers": dict(sorted(layers.items()))}


def _weight_quantized(node: Any) -> bool:
    """Whether a weighted op's weight comes out of a dequantize op (int8 weights)."""
    weight = node.args[1] if len(node.args) > 1 else None
    return "dequantize" in str(getattr(weight, "target", ""))


def precision_of(program: Any, named: dict[str, str] | None = None) -> dict[str, Any]:
    """What the lowered program (an edge ``ExportedProgram``) computes in, as ``Precision`` counts it (``details.precision``).

    Inside an XNNPACK partition an op is integer when its weight is int8 (weighted ops) or when it
    reads dequantized values and its result is quantized again, directly or through the ops
    fused after it (conv -> relu -> quantize); every other op there runs in float. Ops left
    outside the delegate run on ExecuTorch's portable kernels in float; those after the last
    integer op that only lead to the outputs (a final softmax) are the float tail. Data movement
    (``NEUTRAL_OPS``) is neither."""
    from ..precision import Precision

    named = named or {}
    graph_module = program.graph_module
    precision = Precision()
    float_ops: list[tuple[Any, dict[str, Any]]] = []  # portable ops
    at_end: list[tuple[Any, dict[str, Any]]] = []  # float ops inside a delegate that only lead to its outputs
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        if name == "executorch_call_delegate":
            inner = getattr(graph_module, node.args[0].target).original_module
            constants = _constants(inner)
            for op in inner.graph.nodes:
                kind = op_name(op.target) if op.op == "call_function" else ""
                if not kind or kind in NOT_COMPUTE:
                    continue
                weighted = kind in WEIGHTED
                if (_weight_quantized(op) if weighted else _reads_and_writes_quantized(op)):
                    precision.int8_ops += 1
                    precision.int8_weighted_ops += weighted
                    precision.int8_weight_bytes += _weight_bytes(op, constants) if weighted else 0
                else:
                    precision.float_weight_bytes += _weight_bytes(op, constants) if weighted else 0
                    entry = {"op": kind, "layer": _layer(op, named) or kind, "tensor": op.name, "tail": False}
                    precision.float_ops.append(entry)
                    if kind in TAIL_OPS and _only_reaches_outputs(op):  # at the delegate's end: the tail if the
                        at_end.append((node, entry))  # delegate's results only reach the outputs
        elif name not in NOT_COMPUTE:
            precision.float_weight_bytes += _weight_bytes(node, _constants(program)) if name in WEIGHTED else 0
            entry = {"op": name, "layer": _layer(node, named) or name, "tensor": node.name, "tail": False}
            precision.float_ops.append(entry)
            float_ops.append((node, entry))
    tail: set[Any] = set()
    portable = {node for node, _ in float_ops}
    for node in reversed(list(graph_module.graph.nodes)):  # a portable op whose results only reach outputs
        if node.op == "call_function" and (node in portable and op_name(node.target) in TAIL_OPS
                                           or op_name(node.target) in NOT_COMPUTE):
            if all(user.op == "output" or user in tail for user in node.users):
                tail.add(node)
    for node, entry in float_ops:
        entry["tail"] = node in tail
    for delegate_call, entry in at_end:
        entry["tail"] = all(user in tail for user in delegate_call.users)
    if not precision.int8_ops:  # a float program: no tail to tell apart
        for entry in precision.float_ops:
            entry["tail"] = False
    return {"label": precision.label, "record": precision.record(), "float_ops": precision.float_ops}


def per_layer_report(reference: Any, quantized: Any, samples: list[tuple[Any, ...]],
                     named: dict[str, str]) -> list[dict[str, Any]]:
    """Each op's SQNR in the quantized graph against the float one, worst first (``--explain``,
    and where the search looks first). The float side is the prepared graph (batch norms folded
    as in the quantized one, observers passing values through), so both hold the same ops by
    the same node names; the quantized side's value is what the next op reads: after the
    quantize and dequantize that follow an op, where they do."""
    import torch

    from ..building import worst_layers

    order = {node.name: i for i, node in enumerate(quantized.graph.nodes)}
    ops = {node.name: node for node in quantized.graph.nodes if node.op == "call_function"
           and op_name(node.target) not in NOT_COMPUTE and _layer(node, named, ops_by_name=True)}
    seen_as: dict[str, str] = {}  # quantized graph node -> the op whose value it holds
    for name, node in ops.items():
        seen_as[name] = name
        users = list(node.users)
        if len(users) == 1 and op_name(users[0].target).startswith("quantize"):
            after = [u for u in users[0].users if op_name(u.target).startswith("dequantize")]
            if len(after) == 1:
                seen_as = {k: v for k, v in seen_as.items() if k != name}
                seen_as[after[0].name] = name
    float_names = {node.name for node in reference.graph.nodes} & set(ops)
    signal: dict[str, float] = dict.fromkeys(float_names, 0.0)
    noise: dict[str, float] = dict.fromkeys(float_names, 0.0)

    class Recorder(torch.fx.Interpreter):
        def __init__(self, module: Any, keep: dict[str, str]) -> None:
            super().__init__(module)
            self.keep, self.values = keep, {}

        def run_node(self, node: Any) -> Any:
            value = super().run_node(node)
            if node.name in self.keep and isinstance(value, torch.Tensor) and value.is_floating_point():
                self.values[self.keep[node.name]] = value.detach().double()
            return value

    with torch.no_grad():
        for sample in samples:
            expected = Recorder(reference, {n: n for n in float_names})
            expected.run(*sample)
            got = Recorder(quantized, {k: v for k, v in seen_as.items() if v in float_names})
            got.run(*sample)
            for name, value in expected.values.items():
                other = got.values.get(name)
                if other is not None and other.shape == value.shape:
                    signal[name] += float((value ** 2).sum())
                    noise[name] += float(((value - other) ** 2).sum())
    rows = []
    for name in float_names:
        if signal[name] == 0.0 and noise[name] == 0.0:
            continue
        sqnr = float(10 * np.log10(signal[name] / noise[name])) if noise[name] > 0 and signal[name] > 0 else None
        rows.append({"layer": _layer(ops[name], named, ops_by_name=True), "op": op_name(ops[name].target), "tensor": name,
                     "sqnr_db": sqnr, "order": order[name]})
    return worst_layers(rows)


def _weight_bytes(node: Any, constants: set[str]) -> int:
    """The bytes of a weighted op's weight: the int8 tensor its dequantize reads, or the float one;
    0 where the second operand is an activation (attention's ``q @ k``), not one of the program's
    ``constants`` (its lifted parameters, buffers and constant tensors)."""
    weight = node.args[1] if len(node.args) > 1 else None
    if weight is not None and "dequantize" in str(getattr(weight, "target", "")):
        weight = weight.args[0]
    if getattr(weight, "op", None) != "get_attr" and getattr(weight, "name", None) not in constants:
        return 0
    value = getattr(weight, "meta", {}).get("val")
    return int(value.numel() * value.element_size()) if value is not None and hasattr(value, "numel") else 0


def _constants(program: Any) -> set[str]:
    """The placeholders of an exported program that are its parameters, buffers and constants."""
    specs = getattr(getattr(program, "graph_signature", None), "input_specs", None) or []
    return {spec.arg.name for spec in specs if str(getattr(spec.kind, "name", spec.kind)) != "USER_INPUT"}


def _only_reaches_outputs(node: Any) -> bool:
    """Whether every use of an op's result leads to the graph's output through float ops a tail may
    hold only."""
    return all(user.op == "output" or (user.op == "call_function" and op_name(user.target) in TAIL_OPS
                                       and not op_name(user.target).startswith("quantize")
                                       and _only_reaches_outputs(user)) for user in node.users)


def _reads_and_writes_quantized(node: Any) -> bool:
    """Whether an op reads only dequantized values (directly or through the ops fused before it)
    and its result is quantized again (directly or through the ops fused after it)."""
    def compute(n: Any) -> bool:
        return n.op == "call_function" and op_name(n.target) not in QDQ

    def upstream(n: Any) -> bool:
        args = [a for a in n.all_input_nodes if a.op == "call_function"]
        return bool(args) and all(op_name(a.target).startswith("dequantize")
                                  or (compute(a) and len(a.users) == 1 and upstream(a)) for a in args)

    def downstream(n: Any) -> bool:
        users = list(n.users)
        return bool(users) and all(
            (u.op == "call_function" and op_name(u.target).startswith("quantize"))
            or (compute(u) and len(u.all_input_nodes) == 1 and downstream(u)) for u in users)

    return upstream(node) and downstream(node)


