"""A NumPy reference evaluator for CoreML ML programs (runs on Linux; build side only).

CoreML prediction exists only on macOS, so on Linux edgekit executes the MIL program itself:
coremltools parses the ``.mlpackage`` into its Python MIL objects (weights included), and each
op is computed here with NumPy in float32. It covers the op set the converter emits for the
supported model families (CNNs such as the digits model and MobileNetV2); an op it does not
know stops evaluation with ``not supported by the evaluator: OP`` — never a silently wrong
result.

Uses: activation statistics for W8A8 calibration on Linux, and numeric validation of CoreML
artifacts against the float model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .evaluator_ops import EXTRA_OPS
from .mil_arrays import EvaluatorError, _f


_DTYPES = {"fp16": np.float32, "fp32": np.float32, "fp64": np.float64, "int8": np.int8, "uint8": np.uint8,
           "int16": np.int16, "int32": np.int32, "int64": np.int64, "bool": np.bool_}


def load_program(path: str) -> Any:
    """The MIL program of an ``.mlpackage`` as coremltools' Python objects (no CoreML runtime needed)."""
    from .tools import coremltools

    ct = coremltools()
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    model = ct.models.MLModel(path, skip_model_load=True)
    spec = model.get_spec()
    return milproto_load(spec, specification_version=spec.specificationVersion, file_weights_dir=model.weights_dir)


def load_program_from_model(model: Any) -> Any:
    """The MIL program of an in-memory ``MLModel`` (its own if it has one, else parsed from the spec)."""
    program = getattr(model, "_mil_program", None)
    if program is not None:
        return program
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    spec = model.get_spec()
    return milproto_load(spec, specification_version=spec.specificationVersion, file_weights_dir=model.weights_dir)


class Evaluator:
    """Executes the ``main`` function of a MIL program; ``observe`` sees every op output."""

    def __init__(self, program: Any) -> None:
        self.function = program.functions["main"]
        self.operations = list(self.function.operations)
        self.input_names = list(self.function.inputs)
        self.output_names = [v.name for v in self.function.outputs]
        unknown = sorted({op.op_type for op in self.operations if op.op_type not in OPS})
        if unknown:
            raise EvaluatorError(f"not supported by the evaluator: {', '.join(unknown)}")

    def run(self, feeds: dict[str, np.ndarray], observe: Callable[[str, np.ndarray], None] | None = None) -> dict[str, np.ndarray]:
        env: dict[str, Any] = {name: _f(np.asarray(value)) if np.asarray(value).dtype.kind == "f"
                               else np.asarray(value) for name, value in feeds.items()}
        for op in self.operations:
            if op.op_type == "const":
                value = op.outputs[0].val
                env[op.outputs[0].name] = _f(value) if isinstance(value, np.ndarray) else value
                continue
            args = {name: _value(var, env) for name, var in op.inputs.items()}
            try:
                results = OPS[op.op_type](**args)
            except EvaluatorError:
                raise
            except Exception as exc:
                raise EvaluatorError(f"evaluating {op.op_type} ({op.name}) failed: {type(exc).__name__}: {exc}") from None
            if not isinstance(results, tuple):
                results = (results,)
            for var, value in zip(op.outputs, results):
                env[var.name] = value
                if observe is not None:
                    observe(var.name, value)
        return {name: env[name] for name in self.output_names}

    def predict(self, x: np.ndarray, batch_axis_fixed: bool = True) -> np.ndarray:
        """First output for a batch, one sample at a time (CoreML programs here have batch 1)."""
        return self.predict_all(x)[self.output_names[0]]

    def predict_all(self, x: Any) -> dict[str, np.ndarray]:
        """Every output by name for a batch, one sample at a time: ``x`` is the one input's array,
        or arrays by input name (an ``.npz``)."""
        if isinstance(x, np.ndarray):
            if len(self.input_names) != 1:
                raise EvaluatorError(f"the program has {len(self.input_names)} inputs; one array was given")
            x = {self.input_names[0]: x}
        from .names import source_name

        given = {n: n if n in x else source_name(n) for n in self.input_names}
        missing = [n for n, key in given.items() if key not in x]
        if missing:
            raise EvaluatorError(f"no samples for the program's input(s) {missing}")
        feeds = {n: np.asarray(x[key]) for n, key in given.items()}
        count = len(next(iter(feeds.values())))
        results = [self.run({n: v[i : i + 1] for n, v in feeds.items()}) for i in range(count)]
        return {out: np.concatenate([r[out] for r in results]).astype(np.float32) for out in self.output_names}


