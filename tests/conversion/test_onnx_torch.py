"""The ONNX -> PyTorch module that carries ONNX sources to TFLite and CoreML: every op against
ONNX Runtime on random data (weights random too, so a wrong axis or padding shows), folding of
shape arithmetic, fusion into linear layers, and clear refusals."""

from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.errors import OTHER_ROUTES, ConversionError

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from edgekit.conversion import onnx_torch  # noqa: E402

RNG = np.random.default_rng(0)
F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(name, TensorProto.INT64 if dtype == np.int64 else F32, list(shape))
         for name, shape, dtype in inputs],
        [helper.make_tensor_value_info(name, F32 if dtype is None else dtype, None) for name, dtype in outputs],
        [numpy_helper.from_array(np.asarray(value), name) for name, value in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _compare(model, feeds, atol=1e-5, export=True):
    """The module's outputs equal ONNX Runtime's, eagerly and through torch.export."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    module = onnx_torch.module_from_onnx(model, feeds)
    args = tuple(torch.from_numpy(feeds[name]) for name in module.input_names)
    with torch.no_grad():
        produced = module(*args)
    produced = produced if isinstance(produced, tuple) else (produced,)
    assert len(produced) == len(expected)
    for want, got in zip(expected, produced):
        assert tuple(got.shape) == want.shape
        np.testing.assert_allclose(got.numpy(), want, atol=atol, rtol=1e-4)
    if export:
        program = torch.export.export(module, args)
        exported = program.module()(*args)
        exported = exported if isinstance(exported, tuple) else (exported,)
        for want, got in zip(expected, exported):
            np.testing.assert_allclose(got.detach().numpy(), want, atol=atol, rtol=1e-4)
    return module


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _one(op_type, x_shape, attrs=None, extra=(), opset=17, outputs=1, out_dtype=None, **kw):
    """A graph with one node: input x (+ initializers in ``extra``: (name, value))."""
    names = ["x"] + [name for name, _ in extra]
    out_names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op_type, names, out_names, **(attrs or {}))
    return _model([node], [("x", x_shape, np.float32)], [(n, out_dtype) for n in out_names], extra, opset), \
        {"x": _x(*x_shape)}


CASES = {
    "conv_same_upper_stride2": lambda: _one("Conv", (1, 3, 9, 9), {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
                                            [("w", _x(4, 3, 3, 3)), ("b", _x(4))]),
    "conv_asymmetric_pads_groups": lambda: _one("Conv", (1, 4, 8, 8), {"pads": [0, 1, 2, 0], "group": 2,
                                                                       "dilations": [1, 2]}, [("w", _x(6, 2, 3, 3))]),
    "conv1d": lambda: _one("Conv", (2, 3, 16), {"pads": [1, 1], "strides": [2]}, [("w", _x(5, 3, 3))]),
    "depthwise_conv": lambda: _one("Conv", (1, 4, 7, 7), {"group": 4, "pads": [1, 1, 1, 1]},
                                   [("w", _x(4, 1, 3, 3)), ("b", _x(4))]),
    "conv_transpose": lambda: _one("ConvTranspose", (1, 4, 5, 5), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                                   "output_padding": [1, 1]},
                                   [("w", _x(4, 3, 3, 3)), ("b", _x(3))]),
    "conv_transpose_uneven_pads": lambda: _one("ConvTranspose", (1, 2, 4, 4), {"strides": [2, 2],
                                                                               "pads": [0, 1, 1, 0]},
                                               [("w", _x(2, 3, 3, 3))]),
    "maxpool_same_upper": lambda: _one("MaxPool", (1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                                 "auto_pad": "SAME_UPPER"}),
    "maxpool_ceil": lambda: _one("MaxPool", (1, 2, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                           "ceil_mode": 1}),
    "avgpool_exclude_uneven_pad": lambda: _one("AveragePool", (1, 2, 7, 7), {"kernel_shape": [3, 3],
                                                                             "strides": [2, 2],
                                                                             "pads": [0, 0, 1, 1]}),
    "avgpool_include_pad": lambda: _one("AveragePool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                                      "count_include_pad": 1}),
    "avgpool_exclude_pad": lambda: _one("AveragePool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "global_average_pool": lambda: _one("GlobalAveragePool", (2, 3, 5, 4)),
    "global_max_pool": lambda: _one("GlobalMaxPool", (2, 3, 5, 4)),
    "batch_norm": lambda: _one("BatchNormalization", (2, 3, 4, 4), {"epsilon": 1e-3},
                               [("s", _x(3)), ("b", _x(3)), ("m", _x(3)), ("v", np.abs(_x(3)) + 0.5)]),
    "instance_norm": lambda: _one("InstanceNormalization", (2, 3, 4, 4), {}, [("s", _x(3)), ("b", _x(3))]),
    "layer_norm": lambda: _one("LayerNormalization", (2, 5, 8), {"axis": -1}, [("s", _x(8)), ("b", _x(8))]),
    "layer_norm_two_axes": lambda: _one("LayerNormalization", (2, 5, 8), {"axis": 1},
                                        [("s", _x(5, 8)), ("b", _x(5, 8))]),
    "lrn": lambda: _one("LRN", (1, 6, 4, 4), {"size": 3, "alpha": 1e-2, "beta": 0.75, "bias": 2.0}),
    "softmax_axis1_opset11": lambda: _one("Softmax", (2, 3, 4), {"axis": 1}, opset=11),
    "softmax_axis1": lambda: _one("Softmax", (2, 3, 4), {"axis": 1}),
    "log_softmax": lambda: _one("LogSoftmax", (2, 7)),
    "gemm_transposed": lambda: _one("Gemm", (3, 6), {"transB": 1, "alpha": 0.5, "beta": 2.0},
                                    [("w", _x(4, 6)), ("c", _x(4))]),
    "gemm_plain": lambda: _one("Gemm", (3, 6), {}, [("w", _x(6, 4)), ("c", _x(1, 4))]),
    "matmul_3d": lambda: _one("MatMul", (2, 5, 6), {}, [("w", _x(6, 3))]),
    "clip_relu6_opset11": lambda: _one("Clip", (2, 8), {}, [("lo", np.float32(0)), ("hi", np.float32(6))], opset=11),
    "clip_attrs_opset6": lambda: _one("Clip", (2, 8), {"min": -0.5, "max": 0.5}, opset=6),
    "leaky_relu": lambda: _one("LeakyRelu", (2, 8), {"alpha": 0.1}),
    "hard_sigmoid": lambda: _one("HardSigmoid", (2, 8), {"alpha": 0.3, "beta": 0.4}),
    "hard_swish": lambda: _one("HardSwish", (2, 8)),
    "prelu": lambda: _one("PRelu", (2, 3, 4, 4), {}, [("slope", _x(3, 1, 1))]),
    "selu": lambda: _one("Selu", (2, 8)),
    "elu": lambda: _one("Elu", (2, 8), {"alpha": 0.7}),
    "gelu_tanh": lambda: _one("Gelu", (2, 8), {"approximate": "tanh"}, opset=20),
    "erf": lambda: _one("Erf", (2, 8)),
    "pow_square": lambda: _one("Pow", (2, 8), {}, [("e", np.float32(2))]),
    "div": lambda: _one("Div", (2, 8), {}, [("d", np.abs(_x(8)) + 1)]),
    "transpose": lambda: _one("Transpose", (2, 3, 4), {"perm": [2, 0, 1]}),
    "flatten_axis2": lambda: _one("Flatten", (2, 3, 4, 5), {"axis": 2}),
    "reshape_zero_and_minus_one": lambda: _one("Reshape", (2, 3, 4), {}, [("s", np.array([0, -1], np.int64))]),
    "squeeze_input_axes": lambda: _one("Squeeze", (2, 1, 4, 1), {}, [("a", np.array([1, -1], np.int64))]),
    "squeeze_opset11": lambda: _one("Squeeze", (2, 1, 4, 1), {"axes": [3]}, opset=11),
    "unsqueeze": lambda: _one("Unsqueeze", (2, 4), {}, [("a", np.array([0, -1], np.int64))]),
    "split_sizes": lambda: _one("Split", (2, 10), {"axis": 1}, [("s", np.array([3, 7], np.int64))], outputs=2),
    "split_even_opset11": lambda: _one("Split", (2, 9), {"axis": 1}, opset=11, outputs=3),
    "split_num_outputs": lambda: _one("Split", (2, 10), {"axis": 1, "num_outputs": 3}, opset=18, outputs=3),
    "slice_steps": lambda: _one("Slice", (4, 10), {}, [("st", np.array([1, -2], np.int64)),
                                                       ("en", np.array([100, 1], np.int64)),
                                                       ("ax", np.array([1, 0], np.int64)),
                                                       ("sp", np.array([2, -1], np.int64))]),
    "slice_opset9": lambda: _one("Slice", (4, 10), {"starts": [1], "ends": [-1], "axes": [1]}, opset=9),
    "gather_scalar": lambda: _one("Gather", (3, 5, 2), {"axis": 1}, [("i", np.array(-1, np.int64))]),
    "gather_matrix": lambda: _one("Gather", (3, 5), {"axis": 1}, [("i", np.array([[0, 4], [2, 2]], np.int64))]),
    "expand": lambda: _one("Expand", (3, 1), {}, [("s", np.array([2, 3, 4], np.int64))]),
    "tile": lambda: _one("Tile", (2, 3), {}, [("r", np.array([2, 2], np.int64))]),
    "pad_constant": lambda: _one("Pad", (1, 2, 3, 3), {}, [("p", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)),
                                                          ("v", np.float32(0.5))]),
    "pad_reflect": lambda: _one("Pad", (1, 2, 4, 4), {"mode": "reflect"},
                                [("p", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))]),
    "pad_edge": lambda: _one("Pad", (1, 2, 4, 4), {"mode": "edge"},
                             [("p", np.array([0, 0, 0, 2, 0, 0, 1, 0], np.int64))]),
    "pad_opset2": lambda: _one("Pad", (1, 2, 3, 3), {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "value": 1.0}, opset=2),
    "depth_to_space_dcr": lambda: _one("DepthToSpace", (1, 8, 2, 3), {"blocksize": 2}),
    "depth_to_space_crd": lambda: _one("DepthToSpace", (1, 8, 2, 3), {"blocksize": 2, "mode": "CRD"}),
    "space_to_depth": lambda: _one("SpaceToDepth", (1, 2, 4, 6), {"blocksize": 2}),
    "reduce_mean_axes_input": lambda: _one("ReduceMean", (2, 3, 4), {"keepdims": 0},
                                           [("a", np.array([1, 2], np.int64))], opset=18),
    "reduce_sum_keep": lambda: _one("ReduceSum", (2, 3, 4), {}, [("a", np.array([-1], np.int64))]),
    "reduce_max_opset11": lambda: _one("ReduceMax", (2, 3, 4), {"axes": [1]}, opset=11),
    "reduce_l2_all": lambda: _one("ReduceL2", (2, 3, 4), {"keepdims": 0}, opset=13),
    "reduce_prod": lambda: _one("ReduceProd", (2, 3, 4), {"axes": [0, 2]}, opset=13),
    "argmax": lambda: _one("ArgMax", (3, 7), {"axis": 1, "keepdims": 0}, out_dtype=TensorProto.INT64),
    "argmin_last_index": lambda: _one("ArgMin", (3, 7), {"axis": 0, "select_last_index": 1},
                                      out_dtype=TensorProto.INT64),
    "cumsum_exclusive_reverse": lambda: _one("CumSum", (3, 5), {"exclusive": 1, "reverse": 1},
                                             [("a", np.array(1, np.int64))]),
    "einsum": lambda: _one("Einsum", (2, 3, 4), {"equation": "bij->bji"}),
    "resize_nearest_asymmetric_x2": lambda: _one(
        "Resize", (1, 2, 3, 4), {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                 "nearest_mode": "floor"},
        [("roi", np.array([], np.float32)), ("sc", np.array([1, 1, 2, 2], np.float32))]),
    "resize_nearest_default_x3": lambda: _one(
        "Resize", (1, 2, 3, 4), {"mode": "nearest"},
        [("roi", np.array([], np.float32)), ("sc", np.array([1, 1, 3, 3], np.float32))]),
    "resize_nearest_downscale_sizes": lambda: _one(
        "Resize", (1, 2, 8, 8), {"mode": "nearest"},
        [("roi", np.array([], np.float32)), ("sc", np.array([], np.float32)),
         ("sz", np.array([1, 2, 4, 3], np.int64))]),
    "resize_linear_half_pixel": lambda: _one(
        "Resize", (1, 2, 3, 4), {"mode": "linear"},
        [("roi", np.array([], np.float32)), ("sc", np.array([1, 1, 2, 2], np.float32))]),
    "resize_linear_align_corners": lambda: _one(
        "Resize", (1, 2, 3, 4), {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        [("roi", np.array([], np.float32)), ("sc", np.array([], np.float32)),
         ("sz", np.array([1, 2, 7, 5], np.int64))]),
    "resize_linear_asymmetric": lambda: _one(
        "Resize", (1, 2, 3, 4), {"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
        [("roi", np.array([], np.float32)), ("sc", np.array([1, 1, 2, 2], np.float32))]),
    "upsample_opset9": lambda: _one("Upsample", (1, 2, 3, 4), {"mode": "nearest"},
                                    [("sc", np.array([1, 1, 2, 2], np.float32))], opset=9),
    "topk": lambda: _one("TopK", (3, 8), {"axis": 1}, [("k", np.array([3], np.int64))], outputs=2,
                         out_dtype=None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_onnxruntime(case):
    model, feeds = CASES[case]()
    if case == "topk":  # the indices output is int64
        model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    _compare(model, feeds)


def test_shape_arithmetic_is_folded_and_linear_layers_fused():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape (what exporters write for x.view(b, -1))
    folds into constants, and MatMul + Add of constant matrices becomes one linear step."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["logits"]),
        helper.make_node("Relu", ["logits"], ["y"]),
    ]
    model = _model(nodes, [("x", ("n", 2, 3, 4), np.float32)], [("y", None)],
                   [("zero", np.array(0, np.int64)), ("axis0", np.array([0], np.int64)),
                    ("minus_one", np.array([-1], np.int64)), ("w", _x(24, 5)), ("b", _x(5))])
    module = _compare(model, {"x": _x(3, 2, 3, 4)})
    assert [step.node.op for step in module.steps] == ["Reshape", "Linear", "Relu"]


def test_token_ids_feed_an_embedding():
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
             helper.make_node("ReduceMean", ["emb", "axis1"], ["y"], keepdims=0)]
    model = _model(nodes, [("ids", (2, 6), np.int64)], [("y", None)],
                   [("table", _x(50, 8)), ("axis1", np.array([1], np.int64))], opset=18)
    _compare(model, {"ids": RNG.integers(-50, 50, (2, 6)).astype(np.int64)})


@pytest.mark.parametrize("axis", [-1, 1])
def test_one_hot_over_ids_with_negative_indices(axis):
    nodes = [helper.make_node("OneHot", ["ids", "depth", "values"], ["y"], axis=axis)]
    model = _model(nodes, [("ids", (2, 6), np.int64)], [("y", None)],
                   [("depth", np.array(7, np.int64)), ("values", np.array([-1.0, 2.0], np.float32))])
    _compare(model, {"ids": RNG.integers(-7, 7, (2, 6)).astype(np.int64)})


def test_several_outputs_keep_their_order():
    nodes = [helper.make_node("Sigmoid", ["x"], ["second"]), helper.make_node("Tanh", ["x"], ["first"])]
    model = _model(nodes, [("x", (2, 3), np.float32)], [("first", None), ("second", None)])
    module = _compare(model, {"x": _x(2, 3)})
    assert module.output_names == ["first", "second"]


def test_a_shape_read_from_the_data_is_refused_by_name():
    nodes = [helper.make_node("Cast", ["x"], ["n"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "n"], ["y"])]
    model = _model(nodes, [("x", (2,), np.float32)], [("y", None)])
    with pytest.raises(ConversionError, match=r"Reshape.*computed from the input data"):
        onnx_torch.module_from_onnx(model, {"x": np.array([2.0, 1.0], np.float32)})


def test_unsupported_and_quantized_ops_are_refused_before_conversion():
    nodes = [helper.make_node("NonMaxSuppression", ["x", "x"], ["y"]), helper.make_node("Unique", ["x"], ["z"])]
    model = _model(nodes, [("x", (1, 4), np.float32)], [("y", None)])
    with pytest.raises(ConversionError, match="NonMaxSuppression, Unique") as raised:
        onnx_torch.module_from_onnx(model, {"x": _x(1, 4)})
    assert OTHER_ROUTES in raised.value.hint  # the packager names the formats from the route table
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["y"])]
    model = _model(nodes, [("x", (1, 4), np.float32)], [("y", None)], [("s", np.float32(0.1))])
    with pytest.raises(ConversionError, match="already quantized"):
        onnx_torch.module_from_onnx(model, {"x": _x(1, 4)})


def _torch_export(module, args, opset=17, **kw):
    import io

    buffer = io.BytesIO()
    torch.onnx.export(module.eval(), args, buffer, opset_version=opset, dynamo=False, **kw)
    import onnx

    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.parametrize("layer", ["gru", "gru_bidirectional", "lstm", "lstm_two_layers"])
def test_recurrent_layers_match_onnx_runtime(layer):
    """GRU (linear_before_reset, as PyTorch exports it) and LSTM, with initial states, in both
    directions: the unrolled rebuild equals ONNX Runtime's kernels."""
    torch.manual_seed(0)
    cell = {"gru": lambda: torch.nn.GRU(6, 5), "gru_bidirectional": lambda: torch.nn.GRU(6, 5, bidirectional=True),
            "lstm": lambda: torch.nn.LSTM(6, 5), "lstm_two_layers": lambda: torch.nn.LSTM(6, 5, num_layers=2)}[layer]()
    layers = 2 if layer == "lstm_two_layers" else 1
    directions = 2 if "bidirectional" in layer else 1
    x, h = torch.randn(7, 3, 6), torch.randn(layers * directions, 3, 5)
    state = (h, torch.randn(layers * directions, 3, 5)) if layer.startswith("lstm") else h

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = cell

        def forward(self, x, h, c=None):
            y, new = self.cell(x, (h, c) if c is not None else h)
            return (y, *new) if isinstance(new, tuple) else (y, new)

    args = (x, *state) if isinstance(state, tuple) else (x, state)
    model = _torch_export(Wrapped(), args, input_names=["x", "h", "c"][:len(args)])
    assert {n.op_type for n in model.graph.node} & {"GRU", "LSTM"}
    _compare(model, {i.name: a.numpy() for i, a in zip(model.graph.input, args)}, atol=1e-5, export=False)


@pytest.mark.parametrize("spelled", ["opset11", "opset17"])
def test_spelled_out_gelu_and_layer_norm_become_single_ops(spelled):
    """An Erf GELU and a ReduceMean/Pow/Sqrt/Div LayerNorm (as exports before opset 17/20 write
    them) are rebuilt as F.gelu and F.layer_norm, which converters lower to their GELU and
    layer-norm kernels; the values do not change."""
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.weight, self.bias = torch.nn.Linear(8, 8), torch.nn.Parameter(torch.randn(8)), \
                torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            y = torch.nn.functional.gelu(self.fc(x))
            mean = y.mean(-1, keepdim=True)
            normed = (y - mean) / torch.sqrt((y - mean).pow(2).mean(-1, keepdim=True) + 1e-5)
            return normed * self.weight + self.bias

    x = torch.randn(2, 5, 8)
    model = _torch_export(Block(), (x,), opset=11 if spelled == "opset11" else 17, input_names=["x"])
    ops = {n.op_type for n in model.graph.node}
    assert {"Erf", "Sqrt", "Div", "ReduceMean"} <= ops
    module = _compare(model, {"x": x.numpy()}, atol=1e-5)
    fused = [step.node.op for step in module.steps]
    assert "edgekit.Gelu" in fused and "edgekit.LayerNorm" in fused
    assert not {"Erf", "Sqrt", "Div", "ReduceMean", "Pow"} & set(fused)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize("shape, pads", [((2, 40), [0, 3, 0, 5]), ((2, 3, 10), [0, 0, 2, 0, 0, 4]),
                                         ((1, 2, 6, 7), [0, 0, 1, 2, 0, 0, 3, 1])])
def test_reflect_edge_and_wrap_padding_on_any_axis(mode, shape, pads):
    """A TF export's MirrorPad pads the samples of [N, T] audio (axis 1), which F.pad's reflect
    mode does not take: it was refused on the TFLite and CoreML routes."""
    model = _model([helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)], [("x", shape, np.float32)],
                   [("y", None)], [("pads", np.array(pads, np.int64))])
    _compare(model, {"x": _x(*shape)})


