"""Spelled-out GELU and LayerNorm rebuilt as the single ops they are.

Exporters before ONNX opset 20 (GELU) and 17 (LayerNormalization) write these as chains of
elementwise ops: ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` and ``(x - mean) / Sqrt(var + eps)``.
Rebuilt op by op, the TFLite converter lowers Erf to a 40-op polynomial (each op its own int8
rounding) and Sqrt/Div to ops with no int8 kernel; rebuilt as ``F.gelu`` and ``F.layer_norm``,
litert-torch and coremltools emit their GELU and layer-norm ops, which their int8 kernels and
CoreML's ``gelu``/``layer_norm`` run. The function is the same; only the op count changes.

Each match needs every intermediate value to be used by the pattern alone (never a graph
output); constants must have the pattern's values (1/sqrt(2), 1, 0.5; one axis for the means).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .graph import Args, Node
from .registry import _F, op

SQRT2 = math.sqrt(2.0)


@op("edgekit.Gelu")
def _gelu(a: Args) -> Any:
    return _F().gelu(a.t(0))


@op("edgekit.LayerNorm")
def _layer_norm(a: Args) -> Any:
    x = a.t(0)
    return _F().layer_norm(x, (int(x.shape[-1]),), a.t(1) if a.has(1) else None, a.t(2) if a.has(2) else None,
                           float(a.attr("epsilon")))


def fuse_patterns(nodes: list[Node], constants: dict[str, np.ndarray], graph_outputs: set[str],
                  ranks: dict[str, int]) -> list[Node]:
    """``nodes`` with each spelled-out GELU and LayerNorm replaced by one node."""
    producer = {o: n for n in nodes for o in n.outputs if o}
    consumers: dict[str, list[Node]] = {}
    for node in nodes:
        for name in node.inputs:
            consumers.setdefault(name, []).append(node)
    replaced: dict[int, Node] = {}  # id of the pattern's last node -> the fused node
    removed: set[int] = set()
    finder = _Finder(producer, consumers, constants, graph_outputs, ranks)
    for node in nodes:
        if id(node) in removed:
            continue
        for match in (finder.gelu, finder.layer_norm):
            found = match(node)
            if found is not None and not any(id(n) in removed for n in found[0]):
                covered, fused = found
                removed.update(id(n) for n in covered)
                replaced[id(covered[-1])] = fused
                break
    result = []
    for node in nodes:
        if id(node) in replaced:
            result.append(replaced[id(node)])
        elif id(node) not in removed:
            result.append(node)
    return result


class _Finder:
    def __init__(self, producer: dict[str, Node], consumers: dict[str, list[Node]], constants: dict[str, np.ndarray],
                 graph_outputs: set[str], ranks: dict[str, int]) -> None:
        self.producer, self.consumers, self.constants = producer, consumers, constants
        self.graph_outputs, self.ranks = graph_outputs, ranks

    def _only_use(self, name: str, of: Node | None = None) -> Node | None:
        """The single node consuming ``name`` (None when it has several, or is a graph output)."""
        users = self.consumers.get(name, [])
        if len(users) != 1 or name in self.graph_outputs:
            return None
        return users[0] if of is None or users[0] is of else None

    def _scalar(self, name: str) -> float | None:
        value = self.constants.get(name)
        if value is None or np.asarray(value).size != 1 or np.asarray(value).dtype.kind != "f":
            return None
        return float(np.asarray(value).reshape(-1)[0])

    def _other(self, node: Node, name: str) -> str | None:
        others = [i for i in node.inputs if i != name]
        return others[0] if len(others) == 1 and len(node.inputs) == 2 else None

    def gelu(self, erf: Node) -> tuple[list[Node], Node] | None:
        """Erf(x / sqrt2) (or x * 1/sqrt2) + 1, times x, times 0.5 (in either order)."""
        if erf.op != "Erf":
            return None
        scaled = self.producer.get(erf.inputs[0])
        if scaled is None or scaled.op not in ("Div", "Mul") or self._only_use(scaled.outputs[0], erf) is None:
            return None
        x, factor = scaled.inputs[0], self._scalar(scaled.inputs[1])
        if factor is None or scaled.inputs[0] in self.constants:
            return None
        if not math.isclose(factor, SQRT2 if scaled.op == "Div" else 1 / SQRT2, rel_tol=1e-4):
            return None
        plus = self._only_use(erf.outputs[0])
        if plus is None or plus.op != "Add" or not _close(self._scalar(self._other(plus, erf.outputs[0]) or ""), 1.0):
            return None
        times = self._only_use(plus.outputs[0])
        if times is None or times.op != "Mul":
            return None
        other = self._other(times, plus.outputs[0])
        half_first = self.producer.get(other or "")
        covered = [scaled, erf, plus, times]
        if other == x:  # x * (1 + erf) * 0.5
            last = self._only_use(times.outputs[0])
            if last is None or last.op != "Mul" or not _close(self._scalar(self._other(last, times.outputs[0]) or ""),
                                                               0.5):
                return None
            covered.append(last)
        elif half_first is not None and half_first.op == "Mul" and x in half_first.inputs \
                and _close(self._scalar(self._other(half_first, x) or ""), 0.5) \
                and self._only_use(half_first.outputs[0], times) is not None:  # (0.5 * x) * (1 + erf)
            covered.insert(0, half_first)
            last = times
        else:
            return None
        return covered, Node("edgekit.Gelu", f"{erf.name}/gelu", [x], list(covered[-1].outputs), {}, erf.opset)

    def layer_norm(self, divide: Node) -> tuple[list[Node], Node] | None:
        """(x - mean(x)) / Sqrt(mean((x - mean(x))^2) + eps) over the last axis, then an optional
        constant scale (Mul) and shift (Add)."""
        if divide.op != "Div":
            return None
        centred, root = (self.producer.get(i) for i in divide.inputs)
        if centred is None or root is None or centred.op != "Sub" or root.op != "Sqrt":
            return None
        x, mean_name = centred.inputs
        mean = self.producer.get(mean_name)
        if mean is None or not self._last_axis_mean(mean, x):
            return None
        shifted = self.producer.get(root.inputs[0])
        if shifted is None or shifted.op != "Add":
            return None
        variance = next((self.producer.get(i) for i in shifted.inputs if i in self.producer), None)
        eps = self._scalar(self._other(shifted, variance.outputs[0]) or "") if variance is not None else None
        if variance is None or eps is None or not self._last_axis_mean(variance, None):
            return None
        squared = self.producer.get(variance.inputs[0])
        if squared is None or not _is_square(squared, centred.outputs[0], self._scalar):
            return None
        users_of_centred = {id(n) for n in self.consumers.get(centred.outputs[0], [])}
        if users_of_centred != {id(squared), id(divide)} or centred.outputs[0] in self.graph_outputs:
            return None
        if len(self.consumers.get(mean.outputs[0], [])) != 1 or self._only_use(squared.outputs[0]) is None \
                or self._only_use(variance.outputs[0]) is None or self._only_use(shifted.outputs[0]) is None \
                or self._only_use(root.outputs[0]) is None:
            return None
        covered = [mean, centred, squared, variance, shifted, root, divide]
        inputs, size = [x], None
        rank = self.ranks.get(x)
        scale = self._only_use(divide.outputs[0])
        if scale is not None and scale.op == "Mul":
            weight = self.constants.get(self._other(scale, divide.outputs[0]) or "")
            if weight is not None and weight.ndim == 1:
                size = weight.shape[0]
                inputs.append(scale.inputs[1] if scale.inputs[0] == divide.outputs[0] else scale.inputs[0])
                covered.append(scale)
                shift = self._only_use(scale.outputs[0])
                if shift is not None and shift.op == "Add":
                    bias = self.constants.get(self._other(shift, scale.outputs[0]) or "")
                    if bias is not None and bias.shape == (size,):
                        inputs.append(shift.inputs[1] if shift.inputs[0] == scale.outputs[0] else shift.inputs[0])
                        covered.append(shift)
        if rank is None:
            return None
        return covered, Node("edgekit.LayerNorm", f"{divide.name}/layer_norm", inputs, list(covered[-1].outputs),
                             {"epsilon": eps}, divide.opset)

    def _last_axis_mean(self, node: Node, of: str | None) -> bool:
        if node.op != "ReduceMean" or (of is not None and node.inputs[0] != of):
            return False
        axes = node.attrs.get("axes")
        if axes is None and len(node.inputs) > 1:
            axes = self.constants.get(node.inputs[1])
        axes = [int(a) for a in np.asarray(axes).reshape(-1)] if axes is not None else None
        rank = self.ranks.get(node.inputs[0])
        return bool(axes) and len(axes) == 1 and rank is not None and axes[0] % rank == rank - 1 \
            and bool(node.attrs.get("keepdims", 1))


def _is_square(node: Node, of: str, scalar: Any) -> bool:
    if node.op == "Pow":
        return node.inputs[0] == of and _close(scalar(node.inputs[1]), 2.0)
    return node.op == "Mul" and node.inputs == [of, of]


def _close(value: float | None, expected: float) -> bool:
    return value is not None and math.isclose(value, expected, rel_tol=1e-4)