def _value(var: Any, env: dict[str, Any]) -> Any:
    if isinstance(var, (list, tuple)):
        return [_value(v, env) for v in var]
    if var.name in env:
        return env[var.name]
    if var.val is not None:
        return var.val
    raise EvaluatorError(f"no value for {var.name}")


# --- ops ------------------------------------------------------------------------------------


def _cast(x: Any, dtype: str) -> np.ndarray:
    if dtype not in _DTYPES:
        raise EvaluatorError(f"cast to {dtype} is not supported by the evaluator")
    return np.asarray(x).astype(_DTYPES[dtype])


def _affine_dequantize(quantized_data: Any, zero_point: Any, scale: Any, axis: Any) -> np.ndarray:
    q = np.asarray(quantized_data).astype(np.float32)
    shape = [1] * q.ndim
    zp, sc = np.asarray(zero_point, np.float32), np.asarray(scale, np.float32)
    if zp.ndim or sc.ndim:
        shape[int(axis)] = -1
    return (q - zp.reshape(shape if zp.ndim else ())) * sc.reshape(shape if sc.ndim else ())


def _blockwise_shift_scale(data: Any, scale: Any, offset: Any = None) -> np.ndarray:
    q = np.asarray(data).astype(np.float32)
    sc = np.asarray(scale, np.float32)
    repeats = [q.shape[i] // sc.shape[i] for i in range(q.ndim)]
    for axis, r in enumerate(repeats):
        sc = np.repeat(sc, r, axis=axis)
    if offset is not None:
        off = np.asarray(offset, np.float32)
        for axis, r in enumerate(repeats):
            off = np.repeat(off, r, axis=axis)
        q = q - off
    return q * sc


def _quantize(input: Any, scale: Any, output_dtype: str, zero_point: Any = None, axis: Any = None) -> np.ndarray:
    x = np.asarray(input, np.float32)
    dtype = _DTYPES[output_dtype]
    limits = np.iinfo(dtype)
    sc, zp = _per_axis(scale, x.ndim, axis), _per_axis(0 if zero_point is None else zero_point, x.ndim, axis)
    return np.clip(np.round(x / sc) + zp, limits.min, limits.max).astype(dtype)


def _dequantize(input: Any, scale: Any, zero_point: Any = None, axis: Any = None) -> np.ndarray:
    q = np.asarray(input).astype(np.float32)
    sc, zp = _per_axis(scale, q.ndim, axis), _per_axis(0 if zero_point is None else zero_point, q.ndim, axis)
    return (q - zp) * sc


def _per_axis(value: Any, ndim: int, axis: Any) -> np.ndarray:
    array = np.asarray(value, np.float32)
    if array.ndim == 0 or axis is None:
        return array
    shape = [1] * ndim
    shape[int(axis)] = -1
    return array.reshape(shape)


def _pads(pad_type: str, pad: Any, spatial: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...],
          dilations: tuple[int, ...], ceil_mode: bool = False) -> list[tuple[int, int]]:
    if pad_type == "valid":
        return [(0, 0)] * len(spatial)
    if pad_type == "custom":
        values = [int(v) for v in np.asarray(pad).reshape(-1)]
        return [(values[2 * i], values[2 * i + 1]) for i in range(len(spatial))]
    if pad_type in ("same", "same_lower"):
        result = []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            effective = (k - 1) * d + 1
            out = -(-size // s)
            total = max((out - 1) * s + effective - size, 0)
            small, large = total // 2, total - total // 2
            result.append((small, large) if pad_type == "same" else (large, small))
        return result
    raise EvaluatorError(f"pad_type {pad_type!r} is not supported by the evaluator")


def _windows(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int]) -> np.ndarray:
    """(N, C, Ho, Wo, kH, kW) views of dilated, strided windows of an NCHW array."""
    kh, kw = kernel
    dh, dw = dilations
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    view = sliding_window_view(x, span, axis=(2, 3))[:, :, :: strides[0], :: strides[1], ::dh, ::dw]
    return view


