"""Lossless rewrites of an ONNX source before anything converts it (child side).

- Nodes without a name (names are optional in ONNX) get one, ``<op type>_<index in the graph>``:
  a precision plan, the search, ``--explain`` and every route name layers by node, and a graph of
  unnamed nodes had nothing to name.
- ``If`` on a condition that constants decide (a sample rate fixed with ``--input sr=16000``):
  the branch taken is inlined and the other dropped. No converter here rebuilds control flow,
  and a fixed input leaves only one branch reachable.
- A model with no batch axis at all (``[frames, features]``, one clip per call, as streaming
  exports often are), recognised by its data (each sample has the graph input's whole shape):
  a batch axis of 1 is added at every input and output (Squeeze / Unsqueeze at the edge), so a
  sample is fed one at a time as every fixed-batch model's is.
- Inputs and outputs whose batch dimension is not the first (a recurrent state
  ``[layers, batch, hidden]``): a Transpose at the graph's edge makes them batch-first, as
  every edgekit input and output is (samples are stacked on axis 0 everywhere: calibration,
  validation, the runtime's batching). The package's tensor is then ``[batch, layers,
  hidden]``; the manifest's description records the axis the source had.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..conversion.layer_names import stable_node_name

MAX_FOLDS = 32  # nested Ifs: each fold can expose another


def rewrite(source: str, destination: str, sample_shapes: dict[str, list[int]] | None = None,
            given_axes: dict[str, int | None] | None = None) -> dict[str, Any] | None:
    """Write the rewritten model to ``destination``; what changed, or None (nothing to do).
    ``sample_shapes``: one calibration sample's shape per input (``""``: one unnamed array);
    ``given_axes``: ``--batch-axis`` (tensor -> its batch axis, None: the model has none)."""
    import onnx

    model = onnx.load(source)
    given = _checked_axes(model, dict(given_axes or {}))
    named = name_nodes(model)
    folded = fold_constant_ifs(model)
    added = add_batch_axis(model, sample_shapes or {}, force=None in given.values())
    moved = {} if added else batch_first(model, given)
    if not folded and not moved and not named and not added:
        return None
    onnx.checker.check_model(model)
    onnx.save(model, destination)
    return {"folded_ifs": folded, "batch_axes": moved, **({"named_nodes": named} if named else {}),
            **({"batch_axis_added": added} if added else {})}


def _checked_axes(model: Any, given: dict[str, int | None]) -> dict[str, int | None]:
    """``--batch-axis`` against the graph: every name an input or output, every axis inside its
    rank, and "none" said of the whole model or not at all."""
    from ..errors import OptionError

    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in [*graph.input, *graph.output]
             if v.name not in initializers}
    unknown = sorted(set(given) - set(ranks))
    if unknown:
        raise OptionError(f"--batch-axis names {', '.join(unknown)}, which the model has no input or output called",
                          hint="its inputs and outputs: " + ", ".join(ranks))
    outside = [f"{name}={axis} (rank {ranks[name]})" for name, axis in given.items()
               if axis is not None and axis >= ranks[name]]
    if outside:
        raise OptionError(f"--batch-axis {', '.join(outside)}: no such axis", hint="axes count from 0")
    if None in given.values() and any(axis is not None for axis in given.values()):
        raise OptionError("--batch-axis gives some tensors an axis and others none",
                          hint="none is said of a model with no batch axis at all: give it alone")
    return given


def add_batch_axis(model: Any, sample_shapes: dict[str, list[int]], force: bool = False) -> list[str]:
    """A leading batch axis of 1 on every input and output of a model that has none, which its
    data show (``force``: ``--batch-axis NAME=none`` says so): each input's calibration sample has
    the input's whole shape (``[1000, 162]`` for ``[frames, 162]``), where a batched model's sample
    drops the batch axis. The names changed."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initializers]
    if not inputs or not (sample_shapes or force):
        return []
    for value in [] if force else inputs:
        given = sample_shapes.get(value.name)
        if given is None and len(inputs) == 1 and len(sample_shapes) == 1:
            given = next(iter(sample_shapes.values()))
        dims = list(value.type.tensor_type.shape.dim)
        if given is None or not dims or len(given) != len(dims) or any(
                d.HasField("dim_value") and d.dim_value != size for d, size in zip(dims, given)):
            return []  # an input without data, or one whose sample drops an axis: batched as given
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset >= 13:  # Squeeze/Unsqueeze take their axes as an input from opset 13, an attribute before
        graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "edgekit_batch_axis"))

    def edge(op: str, source: str, target: str, name: str) -> Any:
        if opset < 13:
            return helper.make_node(op, [source], [target], name=name, axes=[0])
        return helper.make_node(op, [source, "edgekit_batch_axis"], [target], name=name)

    front = []
    for value in inputs:
        inner = _rename_uses(graph, value.name, outputs_too=False)
        front.append(edge("Squeeze", value.name, inner, f"{value.name}/to_source_shape"))
        _prepend_one(value)
    for value in graph.output:
        inner = _rename_uses(graph, value.name, outputs_too=True)
        graph.node.append(edge("Unsqueeze", inner, value.name, f"{value.name}/with_batch_axis"))
        _prepend_one(value)
    for offset, node in enumerate(front):
        graph.node.insert(offset, node)
    return [v.name for v in inputs] + [v.name for v in graph.output]


