"""The MIL evaluator's resizing, transposed-convolution, recurrent, norm and activation ops, each
against the same op run by PyTorch or ONNX Runtime on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
from coremltools.converters.mil import Builder as mb  # noqa: E402

from edgekit.formats.coreml.evaluator import Evaluator  # noqa: E402

F = torch.nn.functional
rng = np.random.default_rng(7)
TOL = dict(rtol=1e-4, atol=1e-5)


def run(build, x: np.ndarray, opset=None, index: int = 0) -> np.ndarray:
    """A one-op MIL program ``build(x)`` evaluated on ``x``; output ``index``."""
    kwargs = {"opset_version": opset} if opset is not None else {}

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], **kwargs)
    def program(x_in):
        return build(x_in)

    evaluator = Evaluator(program)
    return evaluator.run({evaluator.input_names[0]: x})[evaluator.output_names[index]]


def t(x: np.ndarray) -> "torch.Tensor":
    return torch.from_numpy(np.ascontiguousarray(x))


def image(*shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


def test_nearest_upsample_and_resize_match_pytorch():
    x = image(1, 3, 5, 4)
    got = run(lambda v: mb.upsample_nearest_neighbor(x=v, scale_factor_height=2, scale_factor_width=3), x)
    np.testing.assert_array_equal(got, F.interpolate(t(x), scale_factor=(2, 3), mode="nearest").numpy())
    got = run(lambda v: mb.resize_nearest_neighbor(x=v, target_size_height=7, target_size_width=9), x)
    np.testing.assert_array_equal(got, F.interpolate(t(x), size=(7, 9), mode="nearest").numpy())


@pytest.mark.parametrize("align", [True, False])
def test_bilinear_upsample_matches_pytorch_in_both_corner_modes(align):
    x = image(2, 3, 4, 5)
    got = run(lambda v: mb.upsample_bilinear(x=v, scale_factor_height=2, scale_factor_width=2, align_corners=align), x)
    np.testing.assert_allclose(got, F.interpolate(t(x), scale_factor=2, mode="bilinear", align_corners=align).numpy(),
                               **TOL)


@pytest.mark.parametrize("mode, align", [("STRICT_ALIGN_CORNERS", True), ("UNALIGN_CORNERS", False)])
def test_bilinear_resize_sampling_modes_match_pytorch(mode, align):
    x = image(1, 2, 6, 5)
    got = run(lambda v: mb.resize_bilinear(x=v, target_size_height=9, target_size_width=4, sampling_mode=mode), x)
    np.testing.assert_allclose(got, F.interpolate(t(x), size=(9, 4), mode="bilinear", align_corners=align).numpy(),
                               **TOL)


def test_ios17_resize_linear_and_nearest():
    x = image(1, 2, 4, 6)
    got = run(lambda v: mb.resize(x=v, shape=np.array([8, 12], np.int32), resized_dims=np.uint32(2),
                                  interpolation_mode="LINEAR", sampling_mode="UNALIGN_CORNERS"), x, ct.target.iOS17)
    np.testing.assert_allclose(got, F.interpolate(t(x), size=(8, 12), mode="bilinear", align_corners=False).numpy(),
                               **TOL)


@pytest.mark.parametrize("stride, padding, groups, dilation", [(2, 1, 1, 1), (1, 0, 2, 1), (2, 0, 1, 2), (3, 2, 2, 1)])
def test_transposed_convolution_matches_pytorch(stride, padding, groups, dilation):
    x = image(2, 4, 5, 6)
    w = image(4, 6 // groups, 3, 3)
    b = image(6)
    got = run(lambda v: mb.conv_transpose(x=v, weight=w, bias=b, strides=[stride, stride], pad_type="custom",
                                          pad=[padding] * 4, dilations=[dilation, dilation], groups=groups), x)
    want = F.conv_transpose2d(t(x), t(w), t(b), stride=stride, padding=padding, groups=groups, dilation=dilation)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_transposed_1d_convolution_matches_pytorch():
    x = image(1, 3, 11)
    w = image(3, 5, 4)
    got = run(lambda v: mb.conv_transpose(x=v, weight=w, strides=[2], pad_type="custom", pad=[1, 1]), x)
    np.testing.assert_allclose(got, F.conv_transpose1d(t(x), t(w), stride=2, padding=1).numpy(), rtol=1e-4, atol=1e-4)


def test_per_channel_prelu_matches_pytorch():
    x = image(2, 5, 3, 3)
    alpha = rng.uniform(0.01, 0.5, 5).astype(np.float32)
    got = run(lambda v: mb.prelu(x=v, alpha=alpha), x)
    np.testing.assert_allclose(got, F.prelu(t(x), t(alpha)).numpy(), **TOL)


def _ifgo_to_ifoz(w: np.ndarray) -> np.ndarray:
    i, f, g, o = np.split(w, 4)
    return np.concatenate([i, f, o, g])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_matches_pytorch(bidirectional):
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(6, 8, bidirectional=bidirectional)
    x = image(5, 2, 6)  # [seq, batch, input]
    d = 2 if bidirectional else 1
    h0, c0 = image(d, 2, 8), image(d, 2, 8)
    want, (hn, cn) = lstm(t(x), (t(h0), t(c0)))
    s = {k: v.detach().numpy() for k, v in lstm.state_dict().items()}

    def build(v):
        extra = {}
        if bidirectional:
            extra = dict(weight_ih_back=_ifgo_to_ifoz(s["weight_ih_l0_reverse"]),
                         weight_hh_back=_ifgo_to_ifoz(s["weight_hh_l0_reverse"]),
                         bias_back=_ifgo_to_ifoz(s["bias_ih_l0_reverse"] + s["bias_hh_l0_reverse"]))
        return mb.lstm(x=v, initial_h=np.concatenate(list(h0), axis=-1), initial_c=np.concatenate(list(c0), axis=-1),
                       weight_ih=_ifgo_to_ifoz(s["weight_ih_l0"]), weight_hh=_ifgo_to_ifoz(s["weight_hh_l0"]),
                       bias=_ifgo_to_ifoz(s["bias_ih_l0"] + s["bias_hh_l0"]), output_sequence=True,
                       direction="bidirectional" if bidirectional else "forward", **extra)

    np.testing.assert_allclose(run(build, x), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run(build, x, index=1), np.concatenate(list(hn.detach().numpy()), axis=-1),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run(build, x, index=2), np.concatenate(list(cn.detach().numpy()), axis=-1),
                               rtol=1e-4, atol=1e-5)


def test_gru_matches_onnx_runtime_with_the_reset_gate_before_the_matmul():
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    seq, batch, inp, hid = 4, 2, 5, 6
    w = {g: image(hid, inp) for g in "zrh"}
    r = {g: image(hid, hid) for g in "zrh"}
    b = {g: image(hid) for g in "zrh"}
    rb = {g: image(hid) for g in "zrh"}
    x, h0 = image(seq, batch, inp), image(batch, hid)
    graph = helper.make_graph(
        [helper.make_node("GRU", ["x", "W", "R", "B", "", "h0"], ["y", "yh"], hidden_size=hid, linear_before_reset=0)],
        "gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp]),
                helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, batch, hid])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("W", TensorProto.FLOAT, [1, 3 * hid, inp], np.concatenate([w["z"], w["r"], w["h"]]).ravel()),
         helper.make_tensor("R", TensorProto.FLOAT, [1, 3 * hid, hid], np.concatenate([r["z"], r["r"], r["h"]]).ravel()),
         helper.make_tensor("B", TensorProto.FLOAT, [1, 6 * hid],
                            np.concatenate([b["z"], b["r"], b["h"], rb["z"], rb["r"], rb["h"]]))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(["y"], {"x": x, "h0": h0[None]})[0][:, 0]  # [seq, directions, batch, hidden]
    got = run(lambda v: mb.gru(x=v, initial_h=h0, weight_ih=np.concatenate([w["r"], w["h"], w["z"]]),
                               weight_hh=np.concatenate([r["r"], r["h"], r["z"]]),
                               bias=np.concatenate([b["r"] + rb["r"], b["h"] + rb["h"], b["z"] + rb["z"]]),
                               output_sequence=True), x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_rnn_matches_pytorch():
    torch.manual_seed(1)
    rnn = torch.nn.RNN(4, 3)
    x, h0 = image(6, 2, 4), image(1, 2, 3)
    want, _ = rnn(t(x), t(h0))
    s = {k: v.detach().numpy() for k, v in rnn.state_dict().items()}
    got = run(lambda v: mb.rnn(x=v, initial_h=h0[0], weight_ih=s["weight_ih_l0"], weight_hh=s["weight_hh_l0"],
                               bias=s["bias_ih_l0"] + s["bias_hh_l0"], output_sequence=True), x)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, build, reference", [
    ("reduce_l2_norm", lambda v: mb.reduce_l2_norm(x=v, axes=[1], keep_dims=True),
     lambda x: torch.linalg.vector_norm(x, dim=1, keepdim=True)),
    ("reduce_l1_norm", lambda v: mb.reduce_l1_norm(x=v, axes=[2]), lambda x: x.abs().sum(dim=2)),
    ("reduce_sum_square", lambda v: mb.reduce_sum_square(x=v, axes=[1, 2]), lambda x: (x * x).sum(dim=(1, 2))),
    ("reduce_log_sum_exp", lambda v: mb.reduce_log_sum_exp(x=v, axes=[-1]), lambda x: torch.logsumexp(x, dim=-1)),
    ("reduce_argmax", lambda v: mb.reduce_argmax(x=v, axis=1), lambda x: x.argmax(dim=1)),
    ("instance_norm", lambda v: mb.instance_norm(x=v, epsilon=1e-5), lambda x: F.instance_norm(x, eps=1e-5)),
    ("elu", lambda v: mb.elu(x=v, alpha=0.7), lambda x: F.elu(x, alpha=0.7)),
    ("softplus", lambda v: mb.softplus(x=v), F.softplus),
    ("softsign", lambda v: mb.softsign(x=v), F.softsign),
    ("sigmoid_hard", lambda v: mb.sigmoid_hard(x=v, alpha=1 / 6, beta=0.5), F.hardsigmoid),
    ("thresholded_relu", lambda v: mb.thresholded_relu(x=v, alpha=0.3), lambda x: F.threshold(x, 0.3, 0.0)),
    ("pixel_shuffle", lambda v: mb.pixel_shuffle(x=v, upscale_factor=2), lambda x: F.pixel_shuffle(x, 2)),
    ("cumsum", lambda v: mb.cumsum(x=v, axis=2), lambda x: torch.cumsum(x, dim=2)),
    ("topk", lambda v: mb.topk(x=v, k=2, axis=-1)[0], lambda x: torch.topk(x, 2, dim=-1).values),
    ("floor", lambda v: mb.floor(x=v), torch.floor),
    ("round", lambda v: mb.round(x=v), torch.round),
])
def test_norms_reductions_and_activations_match_pytorch(name, build, reference):
    x = image(2, 4, 3, 6)
    np.testing.assert_allclose(run(build, x), reference(t(x)).numpy(), rtol=1e-4, atol=1e-5)


def test_l2_norm_over_the_last_three_dimensions():
    x = image(2, 4, 3, 5)
    want = F.normalize(t(x).reshape(2, -1), dim=1).reshape(x.shape).numpy()
    np.testing.assert_allclose(run(lambda v: mb.l2_norm(x=v, epsilon=1e-12), x), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
def test_depth_space_rearrangements_match_onnx_runtime(op):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    x = image(1, 8, 4, 6)
    extra = {"mode": "DCR"} if op == "DepthToSpace" else {}
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], blocksize=2, **extra)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    build = (lambda v: mb.depth_to_space(x=v, block_size=2)) if op == "DepthToSpace" else \
        (lambda v: mb.space_to_depth(x=v, block_size=2))
    np.testing.assert_array_equal(run(build, x), want)
