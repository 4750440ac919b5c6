"""A toy format for the search's logic: its converter takes milliseconds, its arithmetic is known.

The source is a small ONNX chain of Gemm, Relu and Softmax nodes (``chain_onnx``). The toy's
artifact is that chain as NumPy arrays with INT8 simulated the way real converters do it:
per-channel symmetric int8 weights, per-tensor int8 activations on the calibration's min/max
range, and the precision plan honoured per node (``int16`` activations, or ``float``: the node's
weights and output left unquantized). Its builder writes the per-layer report (``--explain``) and
the precision record the search reads; its backend runs the artifact with NumPy. So the search,
the confirmation on unseen samples, the fallback rebuilds, the gates and the verdict run as in a
real packaging run, on builds that cost milliseconds instead of a converter's seconds.

Registered by the tests that use it (``registered``), never by edgekit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.conversion import forms
from edgekit.formats import FORMATS, Accepts, Backend, Format, TensorInfo, register
from edgekit.formats.base import EXPLAIN
from edgekit.formats.building import Builder, BuildContext, BuildResult
from edgekit.formats.plan import FLOAT, INT16
from edgekit.fsutil import sha256_file
from edgekit.manifest import Artifact, QuantParams

NAME, BACKEND = "toy", "toy-numpy"
PATH = "toy/model.toy.npz"
LEVELS = {"int8": 127, INT16: 32767}


def chain_onnx(path: Path, weights: list[tuple[np.ndarray, np.ndarray]], softmax: bool = True) -> None:
    """An ONNX model ``x -> fc1 -> relu1 -> fc2 -> ... -> fcN [-> softmax] -> y``: one Gemm per
    ``(W, b)`` pair (``W``: [in, out]), a Relu between them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, initializers, current = [], [], "x"
    for i, (w, b) in enumerate(weights, 1):
        initializers += [numpy_helper.from_array(w.astype(np.float32), f"fc{i}.w"),
                         numpy_helper.from_array(b.astype(np.float32), f"fc{i}.b")]
        nodes.append(helper.make_node("Gemm", [current, f"fc{i}.w", f"fc{i}.b"], [f"fc{i}_out"], name=f"fc{i}"))
        current = f"fc{i}_out"
        if i < len(weights):
            nodes.append(helper.make_node("Relu", [current], [f"relu{i}_out"], name=f"relu{i}"))
            current = f"relu{i}_out"
    if softmax:
        nodes.append(helper.make_node("Softmax", [current], ["y"], name="softmax", axis=-1))
    else:
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             ["batch", weights[0][0].shape[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             ["batch", weights[-1][0].shape[1]])], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def read_chain(path: str) -> list[dict[str, Any]]:
    """The chain's nodes in order: name, op, and a Gemm's weights."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        if node.op_type not in ("Gemm", "Relu", "Softmax"):
            raise ValueError(f"the toy format converts Gemm, Relu and Softmax only, not {node.op_type}")
        found: dict[str, Any] = {"name": node.name, "op": node.op_type}
        if node.op_type == "Gemm":
            found["w"], found["b"] = weights[node.input[1]], weights[node.input[2]]
        nodes.append(found)
    return nodes


def forward(nodes: list[dict[str, Any]], x: np.ndarray, ranges: Mapping[str, float] | None = None,
            precisions: Mapping[str, str] | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The chain on ``x``, and every node's output. With ``ranges`` (each tensor's largest
    magnitude), each tensor is rounded to its precision's grid (``precisions``: node -> int8,
    int16 or float; the input ``x`` is int8); without, the float model."""
    precisions = precisions or {}

    def rounded(name: str, value: np.ndarray) -> np.ndarray:
        precision = precisions.get(name, "int8")
        if ranges is None or precision == FLOAT:
            return value
        scale = max(ranges[name], 1e-12) / LEVELS[precision]
        return np.clip(np.round(value / scale), -LEVELS[precision], LEVELS[precision]) * scale

    h, outputs = rounded("x", x.astype(np.float64)), {}
    for node in nodes:
        if node["op"] == "Gemm":
            w = node["w"].astype(np.float64)
            if ranges is not None and precisions.get(node["name"]) != FLOAT:
                scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127  # per output channel
                w = np.round(w / scale) * scale
            h = h @ w + node["b"]
        elif node["op"] == "Relu":
            h = np.maximum(h, 0)
        else:
            e = np.exp(h - h.max(axis=-1, keepdims=True))
            h = e / e.sum(axis=-1, keepdims=True)
        h = rounded(node["name"], h)
        outputs[node["name"]] = h
    return h.astype(np.float32), outputs


