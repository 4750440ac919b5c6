"""What each model output is made of, read from the source's graph (build side, converter child).

The verdict needs to know what an output holds before it can judge it: class probabilities
(a softmax), per-bin or per-pixel probabilities (a sigmoid), a normalised embedding, or several
quantities joined by a Concat (YOLO's 4 box rows next to its sigmoid class rows). Value ranges
cannot tell these apart reliably (360 sigmoid pitch bins span four decades; a box row and a
score row can overlap), the graph can. Each source describes its outputs with ``describe_*``
into one JSON-able form, read by ``kinds.py``:

    {"op": "softmax" | "sigmoid" | "l2norm" | "concat" | "values",
     "axis": int | None,        # softmax/l2norm/concat axis, as an axis of the output itself
     "node": str | None,        # the node that makes it (the Concat: what --keep-float names)
     "parts": [{"size": int | None, "op": ...}, ...],   # concat only, in order along "axis"
     "levels": {"axis": int, "count": int, "node": str}}  # parts joined again on another axis (YOLOv5)

Only structure that provably survives to the output is followed: Identity, Cast and Transpose
(whose permutation is tracked, so a Concat on axis 1 under a Transpose(0, 2, 1) is reported on
axis 2). Past a Reshape, Flatten or Squeeze a Softmax or Sigmoid is still recognised, without an
axis (a rank-2 output then has its classes on axis 1); a Concat is not. Anything else ends the
walk, and the output is described by that op alone.
"""

from __future__ import annotations

from typing import Any

PASS_THROUGH = {"Identity", "Cast"}  # neither values nor axes change
PART_PASS_THROUGH = PASS_THROUGH | {"Transpose", "Reshape", "Split", "Slice", "Flatten", "Squeeze", "Unsqueeze",
                                    "Gather"}  # a part's op survives re-shaping (its axis does not matter)
SIGMOID_OPS = {"Sigmoid", "HardSigmoid"}
RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
SOFTMAX_OPS = {"Softmax", "LogSoftmax"}
MAX_STEPS = 12  # how far back through pass-through nodes; real graphs put the head op right before


def describe_onnx_outputs(model: Any) -> dict[str, dict[str, Any]]:
    """Every graph output's structure, by output name (an ``onnx.ModelProto``)."""
    graph = _with_shapes(model).graph
    producers = {out: node for node in graph.node for out in node.output}
    shapes = {v.name: _dims(v) for v in list(graph.value_info) + list(graph.input) + list(graph.output)}
    constants = {i.name for i in graph.initializer} | {n.output[0] for n in graph.node if n.op_type == "Constant"}
    found = {}
    for output in graph.output:
        rank = len(shapes.get(output.name) or [])
        found[output.name] = _walk(output.name, list(range(rank)), producers, shapes, constants)
    return found


def _with_shapes(model: Any) -> Any:
    """The model with inferred shapes, for the Concat parts' sizes: ONNX Runtime's symbolic shape
    inference follows the computed Reshape targets exporters write (ONNX's own stops there)."""
    import onnx

    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        return SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=True)
    except Exception:  # not installed, or a graph it cannot follow
        pass
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # shape inference is a help for part sizes, never a requirement
        return model


def _dims(value: Any) -> list[int | None]:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim]