@pytest.mark.parametrize("conv, weight, attrs, bias", [
    ("Conv", (6, 3, 3, 3), {"pads": [1, 1, 1, 1]}, False),
    ("Conv", (3, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}, True),
    ("ConvTranspose", (3, 6, 3, 3), {"strides": [2, 2]}, True)])
def test_batch_norm_after_a_convolution_folds_into_it_and_reaches_pt2e(conv, weight, attrs, bias):
    """paddle2onnx writes BatchNormalization after each bias-less Conv. Rebuilt as a batch norm
    over a convolution whose weight is a buffer, PT2E's conv+BN fusion re-registered the weight as
    a parameter and failed ("attribute 'const_6' already exists"): ExecuTorch was not built."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, \
        get_symmetric_quantization_config

    channels = weight[1] if conv == "ConvTranspose" else weight[0]
    nodes = [helper.make_node(conv, ["x", "w", "b"] if bias else ["x", "w"], ["c"], **attrs),
             helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["y"], epsilon=1e-3)]
    initializers = [("w", _x(*weight)), ("s", _x(channels)), ("o", _x(channels)), ("m", _x(channels)),
                    ("v", np.abs(_x(channels)) + 0.5)] + ([("b", _x(channels))] if bias else [])
    model = _model(nodes, [("x", (2, 3, 6, 6), np.float32)], [("y", None)], initializers, opset=11)
    module = _compare(model, {"x": _x(2, 3, 6, 6)}, atol=1e-4)
    assert [step.node.op for step in module.steps] == [conv]
    args = (torch.from_numpy(_x(2, 3, 6, 6)),)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepare_pt2e(torch.export.export(module, args).module(), quantizer)(*args)


@pytest.mark.parametrize("batch_axis, time_axis, dtype", [(0, 1, np.float32), (1, 0, np.float32), (0, 1, bool)])
def test_reverse_sequence_reverses_each_entry_up_to_its_length(batch_axis, time_axis, dtype):
    """TF's backward half of a bidirectional RNN over a mask: lengths computed from the data."""
    shape = [0, 0, 3]
    shape[batch_axis], shape[time_axis] = 4, 6
    nodes = [helper.make_node("ReverseSequence", ["x", "lengths"], ["y"], batch_axis=batch_axis, time_axis=time_axis)]
    elem = TensorProto.BOOL if dtype is bool else F32
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, shape),
                                           helper.make_tensor_value_info("lengths", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = _x(*shape) > 0 if dtype is bool else _x(*shape)
    feeds = {"x": x, "lengths": np.array([6, 1, 3, 0], np.int64)}
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    module = onnx_torch.module_from_onnx(model, feeds)
    got = module(torch.from_numpy(feeds["x"]), torch.from_numpy(feeds["lengths"]))
    np.testing.assert_array_equal(got.numpy(), expected)


def _rnn_loop_model(steps=5, condition_from_data=False):
    """A tf2onnx-style Loop over time: a counter and a state carried, the step's state scanned out;
    it ends on ``counter < steps`` (or, with ``condition_from_data``, on the state's sign)."""
    body_nodes = [
        helper.make_node("Gather", ["seq", "i"], ["frame"], axis=0),
        helper.make_node("MatMul", ["frame", "w"], ["a"]),
        helper.make_node("MatMul", ["h_in", "u"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Tanh", ["s"], ["h_out"]),
        helper.make_node("Add", ["t_in", "one"], ["t_out"]),
        helper.make_node("ReduceSum", ["h_out"], ["total"], keepdims=0) if condition_from_data else
        helper.make_node("Less", ["t_out", "limit"], ["go"]),
    ] + ([helper.make_node("Greater", ["total", "zero"], ["go"])] if condition_from_data else []) + [
        helper.make_node("Identity", ["h_out"], ["scan"])]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("t_in", TensorProto.INT64, []), helper.make_tensor_value_info("h_in", F32, None)],
        [helper.make_tensor_value_info("go", TensorProto.BOOL, []), helper.make_tensor_value_info("t_out", TensorProto.INT64, []),
         helper.make_tensor_value_info("h_out", F32, None), helper.make_tensor_value_info("scan", F32, None)],
        [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array(steps, np.int64), "limit"),
         numpy_helper.from_array(np.float32(0), "zero")])
    nodes = [helper.make_node("Transpose", ["x"], ["seq"], perm=[1, 0, 2]),
             helper.make_node("Loop", ["trip", "cond", "t0", "h0"], ["t_final", "h_final", "states"], body=body),
             helper.make_node("Transpose", ["states"], ["y"], perm=[1, 0, 2])]
    return _model(nodes, [("x", (2, steps, 3), np.float32)], [("y", None), ("h_final", None)],
                  [("trip", np.array(100, np.int64)), ("cond", np.array(True)), ("t0", np.array(0, np.int64)),
                   ("h0", np.zeros((2, 4), np.float32)), ("w", _x(3, 4)), ("u", _x(4, 4))])


def test_a_loop_over_time_is_unrolled_into_linear_steps():
    """tf2onnx writes a masked or bidirectional Keras GRU as an ONNX Loop, which had no rebuild
    ("has a subgraph"): TFLite, CoreML and ExecuTorch were not built. The loop runs a fixed number
    of steps at the rebuild's fixed shapes; unrolled, each step's products are linear layers."""
    model = _rnn_loop_model(steps=5)
    module = _compare(model, {"x": _x(2, 5, 3)})
    # five frame products, four state products (the first state is the constant zeros: folded)
    assert [step.node.op for step in module.steps].count("Linear") == 9
    assert "Loop" not in {step.node.op for step in module.steps}
    # the steps' submodules are named for the formats to keep float (as ONNX Runtime runs a Loop's body)
    loop_ops = [step.node.op for attribute, step in zip(module.step_modules, module.steps)
                if attribute in module.loop_modules]
    assert loop_ops.count("Linear") == 9 and "Transpose" not in loop_ops


def test_a_loop_that_ends_on_the_data_is_refused_by_name():
    with pytest.raises(ConversionError, match="ends on a condition computed from the input data"):
        onnx_torch.module_from_onnx(_rnn_loop_model(condition_from_data=True), {"x": _x(2, 5, 3)})
