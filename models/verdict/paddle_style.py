"""A Paddle-style image classifier as paddle2onnx writes it (PP-LCNet: the text-orientation and
text-line models of PaddleOCR), built with ``onnx.helper`` in a second: opset 11, p2o node names,
BatchNormalization after each bias-less Conv, depthwise convolutions, HardSwish both as
``x * HardSigmoid(x)`` and as ``x * Clip(x + 3, 0, 6) / 6`` over shared scalar initializers,
squeeze-excite with a HardSigmoid gate, Flatten, MatMul + Add and Softmax. Random weights:
the verdict is agreement with float on random images."""

from __future__ import annotations

from pathlib import Path

CLASSES = 4
SIZE = 48


def build(path: Path, seed: int = 0) -> Path:
    """Write the model to ``path``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes: list = []
    initializers: list = []
    counts: dict[str, int] = {}

    def constant(name: str, value) -> str:
        array = np.asarray(value)
        initializers.append(numpy_helper.from_array(array.astype(np.float32) if array.dtype.kind == "f" else array,
                                                    name))
        return name

    def node(op: str, inputs: list[str], **attributes) -> str:
        index = counts.get(op, 0)
        counts[op] = index + 1
        output = f"{op.lower()}_{index}.tmp_0"
        nodes.append(helper.make_node(op, inputs, [output], name=f"p2o.{op}.{index}", **attributes))
        return output

    three, six, zero = constant("const_3", np.float32(3)), constant("const_6", np.float32(6)), \
        constant("const_0", np.float32(0))

    def hard_swish(x: str, spelled_out: bool) -> str:
        if not spelled_out:
            return node("Mul", [x, node("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])
        clipped = node("Clip", [node("Add", [x, three]), zero, six])
        return node("Div", [node("Mul", [x, clipped]), six])

    def conv_bn(x: str, cin: int, cout: int, kernel: int, stride: int, name: str, group: int = 1) -> str:
        weight = constant(f"{name}_weights", rng.normal(0, (2 / (kernel * kernel * cin / group)) ** 0.5,
                                                        (cout, cin // group, kernel, kernel)))
        y = node("Conv", [x, weight], kernel_shape=[kernel, kernel], strides=[stride, stride],
                 pads=[kernel // 2] * 4, group=group)
        norm = [constant(f"{name}_bn_{part}", value) for part, value in (
            ("scale", rng.uniform(0.5, 1.5, cout)), ("offset", rng.normal(0, 0.1, cout)),
            ("mean", rng.normal(0, 0.1, cout)), ("variance", rng.uniform(0.5, 1.5, cout)))]
        return node("BatchNormalization", [y, *norm], epsilon=1e-5, momentum=0.9)

    def squeeze_excite(x: str, channels: int, name: str) -> str:
        squeezed = node("GlobalAveragePool", [x])
        weights = [constant(f"{name}_{i}_{part}", rng.normal(0, 0.3, shape)) for i, (shape_w, shape_b) in
                   enumerate((((channels // 4, channels, 1, 1), channels // 4), ((channels, channels // 4, 1, 1),
                                                                                   channels)))
                   for part, shape in (("weights", shape_w), ("offset", shape_b))]
        reduced = node("Relu", [node("Conv", [squeezed, weights[0], weights[1]], kernel_shape=[1, 1])])
        gate = node("HardSigmoid", [node("Conv", [reduced, weights[2], weights[3]], kernel_shape=[1, 1])],
                    alpha=0.2, beta=0.5)
        return node("Mul", [x, gate])

    x = hard_swish(conv_bn("x", 3, 16, 3, 2, "conv1"), False)
    for i, (cin, cout, kernel, stride, excite) in enumerate(
            [(16, 32, 3, 1, False), (32, 32, 3, 2, False), (32, 64, 5, 1, True), (64, 64, 5, 2, True)]):
        x = hard_swish(conv_bn(x, cin, cin, kernel, stride, f"dw{i}", group=cin), i % 2 == 1)
        if excite:
            x = squeeze_excite(x, cin, f"se{i}")
        x = hard_swish(conv_bn(x, cin, cout, 1, 1, f"pw{i}"), i % 2 == 1)
    x = node("Flatten", [node("GlobalAveragePool", [x])], axis=1)
    x = node("Add", [node("MatMul", [x, constant("fc_weights", rng.normal(0, 0.3, (64, CLASSES)))]),
                     constant("fc_offset", np.zeros(CLASSES))])
    node("Softmax", [x], axis=1)
    graph = helper.make_graph(nodes, "pp_lcnet_style",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
                              [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, ["N", CLASSES])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], producer_name="PaddlePaddle",
                              ir_version=7)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def images(n: int, seed: int):
    """``n`` RGB images, NCHW float32 in 0..1: smooth colour gradients with noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 1, SIZE, dtype=np.float32)
    base = rng.uniform(0, 1, (n, 3, 1, 1)) * ramp[None, None, :, None] + rng.uniform(0, 1, (n, 3, 1, 1)) * ramp
    return np.clip(base / 2 + rng.normal(0, 0.1, (n, 3, SIZE, SIZE)), 0, 1).astype(np.float32)