class ToyBuilder(Builder):
    name = NAME
    backend = BACKEND
    cheap_tries = True
    fast_int16_activations = True  # its 16-bit arithmetic costs what int8's does: the search's int16 probes run
    builds: list[dict[str, str]] = []  # every build's plan, in order (tests read how many builds a search made)

    def build(self, context: BuildContext, on_progress: Any = None) -> BuildResult:
        nodes = read_chain(context.model.path)
        names = {node["name"] for node in nodes}
        plan = dict(context.plan.layers)
        unknown = sorted(set(plan) - names)
        if unknown:
            from edgekit.errors import ConversionError

            raise ConversionError(f"toy: no layer named {', '.join(unknown)}", hint="name a node of the chain")
        calibration = np.load(context.calibration_npy)
        _, found = forward(nodes, calibration)
        ranges = {"x": float(np.abs(calibration).max()), **{k: float(np.abs(v).max()) for k, v in found.items()}}
        target = context.package_dir / PATH
        target.parent.mkdir(parents=True, exist_ok=True)
        arrays = {f"{n['name']}.{k}": n[k] for n in nodes for k in ("w", "b") if k in n}
        chain = [{"name": n["name"], "op": n["op"]} for n in nodes]
        with open(target, "wb") as f:
            np.savez(f, chain=json.dumps({"nodes": chain, "ranges": ranges, "plan": plan}), **arrays)
        ToyBuilder.builds.append(plan)
        weighted = [n["name"] for n in nodes if n["op"] == "Gemm"]
        integer = [layer for layer in weighted if plan.get(layer) != FLOAT]
        ops = {n["name"]: n["op"] for n in nodes}
        held = _held(target)  # what the written artifact computes out of int8, read back as real formats do
        details: dict[str, Any] = {**context.plan.record(), "weighted_layers": weighted,
                                   "precision": {"ops": {"integer_weighted": len(integer)},
                                                 "float_layers": sorted(n for p, n, _ in held if p == FLOAT),
                                                 "int16_layers": sorted(n for p, n, _ in held if p == INT16)}}
        if context.explain_npy:
            details["explain"] = _report(nodes, np.load(context.explain_npy), ranges, plan)
        raised = len(plan)
        return BuildResult(Artifact(
            format=NAME, path=PATH, sha256=sha256_file(target), bytes=target.stat().st_size,
            precision="int8" if not raised else f"int8+{'float' if FLOAT in plan.values() else 'int16'} "
                                                f"({raised} layers)",
            inputs=[QuantParams(name="x", dtype="float32")], outputs=[QuantParams(name="y", dtype="float32")],
            float_ops=[{"op": ops[n], "layer": n, "tensor": n, "tail": False} for p, n, _ in held if p == FLOAT],
            converter={"tool": "toy (NumPy)", "seconds": 0.0}, details=details))


def _held(artifact_file: Path) -> list[tuple[str, str, str]]:
    """The plan the toy artifact computes with, read from the artifact file."""
    with np.load(artifact_file) as stored:
        plan = json.loads(str(stored["chain"]))["plan"]
    return [(precision, node, node) for node, precision in plan.items()]


def _report(nodes: list[dict[str, Any]], samples: np.ndarray, ranges: dict[str, float],
            plan: dict[str, str]) -> list[dict[str, Any]]:
    """Each node's output against float, worst first (``--explain``'s rows)."""
    _, reference = forward(nodes, samples)
    _, quantized = forward(nodes, samples, ranges, plan)
    rows = []
    for node in nodes:
        ref, got = reference[node["name"]], quantized[node["name"]]
        noise = float(np.sum((ref - got) ** 2))
        sqnr = 10 * np.log10(float(np.sum(ref ** 2)) / noise) if noise > 0 else 200.0
        rows.append({"layer": node["name"], "op": node["op"], "sqnr_db": round(sqnr, 2), "tensor": node["name"]})
    return sorted(rows, key=lambda row: row["sqnr_db"])


class ToyBackend(Backend):
    name = BACKEND
    suffixes = (".toy.npz",)

    @classmethod
    def available(cls) -> str | None:
        return f"numpy {np.__version__}"

    def __init__(self, path: str, threads: int | None = None, **options: object) -> None:
        with np.load(path) as stored:
            about = json.loads(str(stored["chain"]))
            self.nodes = [{**node, **{k: stored[f"{node['name']}.{k}"] for k in ("w", "b")
                                      if f"{node['name']}.{k}" in stored}} for node in about["nodes"]]
        self.ranges, self.plan = about["ranges"], about["plan"]
        first = next(n for n in self.nodes if n["op"] == "Gemm")
        last = [n for n in self.nodes if n["op"] == "Gemm"][-1]
        self._inputs = [TensorInfo("x", (-1, first["w"].shape[0]), np.dtype(np.float32))]
        self._outputs = [TensorInfo("y", (-1, last["w"].shape[1]), np.dtype(np.float32))]

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        return [forward(self.nodes, feeds[0], self.ranges, self.plan)[0]]


FORMAT = Format(name=NAME, description="a Gemm chain with INT8 simulated in NumPy (tests only)",
                builder=ToyBuilder, backends=(ToyBackend,), extra="numpy", serving_platform="toy_numpy",
                accepts=(Accepts(forms.ONNX_GRAPH, honours=(FLOAT, INT16, EXPLAIN)),))


@contextmanager
def registered() -> Iterator[type[ToyBuilder]]:
    """The toy format registered for the block (its artifacts run in converter children, which
    import this module by name: the repository must be on their ``PYTHONPATH``)."""
    register(FORMAT)
    ToyBuilder.builds = []
    try:
        yield ToyBuilder
    finally:
        FORMATS.remove(NAME)
