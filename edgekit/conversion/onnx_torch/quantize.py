"""QuantizeLinear / DequantizeLinear kept as PyTorch's quantize ops (``quantized_decomposed``, the
ops PT2E's ``convert_pt2e`` writes), for converters that carry them into their own int8
arithmetic: coremltools turns them into Core ML quantize / dequantize ops (and an int8 weight
behind a dequantize into ``constexpr_affine_dequantize``), ExecuTorch's XNNPACK delegate into
its int8 kernels. The scales and zero points are the graph's, never chosen again.

Only where the rebuild keeps a QDQ graph's pairs (``load(..., keep_qdq=True)``); otherwise a
QDQ graph is rebuilt as the float graph it simulates (``conversion.quantized.strip_qdq``).

uint8 pairs become int8 ones with the zero point moved by -128 (the same values, the signed type
Core ML's and XNNPACK's int8 kernels take); a range narrower than its type (``reduce_range``: a
Clip between the pair, folded before the rebuild) becomes a clamp before the quantize op on the
type's full range: the same values, in a form converters keep (Core ML's quantize has no
quant_min/max).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ConversionError, OTHER_ROUTES
from .graph import Args
from .registry import _torch, op

_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def _ops() -> Any:
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed

    return _torch().ops.quantized_decomposed


def _parameters(a: Args) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """(scale, zero point as int8, quant_min, quant_max, axis): uint8 moved to int8."""
    scale = a.const(1)
    if scale is None or (a.has(2) and a.const(2) is None):
        raise ConversionError(f"ONNX node {a.node.name} ({a.node.op}) has a scale or zero point computed from the "
                              "input data", hint=OTHER_ROUTES)
    zero = a.const(2) if a.has(2) else np.zeros((), np.uint8)
    kind = "uint8" if zero.dtype == np.uint8 else "int8" if zero.dtype == np.int8 else None
    if kind is None:
        raise ConversionError(f"ONNX node {a.node.name} ({a.node.op}) quantizes to {zero.dtype}; the converters "
                              "after this rebuild keep 8-bit pairs only", hint=OTHER_ROUTES)
    low, high = _RANGES[kind]
    low, high = max(low, int(a.attr("edgekit_qmin", low))), min(high, int(a.attr("edgekit_qmax", high)))
    shift = 128 if kind == "uint8" else 0
    zero = zero.astype(np.int32) - shift
    return (np.asarray(scale, np.float32).reshape(-1), zero.reshape(-1), low - shift, high - shift,
            int(a.attr("axis", 1)))


@op("QuantizeLinear")
def _quantize(a: Args) -> Any:
    torch, ops = _torch(), _ops()
    scale, zero, low, high, axis = _parameters(a)
    x = a.t(0)
    if scale.size == 1:
        if (low, high) != (-128, 127) and a.const(0) is None:
            # a narrower range (reduce_range): the source clips there
            step, point = float(scale[0]), int(zero[0])
            x = x.clamp((low - point) * step, (high - point) * step)
        return ops.quantize_per_tensor(x, float(scale[0]), int(zero[0]), -128, 127, torch.int8)
    if a.const(0) is None:  # per-channel activations: no converter after this takes them
        raise ConversionError(f"ONNX node {a.node.name} quantizes an activation per channel; the converters after "
                              "this rebuild take per-tensor activation ranges only", hint=OTHER_ROUTES)
    return ops.quantize_per_channel(x, torch.from_numpy(scale.astype(np.float64)), torch.from_numpy(zero.astype(np.int64)),
                                    axis % x.dim(), low, high, torch.int8)


@op("DequantizeLinear")
def _dequantize(a: Args) -> Any:
    torch, ops = _torch(), _ops()
    x = a.t(0)
    if x.dtype == torch.int32:  # a bias on scale s_input x s_weight: folded into its float values
        scale = torch.from_numpy(np.array(a.const(1), np.float32))
        zero = torch.from_numpy(np.array(a.const(2), np.float32)) if a.has(2) else torch.zeros(())
        return (x.to(torch.float32) - zero) * scale
    scale, zero, low, high, axis = _parameters(a)
    if x.dtype == torch.uint8:  # an unsigned constant (weight): the same values as int8, zero point moved
        x = (x.to(torch.int16) - 128).to(torch.int8)
    elif x.dtype != torch.int8:
        raise ConversionError(f"ONNX node {a.node.name} dequantizes {x.dtype}; the converters after this rebuild "
                              "keep 8-bit pairs only", hint=OTHER_ROUTES)
    if scale.size == 1:
        return ops.dequantize_per_tensor(x, float(scale[0]), int(zero[0]), -128, 127, torch.int8)
    return ops.dequantize_per_channel(x, a.derived("scale", lambda: scale.astype(np.float32)),
                                      a.derived("zero_point", lambda: zero.astype(np.int64)), axis % x.dim(), low,
                                      high, torch.int8)