def _as_2d(x: np.ndarray, strides: Any, pad: Any, dilations: Any, fill: Any = 1) -> tuple[np.ndarray, Any, Any, Any]:
    """A 1-D (N, C, L) op as its 2-D (N, C, 1, L) twin: strides, pads and dilations get a unit height."""
    return (x[:, :, None, :], None if strides is None else (1, *[int(v) for v in np.asarray(strides).reshape(-1)]),
            None if pad is None else (0, 0, *[int(v) for v in np.asarray(pad).reshape(-1)]),
            None if dilations is None else (fill, *[int(v) for v in np.asarray(dilations).reshape(-1)]))


def _conv(x: Any, weight: Any, bias: Any = None, strides: Any = None, pad_type: str = "valid", pad: Any = None,
          dilations: Any = None, groups: Any = 1) -> np.ndarray:
    x = _f(x)
    w = _f(weight)
    if x.ndim == 3:  # 1-D convolution (audio, keyword spotting): the 2-D one over a unit height
        x2, strides2, pad2, dilations2 = _as_2d(x, strides, pad, dilations)
        return _conv(x2, w[:, :, None, :], bias, strides2, pad_type, pad2, dilations2, groups)[:, :, 0, :]
    if x.ndim != 4:
        raise EvaluatorError(f"conv with {x.ndim - 2}-D input is not supported by the evaluator (1-D and 2-D only)")
    kernel = tuple(w.shape[2:])
    strides = tuple(int(s) for s in (strides if strides is not None else (1, 1)))
    dilations = tuple(int(d) for d in (dilations if dilations is not None else (1, 1)))
    pads = _pads(str(pad_type), pad, x.shape[2:], kernel, strides, dilations)
    x = np.pad(x, [(0, 0), (0, 0), *pads])
    g = int(groups)
    n, c = x.shape[:2]
    out_channels = w.shape[0]
    windows = _windows(x, kernel, strides, dilations)  # N, C, Ho, Wo, kH, kW
    ho, wo = windows.shape[2:4]
    cg = c // g
    cols = windows.reshape(n, g, cg, ho, wo, kernel[0] * kernel[1])
    cols = cols.transpose(0, 1, 3, 4, 2, 5).reshape(n, g, ho * wo, cg * kernel[0] * kernel[1])
    wg = w.reshape(g, out_channels // g, cg * kernel[0] * kernel[1]).transpose(0, 2, 1)
    y = np.matmul(cols, wg)  # N, G, HoWo, Cout/G
    y = y.transpose(0, 1, 3, 2).reshape(n, out_channels, ho, wo)
    if bias is not None:
        y = y + _f(bias).reshape(1, -1, 1, 1)
    return y.astype(np.float32)


def _pool(reduce: str) -> Callable[..., np.ndarray]:
    def pool(x: Any, kernel_sizes: Any, strides: Any = None, pad_type: str = "valid", pad: Any = None,
             exclude_padding_from_average: bool = False, ceil_mode: bool = False) -> np.ndarray:
        x = _f(x)
        if x.ndim == 3:  # 1-D pooling over (N, C, L)
            x2, strides2, pad2, _ = _as_2d(x, strides, pad, None)
            kernel2 = (1, *[int(k) for k in np.asarray(kernel_sizes).reshape(-1)])
            return pool(x2, kernel2, strides2 or kernel2, pad_type, pad2, exclude_padding_from_average,
                        ceil_mode)[:, :, 0, :]
        if ceil_mode:
            raise EvaluatorError(f"{reduce}_pool with ceil_mode is not supported by the evaluator")
        kernel = tuple(int(k) for k in kernel_sizes)
        strides_ = tuple(int(s) for s in (strides if strides is not None else kernel))
        pads = _pads(str(pad_type), pad, x.shape[2:], kernel, strides_, (1, 1))
        fill = -np.inf if reduce == "max" else 0.0
        padded = np.pad(x, [(0, 0), (0, 0), *pads], constant_values=fill)
        windows = _windows(padded, kernel, strides_, (1, 1))
        if reduce == "max":
            return windows.max(axis=(-2, -1))
        sums = windows.sum(axis=(-2, -1))
        if exclude_padding_from_average and any(p != (0, 0) for p in pads):
            ones = np.pad(np.ones((1, 1, *x.shape[2:]), np.float32), [(0, 0), (0, 0), *pads])
            counts = _windows(ones, kernel, strides_, (1, 1)).sum(axis=(-2, -1))
            return sums / counts
        return sums / (kernel[0] * kernel[1])

    return pool


def _linear(x: Any, weight: Any, bias: Any = None) -> np.ndarray:
    y = _f(x) @ _f(weight).T
    return y + _f(bias) if bias is not None else y


def _matmul(x: Any, y: Any, transpose_x: bool = False, transpose_y: bool = False) -> np.ndarray:
    a, b = _f(x), _f(y)
    if transpose_x:
        a = np.swapaxes(a, -1, -2)
    if transpose_y:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


def _batch_norm(x: Any, mean: Any, variance: Any, gamma: Any = None, beta: Any = None, epsilon: Any = 1e-5) -> np.ndarray:
    x = _f(x)
    shape = [1, -1] + [1] * (x.ndim - 2)
    scale = 1.0 / np.sqrt(_f(variance).reshape(shape) + np.float32(epsilon))
    y = (x - _f(mean).reshape(shape)) * scale
    if gamma is not None:
        y = y * _f(gamma).reshape(shape)
    if beta is not None:
        y = y + _f(beta).reshape(shape)
    return y


def _softmax(x: Any, axis: Any = -1) -> np.ndarray:
    x = _f(x)
    e = np.exp(x - x.max(axis=int(axis), keepdims=True))
    return e / e.sum(axis=int(axis), keepdims=True)


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def reduce(x: Any, axes: Any = None, keep_dims: bool = False) -> np.ndarray:
        axis = None if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))
        return fn(_f(x), axis=axis, keepdims=bool(keep_dims))

    return reduce


