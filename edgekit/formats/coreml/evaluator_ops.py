"""More MIL ops for the NumPy evaluator (``evaluator.py``): what detector, audio, recurrent and
super-resolution models convert to. Resizing (nearest and bilinear, every sampling mode),
transposed convolution, PReLU with per-channel slopes, LSTM / GRU / RNN, norms and reductions,
activations, depth/space rearrangements and integer/shape ops.

Registered by ``evaluator.py`` (``OPS.update(EXTRA_OPS)``). Each follows the op's definition in coremltools' MIL op set (``coremltools.converters.mil.mil.ops
.defs``: its documented parameters, defaults and gate orders) and is tested against the same op
run by PyTorch or ONNX Runtime (tests/formats/test_coreml_eval_ops.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .mil_arrays import EvaluatorError, _f


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


# --- resizing -------------------------------------------------------------------------------


def _nearest(x: np.ndarray, out_h: int, out_w: int, scale_h: float, scale_w: float) -> np.ndarray:
    """Nearest neighbour: output pixel i reads input floor(i / scale), clipped to the input."""
    h, w = x.shape[-2:]
    rows = np.minimum((np.arange(out_h) / scale_h).astype(np.int64), h - 1)
    cols = np.minimum((np.arange(out_w) / scale_w).astype(np.int64), w - 1)
    return x[..., rows[:, None], cols[None, :]]


def _upsample_nearest(x: Any, scale_factor_height: Any = 1, scale_factor_width: Any = 1) -> np.ndarray:
    x = _f(x)
    sh, sw = float(scale_factor_height), float(scale_factor_width)
    return _nearest(x, int(np.floor(x.shape[-2] * sh)), int(np.floor(x.shape[-1] * sw)), sh, sw)


def _resize_nearest(x: Any, target_size_height: Any = 1, target_size_width: Any = 1) -> np.ndarray:
    x = _f(x)
    oh, ow = int(target_size_height), int(target_size_width)
    return _nearest(x, oh, ow, oh / x.shape[-2], ow / x.shape[-1])


def _grid(size_in: int, size_out: int, mode: str) -> np.ndarray:
    """The input coordinates sampled for each output position (coremltools' sampling modes)."""
    i = np.arange(size_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if size_out == 1:
            points = np.full(1, (size_in - 1) / 2 if mode == "ALIGN_CORNERS" else 0.0)
        else:
            points = i * (size_in - 1) / (size_out - 1)
    elif mode == "DEFAULT":
        points = i * ((size_in - size_in / size_out) / (size_out - 1)) if size_out > 1 else np.zeros(1)
    elif mode == "OFFSET_CORNERS":
        delta = max(1, size_in - 1) / size_out
        points = 0.5 * delta + i * delta
    elif mode == "UNALIGN_CORNERS":
        spacing = size_in / size_out
        points = i * spacing + 0.5 * spacing - 0.5
    elif mode == "HALF_PIXEL_OFF":  # align_corners and half-pixel centres both off: TF's legacy resize
        points = i * size_in / size_out
    else:
        raise EvaluatorError(f"resize sampling mode {mode!r} is not supported by the evaluator")
    return np.clip(points, 0, size_in - 1)


def _bilinear(x: np.ndarray, out_h: int, out_w: int, mode: str) -> np.ndarray:
    h, w = x.shape[-2:]
    ys, xs = _grid(h, out_h, mode), _grid(w, out_w, mode)
    y0, x0 = np.floor(ys).astype(np.int64), np.floor(xs).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    wy, wx = (ys - y0)[:, None], (xs - x0)[None, :]
    x64 = x.astype(np.float64)
    top = x64[..., y0[:, None], x0[None, :]] * (1 - wx) + x64[..., y0[:, None], x1[None, :]] * wx
    bottom = x64[..., y1[:, None], x0[None, :]] * (1 - wx) + x64[..., y1[:, None], x1[None, :]] * wx
    return (top * (1 - wy) + bottom * wy).astype(np.float32)


def _upsample_bilinear(x: Any, scale_factor_height: Any = 1, scale_factor_width: Any = 1,
                       align_corners: Any = True, half_pixel_centers: Any = None) -> np.ndarray:
    x = _f(x)
    align = bool(align_corners)
    half = (not align) if half_pixel_centers is None else bool(half_pixel_centers)
    mode = "STRICT_ALIGN_CORNERS" if align else ("UNALIGN_CORNERS" if half else "HALF_PIXEL_OFF")
    out_h = int(np.floor(x.shape[-2] * float(scale_factor_height)))
    out_w = int(np.floor(x.shape[-1] * float(scale_factor_width)))
    return _bilinear(x, out_h, out_w, mode)


def _resize_bilinear(x: Any, target_size_height: Any = 1, target_size_width: Any = 1,
                     sampling_mode: str = "DEFAULT") -> np.ndarray:
    return _bilinear(_f(x), int(target_size_height), int(target_size_width), str(sampling_mode))


def _resize(x: Any, shape: Any, resized_dims: Any, interpolation_mode: str = "LINEAR",
            sampling_mode: str = "DEFAULT") -> np.ndarray:
    """iOS 17's resize: the last ``resized_dims`` dimensions (at most 2) to ``shape``'s last ones."""
    x = _f(x)
    dims = int(resized_dims)
    sizes = _ints(shape)[-dims:] if dims else []
    if dims not in (1, 2):
        raise EvaluatorError(f"resize of {dims} dimensions is not supported by the evaluator")
    out_h, out_w = (x.shape[-2], *sizes) if dims == 1 else sizes
    if str(interpolation_mode) == "NEAREST_NEIGHBOR":
        return _nearest(x, out_h, out_w, out_h / x.shape[-2], out_w / x.shape[-1])
    return _bilinear(x, out_h, out_w, str(sampling_mode))


# --- transposed convolution -----------------------------------------------------------------


def _conv_transpose(x: Any, weight: Any, bias: Any = None, pad: Any = None, output_shape: Any = None,
                    pad_type: str = "valid", strides: Any = None, dilations: Any = None, groups: Any = 1) -> np.ndarray:
    """Scatter-add of each input pixel times the kernel, then the padding cropped (1-D and 2-D)."""
    x, w = _f(x), _f(weight)
    if x.ndim == 3:  # 1-D: the 2-D op over a unit height
        out = None if output_shape is None else [*_ints(output_shape)[:2], 1, _ints(output_shape)[-1]]
        pad2 = None if pad is None else [0, 0, *_ints(pad)]
        s2 = None if strides is None else [1, *_ints(strides)]
        d2 = None if dilations is None else [1, *_ints(dilations)]
        return _conv_transpose(x[:, :, None, :], w[:, :, None, :], bias, pad2, out, pad_type, s2, d2, groups)[:, :, 0]
    if x.ndim != 4:
        raise EvaluatorError(f"conv_transpose with {x.ndim - 2}-D input is not supported by the evaluator")
    n, cin, h, wd = x.shape
    g = int(groups)
    kh, kw = w.shape[2:]
    cout = w.shape[1] * g
    sh, sw = _ints(strides) if strides is not None else (1, 1)
    dh, dw = _ints(dilations) if dilations is not None else (1, 1)
    full_h, full_w = (h - 1) * sh + (kh - 1) * dh + 1, (wd - 1) * sw + (kw - 1) * dw + 1
    y = np.zeros((n, cout, full_h, full_w), np.float64)
    per = cin // g
    for group in range(g):
        xs = x[:, group * per:(group + 1) * per].astype(np.float64)  # n, per, h, w
        ws = w[group * per:(group + 1) * per].astype(np.float64)  # per, cout/g, kh, kw
        contribution = np.einsum("nchw,cokl->nohwkl", xs, ws)
        for i in range(kh):
            for j in range(kw):
                y[:, group * (cout // g):(group + 1) * (cout // g), i * dh:i * dh + (h - 1) * sh + 1:sh,
                  j * dw:j * dw + (wd - 1) * sw + 1:sw] += contribution[..., i, j]
    kind = str(pad_type)
    if output_shape is not None:
        out_h, out_w = _ints(output_shape)[-2:]
        top = _ints(pad)[0] if kind == "custom" and pad is not None else max(0, full_h - out_h) // 2
        left = _ints(pad)[2] if kind == "custom" and pad is not None else max(0, full_w - out_w) // 2
        y = y[:, :, top:top + out_h, left:left + out_w]
    elif kind == "custom":
        p = _ints(pad) if pad is not None else [0, 0, 0, 0]
        y = y[:, :, p[0]:full_h - p[1], p[2]:full_w - p[3]]
    elif kind == "same":
        out_h, out_w = h * sh, wd * sw
        top, left = max(0, full_h - out_h) // 2, max(0, full_w - out_w) // 2
        y = y[:, :, top:top + out_h, left:left + out_w]
    elif kind != "valid":
        raise EvaluatorError(f"conv_transpose pad_type {kind!r} is not supported by the evaluator")
    if bias is not None:
        y = y + _f(bias).reshape(1, -1, 1, 1)
    return y.astype(np.float32)


# --- recurrent ------------------------------------------------------------------------------


def _activation(name: Any, alpha: float = 1.0, beta: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    found = {
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "tanh": np.tanh,
        "relu": lambda v: np.maximum(v, 0),
        "linear": lambda v: v,
        "hard_sigmoid": lambda v: np.clip(0.2 * v + 0.5, 0, 1),
        "scaled_tanh": lambda v: alpha * np.tanh(beta * v),
    }.get(str(name))
    if found is None:
        raise EvaluatorError(f"recurrent activation {name!r} is not supported by the evaluator")
    return found


def _run_lstm(x: np.ndarray, h: np.ndarray, c: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, bias: Any,
              peephole: Any, reverse: bool, gates: Callable, cell_act: Callable, out_act: Callable,
              clip: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One direction: gates in [input, forget, output, cell] order; peepholes [input, forget, output]."""
    hidden = w_hh.shape[1]
    b = np.zeros(4 * hidden) if bias is None else _f(bias).astype(np.float64)
    p = np.zeros(3 * hidden) if peephole is None else _f(peephole).astype(np.float64)
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    outputs = []
    for t in steps:
        z = x[t] @ w_ih.T + h @ w_hh.T + b
        zi, zf, zo, zc = np.split(z, 4, axis=-1)
        i = gates(zi + p[:hidden] * c)
        f = gates(zf + p[hidden:2 * hidden] * c)
        c = f * c + i * cell_act(zc)
        if clip is not None:
            c = np.clip(c, -float(clip), float(clip))
        o = gates(zo + p[2 * hidden:] * c)
        h = o * out_act(c)
        outputs.append(h)
    return np.stack(outputs), h, c


def _lstm(x: Any, initial_h: Any, initial_c: Any, weight_ih: Any, weight_hh: Any, bias: Any = None,
          peephole: Any = None, weight_ih_back: Any = None, weight_hh_back: Any = None, bias_back: Any = None,
          peephole_back: Any = None, direction: str = "forward", output_sequence: Any = False,
          recurrent_activation: str = "sigmoid", cell_activation: str = "tanh", activation: str = "tanh",
          clip: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x: [seq, batch, input]; states [batch, directions * hidden]; outputs (sequence or last step,
    last h, last c). A bidirectional LSTM's reverse half is aligned with the input's time steps."""
    xs = _f(x).astype(np.float64)
    h0, c0 = _f(initial_h).astype(np.float64), _f(initial_c).astype(np.float64)
    gates, cell_act, out_act = (_activation(a) for a in (recurrent_activation, cell_activation, activation))
    w_ih, w_hh = _f(weight_ih).astype(np.float64), _f(weight_hh).astype(np.float64)
    hidden = w_hh.shape[1]
    mode = str(direction)
    if mode == "bidirectional":
        seq_f, hf, cf = _run_lstm(xs, h0[:, :hidden], c0[:, :hidden], w_ih, w_hh, bias, peephole, False, gates,
                                  cell_act, out_act, clip)
        seq_b, hb, cb = _run_lstm(xs, h0[:, hidden:], c0[:, hidden:], _f(weight_ih_back).astype(np.float64),
                                  _f(weight_hh_back).astype(np.float64), bias_back, peephole_back, True, gates,
                                  cell_act, out_act, clip)
        seq_b = seq_b[::-1]  # aligned with the time steps
        sequence = np.concatenate([seq_f, seq_b], axis=-1)
        last = np.concatenate([seq_f[-1:], seq_b[:1]], axis=-1)
        h_out, c_out = np.concatenate([hf, hb], axis=-1), np.concatenate([cf, cb], axis=-1)
    elif mode in ("forward", "reverse"):
        sequence, h_out, c_out = _run_lstm(xs, h0, c0, w_ih, w_hh, bias, peephole, mode == "reverse", gates,
                                           cell_act, out_act, clip)
        last = sequence[-1:]
    else:
        raise EvaluatorError(f"lstm direction {mode!r} is not supported by the evaluator")
    out = sequence if bool(output_sequence) else last
    return out.astype(np.float32), h_out.astype(np.float32), c_out.astype(np.float32)


def _gru(x: Any, initial_h: Any, weight_ih: Any, weight_hh: Any, bias: Any = None, direction: str = "forward",
         output_sequence: Any = False, recurrent_activation: str = "sigmoid", activation: str = "tanh",
         reset_after: Any = False, input_bias: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Gates in [reset, output (new), update] order; the reset gate scales h before its matmul
    unless ``reset_after`` (iOS 18), where it scales the matmul with the hidden bias."""
    xs = _f(x).astype(np.float64)
    h = _f(initial_h).astype(np.float64)
    w_ih, w_hh = _f(weight_ih).astype(np.float64), _f(weight_hh).astype(np.float64)
    hidden = w_hh.shape[1]
    b = np.zeros(3 * hidden) if bias is None else _f(bias).astype(np.float64)
    bi = np.zeros(3 * hidden) if input_bias is None else _f(input_bias).astype(np.float64)
    gate, act = _activation(recurrent_activation), _activation(activation)
    wr, wo, wz = np.split(w_ih, 3)
    rr, ro, rz = np.split(w_hh, 3)
    br, bo, bz = np.split(b, 3)
    ir, io, iz = np.split(bi, 3)
    if str(direction) not in ("forward", "reverse"):
        raise EvaluatorError(f"gru direction {direction!r} is not supported by the evaluator")
    steps = range(xs.shape[0] - 1, -1, -1) if str(direction) == "reverse" else range(xs.shape[0])
    outputs = []
    for t in steps:
        xt = xs[t]
        z = gate(xt @ wz.T + iz + h @ rz.T + bz)
        r = gate(xt @ wr.T + ir + h @ rr.T + br)
        if bool(reset_after):
            o = act(xt @ wo.T + io + r * (h @ ro.T + bo))
        else:
            o = act(xt @ wo.T + io + (r * h) @ ro.T + bo)
        h = (1 - z) * o + z * h
        outputs.append(h)
    sequence = np.stack(outputs)
    out = sequence if bool(output_sequence) else sequence[-1:]
    return out.astype(np.float32), h.astype(np.float32)


def _rnn(x: Any, initial_h: Any, weight_ih: Any, weight_hh: Any, bias: Any = None, direction: str = "forward",
         output_sequence: Any = False, activation: str = "tanh") -> tuple[np.ndarray, np.ndarray]:
    xs = _f(x).astype(np.float64)
    h = _f(initial_h).astype(np.float64)
    w_ih, w_hh = _f(weight_ih).astype(np.float64), _f(weight_hh).astype(np.float64)
    b = np.zeros(w_hh.shape[0]) if bias is None else _f(bias).astype(np.float64)
    act = _activation(activation)
    steps = range(xs.shape[0] - 1, -1, -1) if str(direction) == "reverse" else range(xs.shape[0])
    outputs = []
    for t in steps:
        h = act(xs[t] @ w_ih.T + h @ w_hh.T + b)
        outputs.append(h)
    sequence = np.stack(outputs)
    return (sequence if bool(output_sequence) else sequence[-1:]).astype(np.float32), h.astype(np.float32)


# --- norms, reductions, activations ---------------------------------------------------------


def _axes(axes: Any) -> tuple[int, ...] | None:
    return None if axes is None else tuple(_ints(axes))


def _reduction(fn: Callable[[np.ndarray, Any], np.ndarray]) -> Callable[..., np.ndarray]:
    def reduce(x: Any, axes: Any = None, keep_dims: Any = False) -> np.ndarray:
        axis = _axes(axes)
        y = fn(_f(x).astype(np.float64), axis)
        if bool(keep_dims):
            y = np.expand_dims(y, axis if axis is not None else tuple(range(np.ndim(x))))
        return np.asarray(y, np.float32)

    return reduce


def _log_sum_exp(x: np.ndarray, axis: Any) -> np.ndarray:
    peak = np.max(x, axis=axis, keepdims=True)
    return np.log(np.sum(np.exp(x - peak), axis=axis)) + np.squeeze(peak, axis=axis)


def _arg(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def reduce(x: Any, axis: Any = -1, keep_dims: Any = False) -> np.ndarray:
        y = fn(np.asarray(x), axis=int(axis))
        return (np.expand_dims(y, int(axis)) if bool(keep_dims) else y).astype(np.int32)

    return reduce


def _l2_norm(x: Any, axes: Any = None, epsilon: Any = 1e-6) -> np.ndarray:
    """The last three dimensions normalised together per leading index (coremltools' definition)."""
    x = _f(x).astype(np.float64)
    flat = x.reshape(int(np.prod(x.shape[:-3])) if x.ndim > 3 else 1, -1)
    y = flat / np.sqrt(np.sum(flat * flat, axis=1, keepdims=True) + float(epsilon))
    return y.reshape(x.shape).astype(np.float32)


def _instance_norm(x: Any, gamma: Any = None, beta: Any = None, epsilon: Any = 1e-5) -> np.ndarray:
    x = _f(x).astype(np.float64)
    axes = tuple(range(2, x.ndim))
    y = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + float(epsilon))
    shape = [1, -1] + [1] * (x.ndim - 2)
    if gamma is not None:
        y = y * _f(gamma).reshape(shape)
    if beta is not None:
        y = y + _f(beta).reshape(shape)
    return y.astype(np.float32)


def _prelu(x: Any, alpha: Any) -> np.ndarray:
    """Per-channel slopes along axis 1 (``alpha``: [C])."""
    x = _f(x)
    slopes = _f(alpha).reshape([1, -1] + [1] * (x.ndim - 2))
    return np.where(x >= 0, x, x * slopes).astype(np.float32)


def _depth_to_space(x: Any, block_size: Any) -> np.ndarray:
    x = _f(x)
    b = int(block_size)
    n, c, h, w = x.shape
    return x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(x: Any, block_size: Any) -> np.ndarray:
    x = _f(x)
    b = int(block_size)
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


def _pixel_shuffle(x: Any, upscale_factor: Any) -> np.ndarray:
    x = _f(x)
    f = int(upscale_factor)
    n, c, h, w = x.shape
    return x.reshape(n, c // (f * f), f, f, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (f * f), h * f, w * f)


def _cumsum(x: Any, axis: Any = 0, exclusive: Any = False, reverse: Any = False) -> np.ndarray:
    x = np.asarray(x)
    axis = int(axis)
    y = np.flip(x, axis) if bool(reverse) else x
    y = np.cumsum(y, axis=axis)
    if bool(exclusive):
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.delete(y, -1, axis=axis)], axis=axis)
    return np.flip(y, axis) if bool(reverse) else y


def _topk(x: Any, k: Any = 1, axis: Any = -1, ascending: Any = False, sort: Any = True,
          return_indices: Any = True) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x)
    axis = int(axis)
    order = np.argsort(x if bool(ascending) else -x, axis=axis, kind="stable")
    indices = np.take(order, range(int(k)), axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices.astype(np.int32)


EXTRA_OPS: dict[str, Callable[..., Any]] = {
    "upsample_nearest_neighbor": _upsample_nearest,
    "resize_nearest_neighbor": _resize_nearest,
    "upsample_bilinear": _upsample_bilinear,
    "resize_bilinear": _resize_bilinear,
    "resize": _resize,
    "conv_transpose": _conv_transpose,
    "prelu": _prelu,
    "lstm": _lstm,
    "gru": _gru,
    "rnn": _rnn,
    "l2_norm": _l2_norm,
    "instance_norm": _instance_norm,
    "reduce_l2_norm": _reduction(lambda v, a: np.sqrt(np.sum(v * v, axis=a))),
    "reduce_l1_norm": _reduction(lambda v, a: np.sum(np.abs(v), axis=a)),
    "reduce_sum_square": _reduction(lambda v, a: np.sum(v * v, axis=a)),
    "reduce_log_sum": _reduction(lambda v, a: np.log(np.sum(v, axis=a))),
    "reduce_log_sum_exp": _reduction(_log_sum_exp),
    "reduce_argmax": _arg(np.argmax),
    "reduce_argmin": _arg(np.argmin),
    "elu": lambda x, alpha=1.0: np.where(_f(x) > 0, _f(x), float(alpha) * np.expm1(_f(x))).astype(np.float32),
    "softplus": lambda x: np.logaddexp(0, _f(x)).astype(np.float32),
    "softsign": lambda x: (_f(x) / (1 + np.abs(_f(x)))).astype(np.float32),
    "sigmoid_hard": lambda x, alpha=0.2, beta=0.5: np.clip(float(alpha) * _f(x) + float(beta), 0, 1).astype(np.float32),
    "thresholded_relu": lambda x, alpha=1.0: np.where(_f(x) > float(alpha), _f(x), 0).astype(np.float32),
    "clamped_relu": lambda x, alpha, beta: np.minimum(float(beta), np.where(_f(x) >= 0, _f(x), float(alpha) * _f(x))
                                                      ).astype(np.float32),
    "scaled_tanh": lambda x, alpha=1.0, beta=1.0: (float(alpha) * np.tanh(float(beta) * _f(x))).astype(np.float32),
    "linear_activation": lambda x, alpha=1.0, beta=0.0: (float(alpha) * _f(x) + float(beta)).astype(np.float32),
    "depth_to_space": _depth_to_space,
    "space_to_depth": _space_to_depth,
    "pixel_shuffle": _pixel_shuffle,
    "floor": lambda x: np.floor(_f(x)),
    "ceil": lambda x: np.ceil(_f(x)),
    "round": lambda x: np.round(_f(x)),
    "sign": lambda x: np.sign(np.asarray(x)),
    "inverse": lambda x, epsilon=1e-4: (1 / (_f(x) + np.float32(epsilon))).astype(np.float32),
    "mod": lambda x, y: np.mod(np.asarray(x), np.asarray(y)),
    "logical_xor": lambda x, y: np.logical_xor(np.asarray(x, bool), np.asarray(y, bool)),
    "cumsum": _cumsum,
    "topk": _topk,
    "shape": lambda x: np.asarray(np.shape(x), np.int32),
    "fill": lambda shape, value=0.0: np.full(_ints(shape), value, dtype=np.asarray(value).dtype
                                             if np.asarray(value).dtype.kind != "f" else np.float32),
    "range_1d": lambda end, start, step: np.arange(np.asarray(start).item(), np.asarray(end).item(),
                                                   np.asarray(step).item()),
}

__all__ = ["EXTRA_OPS"]