def _prepend_one(value: Any) -> None:
    """``value``'s shape with a leading axis of 1."""
    shape = value.type.tensor_type.shape
    dims = [type(d)() for d in shape.dim]
    for copy, d in zip(dims, shape.dim):
        copy.CopyFrom(d)
    del shape.dim[:]
    shape.dim.add().dim_value = 1
    for d in dims:
        shape.dim.add().CopyFrom(d)


def name_nodes(model: Any) -> int:
    """Name every unnamed node of the main graph ``<op type>_<index>`` (its position, so the same
    graph gets the same names), never a name another node has; how many were named."""
    taken = {node.name for node in model.graph.node if node.name}
    named = 0
    for index, node in enumerate(model.graph.node):
        if node.name:
            continue
        name, extra = stable_node_name(node.op_type, index), 0
        while name in taken:
            extra += 1
            name = f"{stable_node_name(node.op_type, index)}_{extra}"
        node.name = name
        taken.add(name)
        named += 1
    return named


def fold_constant_ifs(model: Any) -> list[dict[str, Any]]:
    """Inline every top-level ``If`` whose condition follows from constants; what was folded."""
    folded = []
    for _ in range(MAX_FOLDS):
        graph = model.graph
        target = None
        for index, node in enumerate(graph.node):
            if node.op_type == "If":
                value = _constant_value(model, node.input[0])
                if value is not None:
                    target = (index, node, bool(value.reshape(-1)[0]))
                    break
        if target is None:
            return folded
        index, node, taken = target
        branch = next(a.g for a in node.attribute if a.name == ("then_branch" if taken else "else_branch"))
        _inline(graph, index, node, branch)
        folded.append({"node": node.name or node.output[0], "condition": node.input[0], "taken": taken})
    return folded


def _constant_value(model: Any, name: str) -> Any:
    """The value of ``name`` when it follows from initializers and constant nodes alone."""
    import numpy as np
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    if name in initializers:
        return numpy_helper.to_array(initializers[name])
    producers = {o: n for n in graph.node for o in n.output}
    needed, stack, seen = [], [name], set()
    while stack:
        current = stack.pop()
        if current in seen or current in initializers or current == "":
            continue
        seen.add(current)
        node = producers.get(current)
        if node is None or node.op_type in ("If", "Loop", "Scan") or any(a.type in (5, 10) for a in node.attribute):
            return None  # a graph input, or something with a subgraph
        needed.append(node)
        stack.extend(node.input)
    order = [n for n in graph.node if any(n is m for m in needed)]
    used = {i for n in order for i in n.input}
    small = helper.make_graph(order, "condition", [], [helper.make_tensor_value_info(name, 0, None)],
                              initializer=[initializers[i] for i in used if i in initializers])
    try:
        evaluated = ReferenceEvaluator(helper.make_model(small, opset_imports=list(model.opset_import))).run(None, {})
    except Exception:
        return None
    return np.asarray(evaluated[0])


