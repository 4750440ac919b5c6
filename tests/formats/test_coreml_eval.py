"""The NumPy MIL evaluator, op by op, against NumPy references (float32, stated tolerances)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402

from edgekit.formats.coreml.evaluator import OPS, Evaluator, EvaluatorError  # noqa: E402

RTOL, ATOL = 1e-5, 1e-5
rng = np.random.default_rng(0)


def run(build, *inputs):
    """Build a one-op MIL program from ``build(*vars)`` and evaluate it on ``inputs``."""
    specs = [mb.TensorSpec(shape=x.shape) for x in inputs]
    if len(inputs) == 1:
        @mb.program(input_specs=specs)
        def program(x):
            return build(x)
    else:
        @mb.program(input_specs=specs)
        def program(x, y):
            return build(x, y)

    evaluator = Evaluator(program)
    feeds = dict(zip(evaluator.input_names, inputs))
    return evaluator.run(feeds)[evaluator.output_names[0]]


def conv_reference(x, w, b, stride, pads, dilation, groups):
    """Direct loops: the definition of a grouped, strided, dilated 2-D convolution."""
    x = np.pad(x, [(0, 0), (0, 0), pads[0], pads[1]])
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    ho = (h - (kh - 1) * dilation - 1) // stride + 1
    wo = (wd - (kw - 1) * dilation - 1) // stride + 1
    y = np.zeros((n, co, ho, wo), np.float64)
    per_group = co // groups
    for o, i, j in itertools.product(range(co), range(ho), range(wo)):
        g = o // per_group
        patch = x[:, g * cg:(g + 1) * cg, i * stride: i * stride + (kh - 1) * dilation + 1: dilation,
                  j * stride: j * stride + (kw - 1) * dilation + 1: dilation]
        y[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3)) + (b[o] if b is not None else 0)
    return y


def same_pads(size, k, s, d):
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return (total // 2, total - total // 2)


@pytest.mark.parametrize("stride, dilation, groups, pad_type", [
    (1, 1, 1, "valid"), (2, 1, 1, "same"), (1, 2, 1, "same"), (2, 1, 4, "same"), (1, 1, 8, "custom"),
])
def test_conv(stride, dilation, groups, pad_type):
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    w = rng.standard_normal((8, 8 // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    custom = [1, 0, 2, 1]
    kwargs = {"pad": custom} if pad_type == "custom" else {}
    got = run(lambda v: mb.conv(x=v, weight=w, bias=b, strides=[stride] * 2, dilations=[dilation] * 2,
                                groups=groups, pad_type=pad_type, **kwargs), x)
    if pad_type == "valid":
        pads = [(0, 0), (0, 0)]
    elif pad_type == "custom":
        pads = [(1, 0), (2, 1)]
    else:
        pads = [same_pads(9, 3, stride, dilation)] * 2
    np.testing.assert_allclose(got, conv_reference(x, w, b, stride, pads, dilation, groups), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_pools(kind):
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    op = mb.avg_pool if kind == "avg" else mb.max_pool
    got = run(lambda v: op(x=v, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid"), x)
    blocks = x.reshape(1, 3, 4, 2, 4, 2)
    expected = blocks.mean(axis=(3, 5)) if kind == "avg" else blocks.max(axis=(3, 5))
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_linear_matmul_batch_norm():
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w, b = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(run(lambda v: mb.linear(x=v, weight=w, bias=b), x), x @ w.T + b, rtol=RTOL, atol=1e-4)
    y = rng.standard_normal((6, 5)).astype(np.float32)
    np.testing.assert_allclose(run(lambda v: mb.matmul(x=v, y=y), x), x @ y, rtol=RTOL, atol=1e-4)
    z = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    mean, var = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    gamma, beta = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    expected = (z - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * gamma[:, None, None] + beta[:, None, None]
    got = run(lambda v: mb.batch_norm(x=v, mean=mean, variance=var, gamma=gamma, beta=beta, epsilon=1e-5), z)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name, build, reference", [
    ("add", lambda a, b: mb.add(x=a, y=b), np.add),
    ("sub", lambda a, b: mb.sub(x=a, y=b), np.subtract),
    ("mul", lambda a, b: mb.mul(x=a, y=b), np.multiply),
    ("real_div", lambda a, b: mb.real_div(x=a, y=b), np.divide),
    ("maximum", lambda a, b: mb.maximum(x=a, y=b), np.maximum),
    ("minimum", lambda a, b: mb.minimum(x=a, y=b), np.minimum),
])
def test_elementwise_binary(name, build, reference):
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((1, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(run(build, a, b), reference(a, b), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name, build, reference", [
    ("relu", lambda v: mb.relu(x=v), lambda x: np.maximum(x, 0)),
    ("relu6", lambda v: mb.relu6(x=v), lambda x: np.clip(x, 0, 6)),
    ("clip", lambda v: mb.clip(x=v, alpha=-1.0, beta=2.0), lambda x: np.clip(x, -1, 2)),
    ("sigmoid", lambda v: mb.sigmoid(x=v), lambda x: 1 / (1 + np.exp(-x))),
    ("tanh", lambda v: mb.tanh(x=v), np.tanh),
    ("softmax", lambda v: mb.softmax(x=v, axis=-1), lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    ("reduce_mean", lambda v: mb.reduce_mean(x=v, axes=[2, 3], keep_dims=False), lambda x: x.mean(axis=(2, 3))),
    ("reduce_max", lambda v: mb.reduce_max(x=v, axes=[1], keep_dims=True), lambda x: x.max(axis=1, keepdims=True)),
    ("reduce_sum", lambda v: mb.reduce_sum(x=v, axes=[-1], keep_dims=False), lambda x: x.sum(axis=-1)),
    ("reshape", lambda v: mb.reshape(x=v, shape=[2, 48]), lambda x: x.reshape(2, 48)),
    ("transpose", lambda v: mb.transpose(x=v, perm=[0, 2, 3, 1]), lambda x: x.transpose(0, 2, 3, 1)),
    ("squeeze", lambda v: mb.squeeze(x=mb.reduce_mean(x=v, axes=[3], keep_dims=True), axes=[3]),
     lambda x: x.mean(axis=3)),
    ("expand_dims", lambda v: mb.expand_dims(x=v, axes=[0]), lambda x: x[None]),
    ("pad", lambda v: mb.pad(x=v, pad=[1, 2, 0, 1], mode="constant", constant_val=0.5),
     lambda x: np.pad(x, [(0, 0), (0, 0), (1, 2), (0, 1)], constant_values=0.5)),
    ("concat", lambda v: mb.concat(values=[v, v], axis=1), lambda x: np.concatenate([x, x], axis=1)),
    ("cast", lambda v: mb.cast(x=mb.cast(x=v, dtype="fp16"), dtype="fp32"), lambda x: x),
])
def test_unary_and_shape_ops(name, build, reference):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(run(build, x), reference(x), rtol=RTOL, atol=ATOL)


def test_quantize_dequantize_and_int8_weights():
    x = rng.uniform(-2, 2, (1, 4, 3, 3)).astype(np.float32)
    scale = np.float32(2 / 127)
    got = run(lambda v: mb.dequantize(input=mb.quantize(input=v, scale=scale, output_dtype="int8"), scale=scale), x)
    expected = np.clip(np.round(x / scale), -128, 127) * scale
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    data = rng.integers(-128, 127, (4, 3), dtype=np.int8)
    weight_scale = rng.uniform(0.01, 0.1, 4).astype(np.float32)
    expected_w = data.astype(np.float32) * weight_scale[:, None]
    got_w = OPS["constexpr_affine_dequantize"](quantized_data=data, zero_point=np.zeros(4, np.int8),
                                               scale=weight_scale, axis=0)
    np.testing.assert_allclose(got_w, expected_w, rtol=RTOL, atol=ATOL)


def test_blockwise_shift_scale_weights():
    data = rng.integers(-128, 127, (4, 6), dtype=np.int8)
    scale = rng.uniform(0.01, 0.1, (4, 2)).astype(np.float32)  # one scale per block of 3 columns
    offset = rng.integers(-3, 3, (4, 2)).astype(np.int8)
    got = OPS["constexpr_blockwise_shift_scale"](data=data, scale=scale, offset=offset)
    expected = (data.astype(np.float32) - np.repeat(offset, 3, axis=1)) * np.repeat(scale, 3, axis=1)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_unknown_ops_are_refused_by_name():
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))])
    def program(x):
        return mb.sin(x=x)

    with pytest.raises(EvaluatorError, match="not supported by the evaluator: sin"):
        Evaluator(program)


@pytest.mark.parametrize("stride, pad_type, pad, dilation, groups", [
    (2, "custom", [3, 1], 2, 2), (1, "same", None, 1, 1), (1, "valid", None, 1, 4)])
def test_1d_convolution_and_pooling_match_pytorch(stride, pad_type, pad, dilation, groups):
    """Audio and keyword models convolve over time (N, C, L): their CoreML numerics were "not
    measurable" on Linux while the evaluator knew only 2-D convolutions."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from edgekit.formats.coreml.evaluator import OPS

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 37)).astype(np.float32)
    w = rng.normal(size=(8, 4 // groups, 5)).astype(np.float32)
    b = rng.normal(size=8).astype(np.float32)
    got = OPS["conv"](x, w, b, strides=[stride], pad_type=pad_type, pad=pad, dilations=[dilation], groups=groups)
    tx = F.pad(torch.from_numpy(x), tuple(pad)) if pad else torch.from_numpy(x)
    expected = F.conv1d(tx, torch.from_numpy(w), torch.from_numpy(b), stride=stride, dilation=dilation, groups=groups,
                        padding="same" if pad_type == "same" else 0).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4)
    np.testing.assert_allclose(OPS["max_pool"](x, [3], strides=[2], pad_type="valid"),
                               F.max_pool1d(torch.from_numpy(x), 3, 2).numpy(), atol=1e-6)
    np.testing.assert_allclose(OPS["avg_pool"](x, [4], strides=[4], pad_type="valid"),
                               F.avg_pool1d(torch.from_numpy(x), 4, 4).numpy(), atol=1e-6)
