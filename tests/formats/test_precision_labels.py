"""Precision labels say what the file holds: a 16-bit layer is the one asked for (not the softmax
that reads it), and --full-integer keeps only a final activation in float."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import UnsupportedOpError
from edgekit.formats.precision import Precision


def _mlp(path):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(size=(8, 16)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="dense1/MatMul"),
             helper.make_node("Relu", ["h"], ["r"], name="dense1/Relu"),
             helper.make_node("MatMul", ["r", "w2"], ["logits"], name="dense2/MatMul"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="probs/Softmax", axis=-1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)


def test_only_the_layer_given_16_bit_activations_is_labelled_int16(tmp_path):
    quantization = pytest.importorskip("onnxruntime.quantization")
    from edgekit.formats.onnx.precision import analyse

    _mlp(tmp_path / "mlp.onnx")

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": np.random.default_rng(i).normal(size=(4, 8)).astype(np.float32)}
                               for i in range(8)])

        def get_next(self):
            return next(self.items, None)

    wide = {t: [{"quant_type": quantization.QuantType.QInt16}] for t in ("r", "logits")}  # dense2's activations
    quantization.quantize_static(str(tmp_path / "mlp.onnx"), str(tmp_path / "q.onnx"), Reader(),
                                 quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8,
                                 extra_options={"TensorQuantOverrides": wide})
    found = analyse(str(tmp_path / "q.onnx"))
    assert {op["layer"] for op in found.int16_ops} == {"dense2"}  # not the softmax that reads dense2's output
    assert found.label == "int8+int16 (1 layer)"


def test_a_label_never_says_int8_when_no_int8_op_is_left():
    only_wide = Precision(int8_ops=2, int16_ops=[{"op": "MatMul", "layer": "a", "tensor": "a"},
                                                 {"op": "MatMul", "layer": "b", "tensor": "b"}])
    assert only_wide.label == "int16 (2 layers)"


def test_full_integer_refuses_network_arithmetic_left_in_the_float_tail():
    from edgekit.formats.tflite.builder import _refuse_unexpected_float_ops
    from edgekit.formats.tflite.precision import full_integer_float_ops

    tail = [{"op": op, "layer": "head", "tensor": f"head/{op}", "tail": True}
            for op in ("RELU", "ADD", "SUM", "DIV", "SOFTMAX")]
    precision = Precision(int8_ops=5, float_ops=tail)
    assert precision.inner == []  # the default accepts them as a tail
    refused = full_integer_float_ops(precision)
    assert {op["op"] for op in refused} == {"RELU", "ADD", "SUM", "DIV"}  # a final softmax may stay float
    with pytest.raises(UnsupportedOpError, match="only a final activation"):
        _refuse_unexpected_float_ops(refused, ())
    just_softmax = Precision(int8_ops=5, float_ops=tail[-1:])
    assert full_integer_float_ops(just_softmax) == []