def _inline(graph: Any, index: int, node: Any, branch: Any) -> None:
    """The If node at ``index`` replaced by ``branch``'s nodes; names made inside the branch get
    the node's name as a prefix (they may repeat names of the outer graph), its outputs the If's."""
    from onnx import helper

    prefix = f"{node.name or node.output[0]}/"
    produced = {o for n in branch.node for o in n.output if o} | {i.name for i in branch.initializer}
    outputs = {v.name: out for v, out in zip(branch.output, node.output)}
    renamed = {name: outputs.get(name, prefix + name) for name in produced}
    new_nodes = []
    for inner in branch.node:
        copy = type(inner)()
        copy.CopyFrom(inner)
        _rename_in_subgraphs(copy, renamed)
        for i, name in enumerate(copy.input):
            copy.input[i] = renamed.get(name, name)
        for i, name in enumerate(copy.output):
            copy.output[i] = renamed.get(name, name) if name else name
        copy.name = prefix + (inner.name or inner.op_type)
        new_nodes.append(copy)
    for initializer in branch.initializer:
        copy = type(initializer)()
        copy.CopyFrom(initializer)
        copy.name = renamed[initializer.name]
        graph.initializer.append(copy)
    for value, out in zip(branch.output, node.output):  # a branch that returns an outer value as it is
        if value.name not in produced:
            new_nodes.append(helper.make_node("Identity", [value.name], [out], name=f"{prefix}{out}/identity"))
    del graph.node[index]
    for offset, inner in enumerate(new_nodes):
        graph.node.insert(index + offset, inner)


def _rename_in_subgraphs(node: Any, renamed: dict[str, str]) -> None:
    """A nested ``If``/``Loop``/``Scan`` reads outer values by name: where the inlining renamed
    them, its subgraphs (and theirs) read the new names, except names a subgraph makes itself."""
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.type == 5 else list(attribute.graphs) if attribute.type == 10 else []
        for graph in graphs:
            own = ({o for n in graph.node for o in n.output} | {i.name for i in graph.initializer}
                   | {v.name for v in graph.input})
            visible = {k: v for k, v in renamed.items() if k not in own}
            for inner in graph.node:
                _rename_in_subgraphs(inner, visible)
                for i, name in enumerate(inner.input):
                    inner.input[i] = visible.get(name, name)
            for value in graph.output:  # a branch returning an outer value as it is
                if value.name in visible:
                    value.name = visible[value.name]


def batch_first(model: Any, given: dict[str, int | None] | None = None) -> dict[str, int]:
    """Inputs and outputs with the batch dimension on axis k > 0 made batch-first by a Transpose;
    their names -> the source's batch axis. ``given``: ``--batch-axis``, over what is detected."""
    from onnx import helper

    given = given or {}
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initializers]
    batch = batch_dim_name([_dims(v) for v in inputs])
    if batch is None and not given and not any(_free_first_axis(v) for v in inputs):
        return {}  # no input has a batch on axis 0 to follow: nothing says which axis is another's batch

    def permutation(value: Any) -> list[int] | None:
        if value.name not in given:
            return _to_first(value, batch)
        axis = given[value.name]
        return None if not axis else [axis] + [d for d in range(len(_dims(value))) if d != axis]

    moved: dict[str, int] = {}
    front: list[Any] = []
    for value in inputs:  # the package feeds it batch-first: a Transpose back to the source's layout
        perm = permutation(value)
        if perm is None:
            continue
        inner = _rename_uses(graph, value.name, outputs_too=False)
        front.append(helper.make_node("Transpose", [value.name], [inner], perm=_inverse(perm),
                                      name=f"{value.name}/to_source_layout"))
        _permute(value, perm)
        moved[value.name] = perm[0]
    for value in graph.output:  # the source computes it in its layout: a Transpose to batch-first
        perm = permutation(value)
        if perm is None:
            continue
        inner = _rename_uses(graph, value.name, outputs_too=True)
        graph.node.append(helper.make_node("Transpose", [inner], [value.name], perm=perm,
                                           name=f"{value.name}/to_batch_first"))
        _permute(value, perm)
        moved[value.name] = perm[0]
    for offset, node in enumerate(front):
        graph.node.insert(offset, node)
    return moved


