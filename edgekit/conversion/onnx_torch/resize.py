"""Resize and Upsample with ONNX's coordinate modes: ``F.interpolate`` where it samples exactly
where ONNX does, index gathers with the exact ONNX coordinates otherwise."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import ConversionError, OTHER_ROUTES
from .graph import Args
from .registry import _F, op


# --- resizing ------------------------------------------------------------------------------------


def _source_coordinates(mode: str, out: int, size: int, scale: float) -> np.ndarray:
    """Where each output pixel samples the input, per ONNX's coordinate_transformation_mode."""
    i = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    if mode == "align_corners":
        return i * (size - 1) / (out - 1) if out > 1 else np.zeros(out)
    if mode == "asymmetric":
        return i / scale
    raise ConversionError(f"Resize coordinate_transformation_mode {mode!r} is not supported",
                          hint=OTHER_ROUTES)


def _nearest(coordinates: np.ndarray, mode: str, size: int) -> np.ndarray:
    if mode == "floor":
        picked = np.floor(coordinates)
    elif mode == "ceil":
        picked = np.ceil(coordinates)
    elif mode == "round_prefer_ceil":
        picked = np.floor(coordinates + 0.5)
    else:  # round_prefer_floor, the default
        picked = np.ceil(coordinates - 0.5)
    return np.clip(picked, 0, size - 1).astype(np.int64)


@op("Resize", "Upsample")
def _resize(a: Args) -> Any:
    x = a.t(0)
    shape = [int(d) for d in x.shape]
    mode = str(a.attr("mode", "nearest"))
    if a.node.op == "Upsample":
        scales = [float(s) for s in (a.attr("scales") or a.const(1))]
        transform, nearest_mode = "asymmetric", "floor"
    else:
        if a.attr("antialias", 0) or a.attr("axes") is not None:
            raise ConversionError(f"ONNX node {a.node.name}: Resize with antialias or axes is not supported",
                                  hint=OTHER_ROUTES)
        transform = str(a.attr("coordinate_transformation_mode", "half_pixel"))
        nearest_mode = str(a.attr("nearest_mode", "round_prefer_floor"))
        sizes = a.ints(3) if a.has(3) and a.const(3) is not None and a.const(3).size else None
        scale_index = 2 if a.opset >= 11 else 1
        if sizes is not None:
            scales = [o / i for o, i in zip(sizes, shape)]
        else:
            scales = [float(s) for s in np.asarray(a.const(scale_index)).reshape(-1)]
            if a.const(scale_index) is None:
                a.ints(scale_index)  # raises the data-dependent error
    if len(scales) != len(shape):
        raise ConversionError(f"ONNX node {a.node.name}: Resize scales {scales} do not match rank {len(shape)}")
    out = [int(math.floor(i * s + 1e-9)) for i, s in zip(shape, scales)] if a.node.op == "Upsample" or \
        not (a.has(3) and a.const(3) is not None and a.const(3).size) else a.ints(3)
    if out[:2] != shape[:2]:
        raise ConversionError(f"ONNX node {a.node.name}: Resize of the batch or channel axis is not supported",
                              hint=OTHER_ROUTES)
    if mode not in ("nearest", "linear"):
        raise ConversionError(f"ONNX node {a.node.name}: Resize mode {mode!r} is not supported (nearest, linear)",
                              hint=OTHER_ROUTES)
    spatial = list(range(2, len(shape)))
    coordinates = {d: _source_coordinates(transform, out[d], shape[d], scales[d]) for d in spatial}
    torch_mode = _matching_interpolate(mode, coordinates, nearest_mode, shape, out)
    if torch_mode is not None and len(spatial) in (1, 2, 3):
        torch_name, align = torch_mode
        if mode == "linear":
            torch_name = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(spatial)]
        return _F().interpolate(x, size=[out[d] for d in spatial], mode=torch_name,
                                **({"align_corners": align} if mode == "linear" else {}))
    for d in spatial:  # exact ONNX sampling with gathers where no interpolate mode matches
        size = shape[d]
        if mode == "nearest":
            x = x.index_select(d, a.derived(f"nearest{d}", lambda: _nearest(coordinates[d], nearest_mode, size)))
            continue
        c = np.clip(coordinates[d], 0, size - 1)
        low = np.floor(c).astype(np.int64)
        high = np.minimum(low + 1, size - 1)
        weight_shape = [1] * len(shape)
        weight_shape[d] = out[d]
        weight = a.derived(f"weight{d}", lambda: (c - low).astype(np.float32).reshape(weight_shape))
        x = x.index_select(d, a.derived(f"low{d}", lambda: low)) * (1 - weight) + \
            x.index_select(d, a.derived(f"high{d}", lambda: high)) * weight
    return x


def _matching_interpolate(mode: str, coordinates: dict[int, np.ndarray], nearest_mode: str, shape: list[int],
                          out: list[int]) -> tuple[str, bool] | None:
    """The F.interpolate mode that samples exactly where ONNX does, if any."""
    if mode == "nearest":
        for torch_mode, offset in (("nearest", 0.0), ("nearest-exact", 0.5)):
            if all(np.array_equal(_nearest(coordinates[d], nearest_mode, shape[d]),
                                  np.clip(np.floor((np.arange(out[d]) + offset) * shape[d] / out[d]), 0,
                                          shape[d] - 1).astype(np.int64)) for d in coordinates):
                return torch_mode, False
        return None
    for align in (False, True):
        matches = True
        for d, wanted in coordinates.items():
            i = np.arange(out[d], dtype=np.float64)
            if align:
                theirs = i * (shape[d] - 1) / (out[d] - 1) if out[d] > 1 else np.zeros(out[d])
            else:
                theirs = np.maximum((i + 0.5) * shape[d] / out[d] - 0.5, 0)
            if not np.allclose(np.clip(wanted, 0, shape[d] - 1), np.clip(theirs, 0, shape[d] - 1), atol=1e-6):
                matches = False
        if matches:
            return "linear", align
    return None
