"""Small QDQ ONNX classifiers written with numpy and onnx.helper in milliseconds: the quantized
sources users bring, including broken ones (a wrong scale, a per-channel activation range)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def quadrant_images(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The quantized reference models' data (``models/quantized/build.py``): 8x8 noise images with
    one brighter quadrant, labelled by that quadrant (4 classes)."""
    import importlib.util

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("quantized_build", ROOT / "models/quantized/build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.images(count, seed)


def trained_linear(x: np.ndarray, y: np.ndarray, classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A least-squares linear classifier: weights [classes, features], bias [classes]."""
    flat = np.concatenate([x.reshape(len(x), -1), np.ones((len(x), 1), np.float32)], axis=1)
    solution, *_ = np.linalg.lstsq(flat, np.eye(classes)[y] * 8.0, rcond=None)
    return solution[:-1].T.astype(np.float32), solution[-1].astype(np.float32)


def write_data(folder: Path) -> tuple[Path, Path]:
    x, y = quadrant_images(300, 0)
    ex, ey = quadrant_images(200, 1)
    np.savez(folder / "calibration.npz", image=x, y=y)
    np.savez(folder / "eval.npz", image=ex, y=ey)
    return folder / "calibration.npz", folder / "eval.npz"


def write_float(path: Path, weights: np.ndarray, bias: np.ndarray) -> Path:
    """The float classifier (input ``image`` [N, 1, 8, 8], output ``logits``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Flatten", ["image"], ["flat"], name="flatten"),
             helper.make_node("Gemm", ["flat", "W", "b"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", weights.shape[0]])],
                              [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def write_qdq(path: Path, weights: np.ndarray, bias: np.ndarray, x: np.ndarray, *, input_scale: float | None = None,
              weight_scale_factor: float | np.ndarray = 1.0, output_scale_factor: float = 1.0,
              per_channel_input: bool = False) -> Path:
    """The classifier as a QDQ graph: int8 per-channel symmetric weights, int8 activations with
    ranges from ``x``. ``input_scale`` overrides the input pair's scale (0, NaN, -1: invalid ones);
    the factors scale the weight and output scales (a broken but valid graph);
    ``per_channel_input`` gives the input pair one scale per feature."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    flat = x.reshape(len(x), -1)
    if per_channel_input:
        in_scale = (np.abs(flat).max(axis=0) / 127 + 1e-6).astype(np.float32)
    else:
        in_scale = np.array(np.abs(flat).max() / 127 if input_scale is None else input_scale, np.float32)
    w_scale = (np.abs(weights).max(axis=1) / 127).astype(np.float32)
    w_int = np.clip(np.round(weights / w_scale[:, None]), -127, 127).astype(np.int8)
    logits = flat @ weights.T + bias
    out_scale = np.array(np.abs(logits).max() / 127 * output_scale_factor, np.float32)
    zero_in = np.zeros(in_scale.shape, np.int8)
    nodes = [
        helper.make_node("Flatten", ["image"], ["flat"], name="flatten"),
        helper.make_node("QuantizeLinear", ["flat", "in_scale", "in_zero"], ["flat_q"], name="flat_quantize", axis=1),
        helper.make_node("DequantizeLinear", ["flat_q", "in_scale", "in_zero"], ["flat_dq"], name="flat_dequantize",
                         axis=1),
        helper.make_node("DequantizeLinear", ["W_q", "W_scale", "W_zero"], ["W_dq"], name="W_dequantize", axis=0),
        helper.make_node("Gemm", ["flat_dq", "W_dq", "b"], ["fc_out"], name="fc", transB=1),
        helper.make_node("QuantizeLinear", ["fc_out", "out_scale", "out_zero"], ["fc_q"], name="fc_quantize"),
        helper.make_node("DequantizeLinear", ["fc_q", "out_scale", "out_zero"], ["logits"], name="fc_dequantize"),
    ]
    initializers = [
        numpy_helper.from_array(in_scale, "in_scale"), numpy_helper.from_array(zero_in, "in_zero"),
        numpy_helper.from_array(w_int, "W_q"), numpy_helper.from_array((w_scale * weight_scale_factor).astype(np.float32), "W_scale"),
        numpy_helper.from_array(np.zeros(len(w_scale), np.int8), "W_zero"), numpy_helper.from_array(bias, "b"),
        numpy_helper.from_array(out_scale, "out_scale"), numpy_helper.from_array(np.array(0, np.int8), "out_zero"),
    ]
    graph = helper.make_graph(nodes, "linear_qdq",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", weights.shape[0]])],
                              initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path