def batch_dim_name(shapes: list[list[str]]) -> str | None:
    """The symbolic dimension that is the batch, from the inputs' dimension names: the one the
    most inputs share, then one named like a batch (``batch``, ``N``), then the one most often
    on axis 0. An exporter names a recurrent state's dims after the node that made them
    (``AddstateN_dim_0, batch, 128``): its own first dim is not the batch because it comes
    first in that one input."""
    named = [[d for d in dims] for dims in shapes if dims]
    counts = Counter(d for dims in named for d in set(dims) if d)
    if not counts:
        return None
    first = Counter(dims[0] for dims in named if dims[0])

    def score(name: str) -> tuple[int, int, int]:
        looks = int("batch" in name.lower() or name in ("N", "n", "B", "bs"))
        return counts[name], looks, first[name]

    return max(sorted(counts), key=score)


def _to_first(value: Any, batch: str | None) -> list[int] | None:
    """The permutation moving ``value``'s batch axis to the front, or None when it is there."""
    axis = _batch_axis(value, batch)
    if not axis:
        return None
    return [axis] + [d for d in range(len(_dims(value))) if d != axis]


def _rename_uses(graph: Any, name: str, outputs_too: bool) -> str:
    """Every node's use of ``name`` (its inputs; with ``outputs_too`` its producer's output as
    well) renamed to ``NAME__source_layout``; the new name."""
    inner = f"{name}__source_layout"
    for node in graph.node:
        fields = (node.input, node.output) if outputs_too else (node.input,)
        for names in fields:
            for i, current in enumerate(names):
                if current == name:
                    names[i] = inner
    return inner


def _free_first_axis(value: Any) -> bool:
    """Whether ``value``'s first axis is free (no fixed size): where unnamed dimensions leave the
    batch, as batch-first exports have it."""
    dims = list(value.type.tensor_type.shape.dim)
    return bool(dims) and not dims[0].HasField("dim_value")


def _dims(value: Any) -> list[str]:
    return [d.dim_param if d.HasField("dim_param") else "" for d in value.type.tensor_type.shape.dim]


def _batch_axis(value: Any, batch: str | None) -> int | None:
    """The axis k > 0 holding the batch: the one named like the inputs' batch; else, where the
    exporter named it otherwise (``[2, n, 128]`` beside ``[batch, 512]``), the only free axis of a
    value whose first axis is fixed above 1 (a recurrent state [layers, N, hidden])."""
    names = _dims(value)
    if batch is not None and batch in names:
        return names.index(batch) if names[0] != batch and names.count(batch) == 1 else None
    dims = list(value.type.tensor_type.shape.dim)
    if len(dims) < 2 or not dims[0].HasField("dim_value") or dims[0].dim_value <= 1:
        return None
    free = [axis for axis, d in enumerate(dims) if axis and not d.HasField("dim_value")]
    return free[0] if len(free) == 1 else None


def _permute(value: Any, perm: list[int]) -> None:
    dims = list(value.type.tensor_type.shape.dim)
    copies = []
    for d in dims:
        copy = type(d)()
        copy.CopyFrom(d)
        copies.append(copy)
    for position, source in enumerate(perm):
        dims[position].CopyFrom(copies[source])


def _inverse(perm: list[int]) -> list[int]:
    inverse = [0] * len(perm)
    for position, source in enumerate(perm):
        inverse[source] = position
    return inverse
