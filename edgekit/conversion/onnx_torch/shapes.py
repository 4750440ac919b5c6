"""Shapes, indexing and reductions (shape-like arguments are constants: ``Args.ints``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import ConversionError, OTHER_ROUTES
from .graph import Args, DataDependent
from .registry import OPS, _axis, _F, _torch, _torch_pad, op


# --- shapes and indexing -------------------------------------------------------------------------


@op("Shape")
def _shape(a: Args) -> Any:
    shape = list(a.t(0).shape)
    start, end = a.attr("start", 0), a.attr("end", None)
    return _torch().tensor([int(d) for d in shape[start:end]], dtype=_torch().int64)


@op("Size")
def _size(a: Args) -> Any:
    return _torch().tensor(int(a.t(0).numel()), dtype=_torch().int64)


@op("Constant")
def _constant(a: Args) -> Any:
    attrs = a.node.attrs
    if "value" in attrs:
        return _torch().from_numpy(np.array(attrs["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in attrs:
            return _torch().from_numpy(np.array(attrs[key], dtype=dtype))
    raise ConversionError(f"ONNX node {a.node.name}: a Constant of kind {sorted(attrs)} is not supported",
                          hint=OTHER_ROUTES)


@op("ConstantOfShape")
def _constant_of_shape(a: Args) -> Any:
    value = a.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return _torch().full(a.ints(0), fill[0].item(), dtype=_torch().from_numpy(fill).dtype)


@op("Range")
def _range(a: Args) -> Any:
    start, limit, delta = (a.const(i) for i in range(3))
    if start is None or limit is None or delta is None:
        a.ints(0 if start is None else 1 if limit is None else 2)  # raises the data-dependent error
    dtype = _torch().from_numpy(np.asarray(start)).dtype
    return _torch().arange(start.item(), limit.item(), delta.item(), dtype=dtype)


@op("Reshape")
def _reshape(a: Args) -> Any:
    x = a.t(0)
    shape = a.ints(1)
    if not a.attr("allowzero", 0):
        shape = [int(x.shape[i]) if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


@op("Flatten")
def _flatten(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 1)), x.dim())
    shape = [int(d) for d in x.shape]
    return x.reshape(math.prod(shape[:axis]), math.prod(shape[axis:]))


@op("Transpose")
def _transpose(a: Args) -> Any:
    x = a.t(0)
    perm = a.attr("perm", None)
    return x.permute(*(list(perm) if perm is not None else list(range(x.dim()))[::-1]))


def _axes(a: Args, index: int) -> list[int] | None:
    if a.attr("axes") is not None:
        return list(a.attr("axes"))
    return a.ints(index) if a.has(index) else None


@op("Squeeze")
def _squeeze(a: Args) -> Any:
    x = a.t(0)
    axes = _axes(a, 1)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    keep = [int(d) for i, d in enumerate(x.shape) if i not in {_axis(ax, x.dim()) for ax in axes}]
    return x.reshape(keep)


@op("Unsqueeze")
def _unsqueeze(a: Args) -> Any:
    x = a.t(0)
    axes = _axes(a, 1) or []
    rank = x.dim() + len(axes)
    shape = [int(d) for d in x.shape]
    for ax in sorted(_axis(ax, rank) for ax in axes):
        shape.insert(ax, 1)
    return x.reshape(shape)


@op("Concat")
def _concat(a: Args) -> Any:
    tensors = [a.t(i) for i in range(a.count()) if a.has(i)]
    tensors = [t for t in tensors if t.numel() > 0 or t.dim() > 1]  # ONNX allows empty 1-D pieces
    return _torch().cat(tensors, dim=int(a.attr("axis")))


@op("Split")
def _split(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 0)), x.dim())
    if a.attr("split") is not None:
        sizes = list(a.attr("split"))
    elif a.has(1):
        sizes = a.ints(1)
    else:
        parts = int(a.attr("num_outputs", len(a.node.outputs)))
        size = math.ceil(int(x.shape[axis]) / parts)
        sizes = [min(size, int(x.shape[axis]) - i * size) for i in range(parts)]
    return list(_torch().split(x, sizes, dim=axis))


@op("Slice")
def _slice(a: Args) -> Any:
    x = a.t(0)
    if a.opset < 10:
        starts, ends = list(a.attr("starts")), list(a.attr("ends"))
        axes = list(a.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = a.ints(1), a.ints(2)
        axes = a.ints(3) if a.has(3) else list(range(len(starts)))
        steps = a.ints(4) if a.has(4) else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, x.dim())
        size = int(x.shape[axis])
        picked = range(size)[slice(start, end, step)]  # ONNX clamps like Python slicing
        if step < 0:
            x = _torch().flip(x, [axis])
            picked = range(size - 1 - picked.start, size - 1 - picked.start + len(picked) * -step, -step) \
                if len(picked) else range(0, 0)
        index = [slice(None)] * x.dim()
        index[axis] = slice(picked.start, picked.start + len(picked) * picked.step, picked.step) if len(picked) \
            else slice(0, 0)
        x = x[tuple(index)]
    return x


@op("Gather")
def _gather(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 0)), x.dim())
    size = int(x.shape[axis])
    indices = a.const(1)
    if indices is not None:
        fixed = np.where(indices < 0, indices + size, indices).astype(np.int64)
        if fixed.ndim == 0:
            return x.select(axis, int(fixed))
        picked = x.index_select(axis, a.derived("indices", lambda: fixed.reshape(-1)))
        return picked.reshape(*x.shape[:axis], *fixed.shape, *x.shape[axis + 1:])
    ids = a.t(1).long()
    ids = _torch().where(ids < 0, ids + size, ids)
    if axis == 0 and x.dim() == 2:  # an embedding lookup
        return _F().embedding(ids, x)
    picked = x.index_select(axis, ids.reshape(-1))
    return picked.reshape(*x.shape[:axis], *ids.shape, *x.shape[axis + 1:])


@op("GatherElements")
def _gather_elements(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 0)), x.dim())
    ids = a.t(1).long()
    return _torch().gather(x, axis, _torch().where(ids < 0, ids + int(x.shape[axis]), ids))


@op("ReverseSequence")
def _reverse_sequence(a: Args) -> Any:
    """Each batch entry's first ``sequence_lens[b]`` steps reversed along the time axis, the rest
    in place (what TF exports write for the backward half of a bidirectional RNN over a mask): a
    gather with per-entry indices, so lengths computed from the data keep static shapes."""
    torch = _torch()
    x = a.t(0)
    if x.dtype == torch.bool:  # a mask: CoreML gathers numbers only
        return _reverse_sequence_of(x.to(torch.int32), a) != 0
    return _reverse_sequence_of(x, a)


def _reverse_sequence_of(x: Any, a: Args) -> Any:
    torch = _torch()
    batch_axis, time_axis = int(a.attr("batch_axis", 1)), int(a.attr("time_axis", 0))
    steps = int(x.shape[time_axis])
    lengths = a.t(1).long().reshape(-1)
    time = torch.arange(steps, dtype=torch.long)
    index = torch.where(time[None, :] < lengths[:, None], lengths[:, None] - 1 - time[None, :], time[None, :])
    shape = [1] * x.dim()
    shape[batch_axis], shape[time_axis] = int(x.shape[batch_axis]), steps
    order = [batch_axis, time_axis] if batch_axis < time_axis else [time_axis, batch_axis]
    index = index if order[0] == batch_axis else index.t()
    return torch.gather(x, time_axis, index.reshape(shape).expand(*x.shape))


@op("Expand")
def _expand(a: Args) -> Any:
    x = a.t(0)
    return x.expand(*np.broadcast_shapes(tuple(int(d) for d in x.shape), tuple(a.ints(1))))


@op("Tile")
def _tile(a: Args) -> Any:
    return a.t(0).repeat(*a.ints(1))


@op("Pad")
def _pad(a: Args) -> Any:
    x = a.t(0)
    rank = x.dim()
    mode = str(a.attr("mode", "constant"))
    if a.opset < 11:
        pads, value = list(a.attr("pads")), float(a.attr("value", 0.0))
    else:
        pads = a.ints(1)
        value = a.number(2) if a.has(2) else 0.0
        if value is None:
            raise DataDependent(f"ONNX node {a.node.name} (Pad) takes its fill value from the input data",
                                hint=OTHER_ROUTES)
    axes = [_axis(ax, rank) for ax in a.ints(3)] if a.has(3) else list(range(rank))
    begins, ends = [0] * rank, [0] * rank
    for k, ax in enumerate(axes):
        begins[ax], ends[ax] = pads[k], pads[k + len(axes)]
    first = next((i for i in range(rank) if begins[i] or ends[i]), rank)
    order = _torch_pad(begins[first:], ends[first:])
    if mode == "constant":
        return _F().pad(x, order, value=value)
    torch_mode = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
    if torch_mode is None:
        raise ConversionError(f"ONNX node {a.node.name}: Pad mode {mode!r} is not supported", hint=OTHER_ROUTES)
    if first >= 2 and 3 <= rank <= 5 and rank - first <= 3 and all(b >= 0 for b in begins) \
            and all(e >= 0 for e in ends):
        return _F().pad(x, order, mode=torch_mode)
    # any axis, any rank (a TF export's MirrorPad over the samples of [N, T] audio): one gather of
    # precomputed source indices per padded axis, which every converter has
    for axis in range(rank):
        if begins[axis] or ends[axis]:
            size = int(x.shape[axis])
            table = a.derived(f"pad{axis}", lambda s=size, b=begins[axis], e=ends[axis]: _pad_indices(mode, s, b, e))
            x = x.index_select(axis, table)
    return x


def _pad_indices(mode: str, size: int, begin: int, end: int) -> np.ndarray:
    """The source index of each position of an axis padded by ``begin``/``end`` (negative: cropped)."""
    positions = np.arange(-begin, size + end)
    if mode == "reflect":
        if size == 1:
            return np.zeros(len(positions), np.int64)
        period = 2 * (size - 1)
        folded = np.mod(positions, period)
        return np.where(folded < size, folded, period - folded).astype(np.int64)
    if mode == "edge":
        return np.clip(positions, 0, size - 1).astype(np.int64)
    return np.mod(positions, size).astype(np.int64)  # wrap


@op("DepthToSpace")
def _depth_to_space(a: Args) -> Any:
    x = a.t(0)
    b, c, h, w = (int(d) for d in x.shape)
    block = int(a.attr("blocksize"))
    if str(a.attr("mode", "DCR")) == "CRD":
        return _F().pixel_shuffle(x, block)
    y = x.reshape(b, block, block, c // (block * block), h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(b, c // (block * block), h * block, w * block)


@op("SpaceToDepth")
def _space_to_depth(a: Args) -> Any:
    x = a.t(0)
    b, c, h, w = (int(d) for d in x.shape)
    block = int(a.attr("blocksize"))
    y = x.reshape(b, c, h // block, block, w // block, block).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(b, c * block * block, h // block, w // block)


# --- reductions ------------------------------------------------------------------------------------


def _reduce(a: Args) -> Any:
    torch = _torch()
    x = a.t(0)
    axes = list(a.attr("axes")) if a.attr("axes") is not None else (a.ints(1) if a.has(1) else None)
    keep = bool(a.attr("keepdims", 1))
    if not axes:
        if a.attr("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.dim()))
    dims = tuple(sorted(_axis(ax, x.dim()) for ax in axes))
    kind = a.node.op
    if kind == "ReduceMean":
        return x.mean(dim=dims, keepdim=keep)
    if kind == "ReduceSum":
        return x.sum(dim=dims, keepdim=keep)
    if kind == "ReduceMax":
        return torch.amax(x, dim=dims, keepdim=keep)
    if kind == "ReduceMin":
        return torch.amin(x, dim=dims, keepdim=keep)
    if kind == "ReduceSumSquare":
        return (x * x).sum(dim=dims, keepdim=keep)
    if kind == "ReduceL2":
        return torch.sqrt((x * x).sum(dim=dims, keepdim=keep))
    if kind == "ReduceL1":
        return x.abs().sum(dim=dims, keepdim=keep)
    if kind == "ReduceLogSumExp":
        return torch.logsumexp(x, dim=dims, keepdim=keep)
    result = x  # ReduceProd
    for dim in sorted(dims, reverse=True):
        result = result.prod(dim=dim, keepdim=keep)
    return result


for _name in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL2",
              "ReduceL1", "ReduceLogSumExp"):
    OPS[_name] = _reduce


@op("ArgMax", "ArgMin")
def _arg_extreme(a: Args) -> Any:
    torch = _torch()
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 0)), x.dim())
    keep = bool(a.attr("keepdims", 1))
    function = torch.argmax if a.node.op == "ArgMax" else torch.argmin
    if a.attr("select_last_index", 0):
        return int(x.shape[axis]) - 1 - function(torch.flip(x, [axis]), dim=axis, keepdim=keep)
    return function(x, dim=axis, keepdim=keep)


@op("TopK")
def _top_k(a: Args) -> Any:
    x = a.t(0)
    k = a.ints(1)[0] if a.opset >= 10 else int(a.attr("k"))
    values, indices = _torch().topk(x, k, dim=int(a.attr("axis", -1)), largest=bool(a.attr("largest", 1)),
                                    sorted=bool(a.attr("sorted", 1)))
    return values, indices


@op("CumSum")
def _cumsum(a: Args) -> Any:
    torch = _torch()
    x = a.t(0)
    axis = _axis(a.ints(1)[0], x.dim())
    if a.attr("reverse", 0):
        x = torch.flip(x, [axis])
    y = torch.cumsum(x, dim=axis)
    if a.attr("exclusive", 0):
        y = y - x
    return torch.flip(y, [axis]) if a.attr("reverse", 0) else y


@op("OneHot")
def _one_hot(a: Args) -> Any:
    """Byte or token features: ``indices == arange(depth)`` (a comparison and a select, which every
    target quantizes around), never a one_hot op (TFLite's has no INT8 operand)."""
    torch = _torch()
    indices = a.t(0).long()
    depth = a.number(1)
    values = a.const(2)
    if depth is None or values is None:
        raise DataDependent(f"ONNX node {a.node.name} (OneHot) takes its depth or values from the input data",
                            hint=OTHER_ROUTES)
    depth = int(depth)
    off, on = (float(v) for v in np.asarray(values).reshape(-1)[:2])
    indices = torch.where(indices < 0, indices + depth, indices)  # ONNX: negative indices count from the end
    classes = a.derived("classes", lambda: np.arange(depth, dtype=np.int64))
    hot = indices.unsqueeze(-1) == classes
    result = torch.where(hot, torch.tensor(on), torch.tensor(off))
    axis = int(a.attr("axis", -1))
    rank = result.dim()
    return result if axis in (-1, rank - 1) else result.movedim(-1, _axis(axis, rank))
