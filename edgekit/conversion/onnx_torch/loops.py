"""ONNX ``Loop`` nodes unrolled into straight-line nodes, for the rebuild's fixed input shapes.

tf2onnx writes each Keras/TF recurrent layer it cannot match to an ONNX RNN op (a GRU behind
``Masking``, a bidirectional wrapper, a custom cell) as a ``Loop`` over the time steps. The
rebuilt module is specialised to fixed input shapes anyway, so the number of steps is fixed
too: run the graph once in ONNX Runtime on the example inputs to count each loop's iterations,
then copy its body that many times, chaining the loop-carried values and stacking the scan
outputs, as the Loop's own semantics define them. Each step's matrix products then become the
linear layers every converter and quantizer knows.

A loop whose end depends on the input *data* (its condition or its trip count) has no fixed
unrolling: it is refused by name, never unrolled for one example and wrong for the next.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ConversionError, OTHER_ROUTES
from ..layer_names import stable_node_name
from .graph import Args, Node, _attributes
from .registry import OPS, _run_node

SHAPE_ONLY = ("Shape", "Size")  # their outputs follow from shapes alone, never from the data
MAX_STEPS = 10_000  # iterations beyond which a loop is refused rather than unrolled


def unroll_loops(model: Any, example: dict[str, np.ndarray]) -> set[str]:
    """Replace, in place, every top-level ``Loop`` of ``model.graph`` by its body repeated as
    often as it runs on ``example`` (input name -> array); returns the names of the nodes written
    for the loops' steps (the formats keep them float, as ONNX Runtime runs a Loop's body)."""
    graph = model.graph
    loops = [node for node in graph.node if node.op_type == "Loop"]
    if not loops:
        return set()
    dynamic = _dynamic_names(graph)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    for loop in loops:
        _check_fixed_length(loop, dynamic)
    counts = _iteration_counts(model, loops, example)
    nodes, initializers = [], []
    for node in graph.node:
        if node.op_type != "Loop":
            nodes.append(node)
            continue
        unrolled, constants = _unrolled(node, counts[node.name or node.output[0]], opset)
        nodes.extend(unrolled)
        initializers.extend(constants)
    written = {node.name for node in nodes} - {node.name for node in graph.node}
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(initializers)
    return written


def _body(loop: Any) -> Any:
    return next(a.g for a in loop.attribute if a.name == "body")


def _nested(body: Any) -> bool:
    return any(a.type in (a.GRAPH, a.GRAPHS) for node in body.node for a in node.attribute)


def _dynamic_names(graph: Any) -> set[str]:
    """The top-level values that depend on the input data (a shape read is not)."""
    initializers = {i.name for i in graph.initializer}
    dynamic = {v.name for v in graph.input if v.name not in initializers}
    for node in graph.node:
        if node.op_type == "Loop":
            carried = _carried_dynamic(node, dynamic)
            body = _body(node)
            scans = len(body.output) - 1 - (len(node.input) - 2)
            outputs = list(node.output)
            flags = carried + [True] * scans  # a scan output is taken as data
            dynamic.update(name for name, flag in zip(outputs, flags) if name and flag)
        elif node.op_type not in SHAPE_ONLY and any(i in dynamic for i in node.input if i):
            dynamic.update(o for o in node.output if o)
    return dynamic


def _carried_dynamic(loop: Any, outer_dynamic: set[str]) -> list[bool]:
    """For each loop-carried value, whether it depends on the data (fixpoint over iterations)."""
    body = _body(loop)
    carried_inputs = [v.name for v in body.input[2:]]
    flags = [bool(name) and name in outer_dynamic for name in loop.input[2:]]
    while True:
        inside = _body_dynamic(body, {n for n, f in zip(carried_inputs, flags) if f} | outer_dynamic)
        updated = [f or body.output[1 + j].name in inside for j, f in enumerate(flags)]
        if updated == flags:
            return flags
        flags = updated


def _body_dynamic(body: Any, seeds: set[str]) -> set[str]:
    dynamic = set(seeds)
    for node in body.node:
        if node.op_type not in SHAPE_ONLY and any(i in dynamic for i in node.input if i):
            dynamic.update(o for o in node.output if o)
    return dynamic


def _check_fixed_length(loop: Any, dynamic: set[str]) -> None:
    """Refuse a loop whose number of iterations depends on the input data."""
    body = _body(loop)
    where = f"ONNX node {loop.name or loop.output[0]} (Loop)"
    hint = f"export it with a fixed number of steps (unrolled), or {OTHER_ROUTES}"
    if _nested(body):
        raise ConversionError(f"{where} holds a nested subgraph (If/Loop/Scan inside the loop)", hint=hint)
    trip, condition = (loop.input[0] if len(loop.input) > 0 else ""), (loop.input[1] if len(loop.input) > 1 else "")
    if trip in dynamic or condition in dynamic:
        raise ConversionError(f"{where} runs a number of steps computed from the input data", hint=hint)
    outer = dynamic | {n for n, f in zip([v.name for v in body.input[2:]], _carried_dynamic(loop, dynamic)) if f}
    if body.output[0].name in _body_dynamic(body, outer):
        raise ConversionError(f"{where} ends on a condition computed from the input data", hint=hint)


def _iteration_counts(model: Any, loops: list[Any], example: dict[str, np.ndarray]) -> dict[str, int]:
    """Each loop's number of iterations on ``example``: the graph run eagerly with the rebuild's own
    ops (no ONNX Runtime: a converter's environment may not have it), each loop stepped until its
    condition ends it or its trip count is spent."""
    import torch
    from onnx import helper, numpy_helper

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    graph = model.graph
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    values: dict[str, Any] = {}
    for value in graph.input:
        if value.name in constants:
            continue
        if value.name not in example:
            raise ConversionError(f"no example input for the ONNX model's input {value.name!r}")
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        values[value.name] = torch.from_numpy(np.ascontiguousarray(example[value.name], dtype=dtype))
    counts: dict[str, int] = {}
    wanted = {loop.name or loop.output[0] for loop in loops}
    dynamic = set(values)
    with torch.no_grad():
        for proto in graph.node:
            key = proto.name or proto.output[0]
            if proto.op_type == "Loop" and key in wanted:
                counts[key] = _step_through(proto, values, constants, opset, dynamic)
                continue
            node = Node(proto.op_type, proto.name or proto.op_type, list(proto.input), list(proto.output),
                        _attributes(proto), opset)
            _run_folding(node, values, constants, dynamic)
    return counts


def _run_folding(node: Node, values: dict[str, Any], constants: dict[str, np.ndarray], dynamic: set[str]) -> None:
    """Run ``node`` eagerly; outputs that do not depend on the data also become constants (the
    shape arguments ops read from ``constants``), as in the rebuild's own eager run."""
    outputs = _run_node(node, Args(node, values, constants, None, {}))
    static = node.op in SHAPE_ONLY or not any(i in dynamic for i in node.inputs if i)
    for name, value in zip(node.outputs, outputs):
        if not name:
            continue
        values[name] = value
        if static:
            constants[name] = value.detach().numpy() if hasattr(value, "detach") else np.asarray(value)
        else:
            dynamic.add(name)


def _step_through(loop: Any, values: dict[str, Any], constants: dict[str, np.ndarray], opset: int,
                  dynamic: set[str]) -> int:
    """Run ``loop`` eagerly (its outputs into ``values``); returns how many iterations it ran."""
    import torch
    from onnx import numpy_helper

    body = _body(loop)
    where = f"ONNX node {loop.name or loop.output[0]} (Loop)"
    unknown = sorted({n.op_type for n in body.node if n.op_type not in OPS})
    if unknown:
        raise ConversionError(f"{where} holds ops edgekit's ONNX-to-PyTorch rebuild cannot convert: "
                              f"{', '.join(unknown)}", hint=OTHER_ROUTES)
    inner = dict(constants)
    inner.update({i.name: numpy_helper.to_array(i) for i in body.initializer})
    nodes = [Node(n.op_type, n.name or n.op_type, list(n.input), list(n.output), _attributes(n), opset)
             for n in body.node]

    def read(name: str) -> Any:
        return values[name] if name in values else torch.from_numpy(np.array(constants[name]))

    trip = int(read(loop.input[0]).reshape(-1)[0]) if loop.input[0] else None
    going = bool(read(loop.input[1]).reshape(-1)[0]) if len(loop.input) > 1 and loop.input[1] else True
    carried = len(loop.input) - 2
    state = [read(name) for name in loop.input[2:]]
    scanned: list[list[Any]] = [[] for _ in range(len(body.output) - 1 - carried)]
    count = 0
    while going and (trip is None or count < trip):
        if count >= MAX_STEPS:
            raise ConversionError(f"{where} runs more than {MAX_STEPS} steps on the example input",
                                  hint=f"export it with fewer steps, or {OTHER_ROUTES}")
        scope = dict(values)
        scope[body.input[0].name] = torch.tensor(count, dtype=torch.int64)
        scope[body.input[1].name] = torch.tensor(going)
        scope.update({v.name: s for v, s in zip(body.input[2:], state)})
        step_constants, step_dynamic = dict(inner), dynamic | {v.name for v in body.input[2:]}
        for node in nodes:
            _run_folding(node, scope, step_constants, step_dynamic)
        outputs = [scope[o.name] if o.name in scope else torch.from_numpy(np.array(step_constants[o.name]))
                   for o in body.output]
        going, state = bool(outputs[0].reshape(-1)[0]), outputs[1:1 + carried]
        for j, value in enumerate(outputs[1 + carried:]):
            scanned[j].append(value)
        count += 1
    finals = state + [torch.stack(stacked) if stacked else None for stacked in scanned]
    for name, value in zip(loop.output, finals):
        if name and value is not None:
            values[name] = value
            dynamic.add(name)
    return count


def _unrolled(loop: Any, count: int, opset: int) -> tuple[list[Any], list[Any]]:
    """The loop's body ``count`` times as plain nodes, and the body's initializers (once)."""
    from onnx import helper, numpy_helper

    body = _body(loop)
    key = loop.name or loop.output[0]
    carried = len(loop.input) - 2
    scans = len(body.output) - 1 - carried
    if count == 0 and scans:
        raise ConversionError(f"ONNX node {key} (Loop) runs no step on the example input: its scan outputs have "
                              "no shape", hint=f"package it with inputs that give the loop steps, or {OTHER_ROUTES}")
    constants = []
    shared: dict[str, str] = {}
    for initializer in body.initializer:
        renamed = numpy_helper.from_array(numpy_helper.to_array(initializer), f"{key}/{initializer.name}")
        constants.append(renamed)
        shared[initializer.name] = renamed.name
    nodes: list[Any] = []
    state = [name for name in loop.input[2:]]
    condition = loop.input[1] if len(loop.input) > 1 and loop.input[1] else ""
    scanned: list[list[str]] = [[] for _ in range(scans)]
    produced = {o for node in body.node for o in node.output if o}
    for step in range(count):
        iteration = f"{key}/iteration_{step}"
        constants.append(numpy_helper.from_array(np.array(step, np.int64), iteration))
        names = dict(shared)
        names[body.input[0].name] = iteration
        if condition:
            names[body.input[1].name] = condition
        for value, name in zip(body.input[2:], state):
            names[value.name] = name
        for name in produced:
            names[name] = f"{key}/{step}/{name}"
        for index, node in enumerate(body.node):  # unnamed body nodes named as the graph's own (sources.onnx_rewrite)
            copy = helper.make_node(node.op_type, [names.get(i, i) if i else "" for i in node.input],
                                    [names[o] if o else "" for o in node.output],
                                    name=f"{key}/{step}/{node.name or stable_node_name(node.op_type, index)}",
                                    domain=node.domain or None)
            copy.attribute.extend(node.attribute)
            nodes.append(copy)
        outputs = [names.get(o.name, o.name) for o in body.output]
        condition, state = outputs[0], outputs[1:1 + carried]
        for j in range(scans):
            scanned[j].append(outputs[1 + carried + j])
    for final, name in zip(loop.output[:carried], state):
        if final:
            nodes.append(helper.make_node("Identity", [name], [final], name=f"{key}/final_{final}"))
    axis = f"{key}/axis_0"
    if scans and opset >= 13:
        constants.append(numpy_helper.from_array(np.array([0], np.int64), axis))
    for j, output in enumerate(loop.output[carried:carried + scans]):
        if not output:
            continue
        stacked = []
        for step, value in enumerate(scanned[j]):
            stacked.append(f"{key}/{step}/scan_{j}")
            nodes.append(helper.make_node("Unsqueeze", [value, axis], [stacked[-1]], name=f"{key}/{step}/stack_{j}")
                         if opset >= 13 else
                         helper.make_node("Unsqueeze", [value], [stacked[-1]], axes=[0], name=f"{key}/{step}/stack_{j}"))
        nodes.append(helper.make_node("Concat", stacked, [output], axis=0, name=f"{key}/scan_{j}"))
    return nodes, constants
