"""A QDQ graph rebuilt with its pairs kept (``onnx_torch.load(..., keep_qdq=True)``): what CoreML and
ExecuTorch convert from a quantized source. It computes what ONNX Runtime computes for the graph,
each activation pair becomes PyTorch's quantize ops with the graph's own scale and zero point
(uint8 as the same values in int8), each 8-bit weight stays an int8 constant behind its
dequantize, and an int32 bias is folded into float values (run as a computation, it broke
XNNPACK's convolution pattern and the lowered program's numbers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _uint8_qdq_graph(folder: Path) -> Path:
    """A Conv -> Relu -> Gemm graph quantized by ONNX Runtime: uint8 activations, per-channel int8
    weights, int32 biases."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
         helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1, name="fc")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(rng.normal(0, 0.5, (2, 1, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array([0.1, -0.2], np.float32), "b"),
         numpy_helper.from_array(rng.normal(0, 0.3, (3, 32)).astype(np.float32), "w2"),
         numpy_helper.from_array(np.array([0.05, 0.0, -0.1], np.float32), "b2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(folder / "float.onnx"))
    rows = iter([{"x": rng.normal(0, 1, (1, 1, 4, 4)).astype(np.float32)} for _ in range(20)])

    class Reader(CalibrationDataReader):
        def get_next(self):  # type: ignore[no-untyped-def]
            return next(rows, None)

    quantize_static(str(folder / "float.onnx"), str(folder / "qdq.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    return folder / "qdq.onnx"


def test_a_kept_qdq_rebuild_computes_the_graph_with_its_own_pairs(tmp_path):
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import numpy_helper

    from edgekit.conversion.onnx_torch import load

    path = _uint8_qdq_graph(tmp_path)
    x = np.random.default_rng(1).normal(0, 1, (1, 1, 4, 4)).astype(np.float32)
    module = load(str(path), {"x": x}, keep_qdq=True).eval()
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
        program = torch.export.export(module, (torch.from_numpy(x),))
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    step = float(np.abs(expected).max()) / 64
    assert np.allclose(got, expected, atol=step), (got, expected)
    graph = onnx.load(str(path)).graph
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    learned = {(float(values[n.input[1]]), int(values[n.input[2]]) - 128) for n in graph.node
               if n.op_type == "QuantizeLinear" and n.input[0] not in values}
    ops = [n for n in program.graph_module.graph.nodes if n.op == "call_function"]
    pairs = {(float(n.args[1]), int(n.args[2])) for n in ops if "quantize_per_tensor" in str(n.target)
             and "dequantize" not in str(n.target)}
    assert learned and pairs == learned  # every activation pair, uint8 read as int8
    weights = [n for n in ops if "dequantize_per_channel" in str(n.target)]
    assert len(weights) == 2 and all(n.args[-1] == torch.int8 for n in weights)
    assert not any("aten.to" in str(n.target) or "aten.sub" in str(n.target) for n in ops)  # biases folded


def test_without_keep_qdq_the_same_graph_is_the_float_graph_it_simulates(tmp_path):
    import torch

    from edgekit.conversion.onnx_torch import load

    path = _uint8_qdq_graph(tmp_path)
    x = np.zeros((1, 1, 4, 4), np.float32)
    module = load(str(path), {"x": x}).eval()
    with torch.no_grad():
        program = torch.export.export(module, (torch.from_numpy(x),))
    assert not any("quantize" in str(n.target) for n in program.graph_module.graph.nodes if n.op == "call_function")
