"""Layers: matrix products, normalizations, softmax, convolutions and pooling."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ConversionError, OTHER_ROUTES
from .graph import Args
from .registry import _axis, _F, _torch, _torch_pad, op


# --- linear algebra and normalization --------------------------------------------------------------


@op("MatMul")
def _matmul(a: Args) -> Any:
    return _torch().matmul(a.t(0), a.t(1))


@op("Gemm")
def _gemm(a: Args) -> Any:
    x, w = a.t(0), a.t(1)
    if a.attr("transB", 0) and not a.attr("transA", 0) and float(a.attr("alpha", 1.0)) == 1.0 \
            and float(a.attr("beta", 1.0)) == 1.0 and x.dim() == 2 and (not a.has(2) or a.t(2).dim() == 1):  # a linear layer, as quantizers know it
        return _F().linear(x, w, a.t(2) if a.has(2) else None)
    if a.attr("transA", 0):
        x = x.t()
    if a.attr("transB", 0):
        w = w.t()
    y = _torch().matmul(x, w) * float(a.attr("alpha", 1.0))
    if a.has(2):
        y = y + float(a.attr("beta", 1.0)) * a.t(2)
    return y


@op("Einsum")
def _einsum(a: Args) -> Any:
    return _torch().einsum(str(a.attr("equation")), *[a.t(i) for i in range(a.count())])


@op("BatchNormalization")
def _batch_norm(a: Args) -> Any:
    return _F().batch_norm(a.t(0), a.t(3), a.t(4), a.t(1), a.t(2), training=False,
                           eps=float(a.attr("epsilon", 1e-5)))


@op("InstanceNormalization")
def _instance_norm(a: Args) -> Any:
    return _F().instance_norm(a.t(0), weight=a.t(1), bias=a.t(2), eps=float(a.attr("epsilon", 1e-5)))


@op("LayerNormalization")
def _layer_norm(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", -1)), x.dim())
    normalized = tuple(x.shape[axis:])
    eps = float(a.attr("epsilon", 1e-5))
    scale = a.t(1)
    bias = a.t(2) if a.has(2) else None
    if tuple(scale.shape) == normalized and (bias is None or tuple(bias.shape) == normalized):
        return _F().layer_norm(x, normalized, scale, bias, eps)
    dims = tuple(range(axis, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (x - mean) / _torch().sqrt(variance + eps) * scale
    return y + bias if bias is not None else y


@op("LRN")
def _lrn(a: Args) -> Any:
    return _F().local_response_norm(a.t(0), int(a.attr("size")), float(a.attr("alpha", 1e-4)),
                                    float(a.attr("beta", 0.75)), float(a.attr("bias", 1.0)))


@op("Softmax", "LogSoftmax")
def _softmax(a: Args) -> Any:
    x = a.t(0)
    function = _torch().softmax if a.node.op == "Softmax" else _torch().log_softmax
    axis = _axis(int(a.attr("axis", -1 if a.opset >= 13 else 1)), x.dim())
    if a.opset >= 13 or axis == x.dim() - 1:
        return function(x, axis)
    shape = tuple(x.shape)  # before opset 13: over the input flattened to 2-D at axis
    return function(x.reshape(math.prod(shape[:axis]), -1), 1).reshape(shape)


# --- convolution and pooling ---------------------------------------------------------------------


def _padding(a: Args, spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> tuple[list[int], list[int]]:
    """Begin and end padding per spatial dimension (ONNX pads or auto_pad)."""
    n = len(spatial)
    auto_pad = str(a.attr("auto_pad", "NOTSET"))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        return begins, ends
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    pads = list(a.attr("pads", [0] * (2 * n)))
    return pads[:n], pads[n:]


def _conv_inputs(a: Args) -> tuple[Any, Any, Any, int, list[int], list[int], list[int]]:
    """Input, weight, bias, spatial rank, kernel, strides and dilations of a (transposed) convolution."""
    x, w = a.t(0), a.t(1)
    n = w.dim() - 2
    return (x, w, a.t(2) if a.has(2) else None, n, list(w.shape[2:]), list(a.attr("strides", [1] * n)),
            list(a.attr("dilations", [1] * n)))


@op("Conv")
def _conv(a: Args) -> Any:
    x, w, bias, n, kernel, strides, dilations = _conv_inputs(a)
    begins, ends = _padding(a, list(x.shape[2:]), kernel, strides, dilations)
    if begins != ends:
        x, begins = _F().pad(x, _torch_pad(begins, ends)), [0] * n
    function = {1: _F().conv1d, 2: _F().conv2d, 3: _F().conv3d}[n]
    return function(x, w, bias, stride=strides, padding=begins, dilation=dilations, groups=int(a.attr("group", 1)))


@op("ConvTranspose")
def _conv_transpose(a: Args) -> Any:
    x, w, bias, n, kernel, strides, dilations = _conv_inputs(a)
    output_padding = list(a.attr("output_padding", [0] * n))
    spatial = list(x.shape[2:])
    full = [s * (i - 1) + extra + (k - 1) * d + 1
            for i, s, k, d, extra in zip(spatial, strides, kernel, dilations, output_padding)]
    if a.attr("output_shape") is not None:
        wanted = list(a.attr("output_shape"))[-n:]
        totals = [f - o for f, o in zip(full, wanted)]
        upper = str(a.attr("auto_pad", "NOTSET")) == "SAME_UPPER"
        begins = [t - t // 2 if upper else t // 2 for t in totals]
        ends = [t - b for t, b in zip(totals, begins)]
    elif str(a.attr("auto_pad", "NOTSET")) in ("SAME_UPPER", "SAME_LOWER"):
        totals = [f - i * s for f, i, s in zip(full, spatial, strides)]
        upper = str(a.attr("auto_pad")) == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
        ends = [t - b for t, b in zip(totals, begins)]
    else:
        pads = list(a.attr("pads", [0] * (2 * n)))
        begins, ends = pads[:n], pads[n:]
    function = {1: _F().conv_transpose1d, 2: _F().conv_transpose2d, 3: _F().conv_transpose3d}[n]
    groups = int(a.attr("group", 1))
    if begins == ends:
        return function(x, w, bias, stride=strides, padding=begins, output_padding=output_padding, groups=groups,
                        dilation=dilations)
    y = function(x, w, bias, stride=strides, padding=0, output_padding=output_padding, groups=groups,
                 dilation=dilations)
    index = [slice(None), slice(None)] + [slice(b, f - e) for b, e, f in zip(begins, ends, full)]
    return y[tuple(index)]


def _pool_geometry(a: Args, x: Any) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    kernel = list(a.attr("kernel_shape"))
    n = len(kernel)
    strides = list(a.attr("strides", [1] * n))
    dilations = list(a.attr("dilations", [1] * n))
    begins, ends = _padding(a, list(x.shape[2:]), kernel, strides, dilations)
    return kernel, strides, dilations, begins, ends


@op("MaxPool")
def _max_pool(a: Args) -> Any:
    if len(a.node.outputs) > 1 and a.node.outputs[1]:
        raise ConversionError(f"ONNX node {a.node.name}: MaxPool with an Indices output is not supported",
                              hint=OTHER_ROUTES)
    x = a.t(0)
    kernel, strides, dilations, begins, ends = _pool_geometry(a, x)
    n = len(kernel)
    if begins != ends or any(b > k // 2 for b, k in zip(begins, kernel)):
        x, begins = _F().pad(x, _torch_pad(begins, ends), value=float("-inf")), [0] * n
    function = {1: _F().max_pool1d, 2: _F().max_pool2d, 3: _F().max_pool3d}[n]
    return function(x, kernel, strides, begins, dilations, ceil_mode=bool(a.attr("ceil_mode", 0)))


@op("AveragePool")
def _average_pool(a: Args) -> Any:
    x = a.t(0)
    kernel, strides, dilations, begins, ends = _pool_geometry(a, x)
    n = len(kernel)
    include = bool(a.attr("count_include_pad", 0))
    if any(d != 1 for d in dilations):
        raise ConversionError(f"ONNX node {a.node.name}: AveragePool with dilations is not supported",
                              hint=OTHER_ROUTES)
    function = {1: _F().avg_pool1d, 2: _F().avg_pool2d, 3: _F().avg_pool3d}[n]
    ceil_mode = bool(a.attr("ceil_mode", 0))
    if begins == ends and all(b <= k // 2 for b, k in zip(begins, kernel)):
        return function(x, kernel, strides, begins, ceil_mode=ceil_mode, count_include_pad=include)
    spatial = [int(d) for d in x.shape[2:]]
    summed = function(_F().pad(x, _torch_pad(begins, ends)), kernel, strides, 0, ceil_mode=ceil_mode,
                      count_include_pad=True)
    if include:
        return summed
    # uneven padding left out of the average: rescale by each window's share of real pixels
    shape = [int(d) for d in summed.shape[2:]]
    share = a.derived("share", lambda: _window_share(spatial, shape, kernel, strides, begins))
    return summed / share


def _window_share(spatial: list[int], out: list[int], kernel: list[int], strides: list[int],
                  begins: list[int]) -> np.ndarray:
    """The fraction of each pooling window that lies inside the input (padding excluded)."""
    share = np.ones([1, 1], np.float32)
    for size, o, k, s, b in zip(spatial, out, kernel, strides, begins):
        start = np.arange(o) * s - b
        inside = np.clip(start + k, 0, size) - np.clip(start, 0, size)
        share = share[..., None] * (inside / k).astype(np.float32)
    return share


@op("GlobalAveragePool")
def _global_average_pool(a: Args) -> Any:
    x = a.t(0)
    return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@op("GlobalMaxPool")
def _global_max_pool(a: Args) -> Any:
    x = a.t(0)
    return _torch().amax(x, dim=tuple(range(2, x.dim())), keepdim=True)
