"""MatMul/Gemm with constant weights (and a following bias Add) as ``F.linear``: the form that
PyTorch's quantizers (PT2E for litert-torch, coremltools') recognise as a fully connected layer."""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph import Args, Node, Step
from .registry import _F, _run_node

# --- fusing constant matrices into linear layers ---------------------------------------------------


def _fuse_linear(nodes: list[Node], constants: dict[str, np.ndarray], graph_outputs: set[str],
                 ranks: dict[str, int]) -> list[Step]:
    """MatMul by a constant matrix (+ Add of a constant vector) and Gemm with constant weights become
    ``F.linear`` with a pre-transposed weight constant, the form quantizers recognise."""
    consumers: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            consumers[name] = consumers.get(name, 0) + 1
    steps: list[Step] = []
    skip: set[int] = set()
    for index, node in enumerate(nodes):
        if index in skip:
            continue
        linear = _as_linear(node, constants)
        if linear is not None:
            weight, bias = linear
            follower = nodes[index + 1] if index + 1 < len(nodes) else None
            out = node.outputs[0]
            if bias is None and follower is not None and follower.op == "Add" and consumers.get(out) == 1 \
                    and out not in graph_outputs:
                other = [i for i in follower.inputs if i != out]
                vector = constants.get(other[0]) if len(other) == 1 else None
                # only a bias that broadcasts along the last axis without adding axes
                if vector is not None and vector.size == weight.shape[0] and vector.ndim >= 1 \
                        and vector.shape[-1] == weight.shape[0] and vector.ndim <= ranks.get(out, 0):
                    bias, node = vector.reshape(-1), Node("Linear", node.name, node.inputs[:1], follower.outputs,
                                                          {}, node.opset)
                    skip.add(index + 1)
            steps.append(_linear_step(node, weight, bias, constants))
            continue
        steps.append(Step(node, lambda a, n=node: _run_node(n, a), [i for i in node.inputs if i]))
    return steps


def _as_linear(node: Node, constants: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(weight [out, in], bias [out] or None) when the node is a linear layer with constant weights."""
    if node.op == "MatMul" and node.inputs[0] not in constants:
        w = constants.get(node.inputs[1])
        if w is not None and w.ndim == 2 and w.dtype == np.float32:
            return np.ascontiguousarray(w.T), None
    if node.op == "Gemm" and node.inputs[0] not in constants and not node.attrs.get("transA", 0):
        w = constants.get(node.inputs[1])
        c = constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if w is None or w.dtype != np.float32 or (len(node.inputs) > 2 and node.inputs[2] and c is None):
            return None
        weight = (w if node.attrs.get("transB", 0) else w.T) * np.float32(node.attrs.get("alpha", 1.0))
        bias = None
        if c is not None:
            if c.size not in (1, weight.shape[0]) or (c.ndim == 2 and c.shape[0] != 1):
                return None
            bias = np.broadcast_to(c.reshape(-1) * np.float32(node.attrs.get("beta", 1.0)),
                                   (weight.shape[0],)).astype(np.float32)
        return np.ascontiguousarray(weight, dtype=np.float32), bias
    return None


def _linear_step(node: Node, weight: np.ndarray, bias: np.ndarray | None,
                 constants: dict[str, np.ndarray]) -> Step:
    weight_name, bias_name = f"{node.name}/linear_weight", f"{node.name}/linear_bias"
    constants[weight_name] = weight
    fused = Node("Linear", node.name, [node.inputs[0], weight_name], node.outputs, {}, node.opset)
    if bias is not None:
        constants[bias_name] = np.ascontiguousarray(bias, dtype=np.float32)
        fused.inputs.append(bias_name)

    def run(a: Args) -> list[Any]:
        return [_F().linear(a.t(0), a.t(1), a.t(2) if a.has(2) else None)]

    return Step(fused, run, list(fused.inputs))