def _attr(node: Any, name: str, default: Any = None) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _walk(tensor: str, axes: list[int], producers: dict[str, Any], shapes: dict[str, list[int | None]],
          constants: set[str]) -> dict[str, Any]:
    """``axes[i]``: which output axis axis ``i`` of ``tensor`` becomes (after the Transposes passed)."""
    reshaped = False  # past a Reshape/Flatten/Squeeze: an op is still found, its axis no longer known
    for _ in range(MAX_STEPS):
        node = producers.get(tensor)
        if node is None:
            return {"op": "values", "axis": None, "node": None}
        rank = len(axes)
        if node.op_type in PASS_THROUGH:
            tensor = node.input[0]
            continue
        if node.op_type == "Reshape" and not reshaped and axes and axes[-1] is not None:
            before, after = shapes.get(node.input[0]) or [], shapes.get(node.output[0]) or []
            if before and after and before[-1] is not None and before[-1] == after[-1]:
                # the last axis keeps its size: it is the same axis (YOLOv5's [N, na, ny, nx, 85] -> [N, A, 85])
                axes, tensor = [None] * (len(before) - 1) + [axes[-1]], node.input[0]
                continue
        if node.op_type in RESHAPES:
            reshaped, tensor = True, node.input[0]
            continue
        if reshaped:  # a softmax/sigmoid before a flatten (SqueezeNet's [N, C, 1, 1]) still says what it is
            if node.op_type in SOFTMAX_OPS:
                return {"op": "softmax", "axis": None, "node": node.name}
            if node.op_type in SIGMOID_OPS:
                return {"op": "sigmoid", "axis": None, "node": node.name}
            break
        if node.op_type == "Transpose":
            perm = list(_attr(node, "perm", list(reversed(range(rank)))))
            if len(perm) != rank:
                break
            moved = [0] * rank
            for out_axis, in_axis in enumerate(perm):
                moved[in_axis] = axes[out_axis]
            axes, tensor = moved, node.input[0]
            continue
        if node.op_type in SOFTMAX_OPS:
            axis = _attr(node, "axis", -1)
            return {"op": "softmax", "axis": axes[axis % rank] if rank else None, "node": node.name}
        if node.op_type in SIGMOID_OPS:
            return {"op": "sigmoid", "axis": None, "node": node.name}
        if node.op_type == "LpNormalization" and _attr(node, "p", 2) == 2:
            axis = _attr(node, "axis", -1)
            return {"op": "l2norm", "axis": axes[axis % rank] if rank else None, "node": node.name}
        if node.op_type == "Div" and _is_l2_norm(node.input[1], producers):
            return {"op": "l2norm", "axis": axes[-1] if rank else None, "node": node.name}
        if node.op_type == "Concat" and rank:
            axis = _attr(node, "axis", 0) % rank
            if axes[axis] is None:
                break
            parts = [{"size": (shapes.get(i) or [None] * rank)[axis] if len(shapes.get(i) or []) == rank else None,
                      "op": _part_op(i, producers, constants)} for i in node.input]
            if len({p["op"] for p in parts}) == 1 and len(parts) > 1:
                # one kind of part joined along one axis (a detector's levels along the anchors): the
                # quantities, if any, are joined inside each part, on another axis
                inner = _walk(node.input[0], list(axes), producers, shapes, constants)
                if inner.get("op") == "concat" and inner.get("axis") not in (None, axes[axis]) and \
                        len({p["op"] for p in inner.get("parts") or []}) > 1:
                    return {**inner, "levels": {"axis": axes[axis], "count": len(parts), "node": node.name}}
            return {"op": "concat", "axis": axes[axis], "node": node.name, "parts": parts}
        break
    return {"op": "values", "axis": None, "node": producers[tensor].name if tensor in producers else None}


def _part_op(tensor: str, producers: dict[str, Any], constants: set[str]) -> str:
    """What one input of a Concat is: sigmoid, softmax, l2norm, or values."""
    for _ in range(MAX_STEPS):
        if tensor in constants:
            return "constant"
        node = producers.get(tensor)
        if node is None:
            return "values"
        if node.op_type in PART_PASS_THROUGH:
            tensor = node.input[0]
            continue
        if node.op_type in SIGMOID_OPS:
            return "sigmoid"
        if node.op_type in SOFTMAX_OPS:
            return "softmax"
        if node.op_type == "Concat":  # a nested join: the same op throughout, or mixed values
            ops = {_part_op(i, producers, constants) for i in node.input}
            return ops.pop() if len(ops) == 1 else "values"
        return "values"
    return "values"


def _is_l2_norm(divisor: str, producers: dict[str, Any]) -> bool:
    """x / ||x||: the divisor comes (through Clip/Max/Add for an epsilon, Expand) from ReduceL2,
    or Sqrt of a ReduceSum of squares, as torch's F.normalize and tf.math.l2_normalize export."""
    seen = 0
    frontier = [divisor]
    while frontier and seen < MAX_STEPS:
        node = producers.get(frontier.pop())
        seen += 1
        if node is None:
            continue
        if node.op_type == "ReduceL2":
            return True
        if node.op_type == "Sqrt":
            source = producers.get(node.input[0])
            if source is not None and source.op_type in ("ReduceSum", "ReduceSumSquare"):
                return True
        if node.op_type in ("Clip", "Max", "Add", "Expand", "Identity", "Cast", "Sqrt", "Reciprocal"):
            frontier.extend(node.input[:1])
    return False