def _pad(x: Any, pad: Any, mode: str = "constant", constant_val: Any = 0.0) -> np.ndarray:
    x = _f(x)
    values = [int(v) for v in np.asarray(pad).reshape(-1)]
    pairs = [(values[2 * i], values[2 * i + 1]) for i in range(len(values) // 2)]
    pairs = [(0, 0)] * (x.ndim - len(pairs)) + pairs  # pads apply to the last dimensions
    if mode == "constant":
        return np.pad(x, pairs, constant_values=float(constant_val))
    if mode in ("reflect", "replicate"):
        return np.pad(x, pairs, mode="reflect" if mode == "reflect" else "edge")
    raise EvaluatorError(f"pad mode {mode!r} is not supported by the evaluator")


def _concat(values: Iterable[Any], axis: Any, interleave: bool = False) -> np.ndarray:
    if interleave:
        raise EvaluatorError("concat with interleave is not supported by the evaluator")
    return np.concatenate([_f(v) for v in values], axis=int(axis))


def _gelu(x: Any, mode: str = "EXACT") -> np.ndarray:
    x = _f(x).astype(np.float64)
    if mode == "EXACT":
        from math import erf, sqrt

        y = 0.5 * x * (1 + np.vectorize(erf)(x / sqrt(2)))
    elif mode == "TANH_APPROXIMATION":
        y = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    elif mode == "SIGMOID_APPROXIMATION":
        y = x / (1 + np.exp(-1.702 * x))
    else:
        raise EvaluatorError(f"gelu mode {mode!r} is not supported by the evaluator")
    return y.astype(np.float32)


def _erf(x: Any) -> np.ndarray:
    from math import erf

    return np.vectorize(erf)(_f(x).astype(np.float64)).astype(np.float32)


def _layer_norm(x: Any, axes: Any, gamma: Any = None, beta: Any = None, epsilon: Any = 1e-5) -> np.ndarray:
    x = _f(x)
    dims = tuple(int(a) % x.ndim for a in np.asarray(axes).reshape(-1))
    mean = x.mean(axis=dims, keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=dims, keepdims=True) + np.float32(epsilon))
    if gamma is not None:
        y = y * _f(gamma)
    return y + _f(beta) if beta is not None else y


def _slice_by_index(x: Any, begin: Any, end: Any, stride: Any = None, begin_mask: Any = None, end_mask: Any = None,
                    squeeze_mask: Any = None) -> np.ndarray:
    x = np.asarray(x)
    rank = x.ndim
    begin, end = np.asarray(begin).reshape(-1), np.asarray(end).reshape(-1)
    stride = np.ones(rank, int) if stride is None else np.asarray(stride).reshape(-1)
    masks = [np.zeros(rank, bool) if m is None else np.asarray(m, bool).reshape(-1)
             for m in (begin_mask, end_mask, squeeze_mask)]
    index: list[Any] = []
    for axis in range(rank):
        if masks[2][axis]:
            index.append(int(begin[axis]))
            continue
        start = None if masks[0][axis] else int(begin[axis])
        stop = None if masks[1][axis] else int(end[axis])
        index.append(slice(start, stop, int(stride[axis])))
    return x[tuple(index)]


def _slice_by_size(x: Any, begin: Any, size: Any) -> np.ndarray:
    x = np.asarray(x)
    index = tuple(slice(int(b), None if int(s) == -1 else int(b) + int(s))
                  for b, s in zip(np.asarray(begin).reshape(-1), np.asarray(size).reshape(-1)))
    return x[index]


def _split(x: Any, axis: Any, num_splits: Any = None, split_sizes: Any = None) -> tuple[np.ndarray, ...]:
    x = np.asarray(x)
    axis = int(axis)
    if split_sizes is not None:
        sizes = [int(v) for v in np.asarray(split_sizes).reshape(-1)]
    else:
        sizes = [x.shape[axis] // int(num_splits)] * int(num_splits)
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _gather(x: Any, indices: Any, axis: Any = 0, batch_dims: Any = 0, validate_indices: Any = False) -> np.ndarray:
    if int(batch_dims or 0):
        raise EvaluatorError("gather with batch_dims is not supported by the evaluator")
    x, ids = np.asarray(x), np.asarray(indices).astype(np.int64)
    axis = int(axis) % x.ndim
    return np.take(x, np.where(ids < 0, ids + x.shape[axis], ids), axis=axis)


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda x, y: fn(_f(x), _f(y))


OPS: dict[str, Callable[..., Any]] = {
    "const": None,  # handled in Evaluator.run: its value is the output var's
    "cast": _cast,
    "constexpr_affine_dequantize": _affine_dequantize,
    "constexpr_blockwise_shift_scale": _blockwise_shift_scale,
    "quantize": _quantize,
    "dequantize": _dequantize,
    "conv": _conv,
    "linear": _linear,
    "matmul": _matmul,
    "batch_norm": _batch_norm,
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "real_div": _binary(np.divide),
    "maximum": _binary(np.maximum),
    "equal": lambda x, y: np.equal(np.asarray(x), np.asarray(y)),  # exact: indices compared as they are
    "not_equal": lambda x, y: np.not_equal(np.asarray(x), np.asarray(y)),
    "less": lambda x, y: np.less(np.asarray(x), np.asarray(y)),
    "less_equal": lambda x, y: np.less_equal(np.asarray(x), np.asarray(y)),
    "greater": lambda x, y: np.greater(np.asarray(x), np.asarray(y)),
    "greater_equal": lambda x, y: np.greater_equal(np.asarray(x), np.asarray(y)),
    "select": lambda cond, a, b: np.where(np.asarray(cond, bool), np.asarray(a), np.asarray(b)),
    "minimum": _binary(np.minimum),
    "relu": lambda x: np.maximum(_f(x), 0),
    "relu6": lambda x: np.clip(_f(x), 0, 6),
    "clip": lambda x, alpha, beta: np.clip(_f(x), float(alpha), float(beta)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-_f(x))),
    "tanh": lambda x: np.tanh(_f(x)),
    "softmax": _softmax,
    "avg_pool": _pool("avg"),
    "max_pool": _pool("max"),
    "reduce_mean": _reduce(np.mean),
    "reduce_max": _reduce(np.max),
    "reduce_sum": _reduce(np.sum),
    "reshape": lambda x, shape: np.reshape(x, [int(v) for v in np.asarray(shape).reshape(-1)]),
    "transpose": lambda x, perm: np.transpose(x, [int(v) for v in np.asarray(perm).reshape(-1)]),
    "squeeze": lambda x, axes=None: np.squeeze(x, axis=None if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))),
    "expand_dims": lambda x, axes: np.expand_dims(x, tuple(int(a) for a in np.asarray(axes).reshape(-1))),
    "concat": _concat,
    "pad": _pad,
    "gelu": _gelu,
    "erf": _erf,
    "layer_norm": _layer_norm,
    "slice_by_index": _slice_by_index,
    "slice_by_size": _slice_by_size,
    "split": _split,
    "gather": _gather,
    "gather_along_axis": lambda x, indices, axis=0, validate_indices=False: np.take_along_axis(np.asarray(x), np.asarray(indices).astype(
        np.int64), axis=int(axis)),
    "sqrt": lambda x: np.sqrt(_f(x)),
    "rsqrt": lambda x, epsilon=1e-12: 1 / np.sqrt(_f(x) + np.float32(epsilon)),
    "square": lambda x: _f(x) * _f(x),
    "exp": lambda x: np.exp(_f(x)),
    "log": lambda x, epsilon=1e-45: np.log(_f(x) + np.float32(epsilon)),
    "abs": lambda x: np.abs(_f(x)),
    "pow": _binary(np.power),
    "floor_div": _binary(np.floor_divide),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "tile": lambda x, reps: np.tile(np.asarray(x), [int(v) for v in np.asarray(reps).reshape(-1)]),
    "stack": lambda values, axis: np.stack([np.asarray(v) for v in values], axis=int(axis)),
    "identity": lambda x: np.asarray(x),
    "logical_not": lambda x: np.logical_not(np.asarray(x, bool)),
    "logical_and": lambda x, y: np.logical_and(np.asarray(x, bool), np.asarray(y, bool)),
    "logical_or": lambda x, y: np.logical_or(np.asarray(x, bool), np.asarray(y, bool)),
    "silu": lambda x: _f(x) / (1 + np.exp(-_f(x))),
    "leaky_relu": lambda x, alpha=0.01: np.where(_f(x) >= 0, _f(x), _f(x) * np.float32(alpha)),
}

# resizing, transposed convolution, recurrent layers, norms and the rest
OPS.update(EXTRA_OPS)
