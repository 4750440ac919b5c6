"""What ONNX Runtime really runs of a QDQ model after its own graph optimization.

A QDQ graph says where int8 is allowed; ONNX Runtime's optimizer decides where it happens: it
fuses DequantizeLinear -> op -> QuantizeLinear into int8 kernels (QLinearConv, QGemm, ...) where
it has one for the types and the CPU, and otherwise leaves the op in float between Q/DQ pairs
(on x86 an S8S8 graph is first turned into U8S8, and ops that cannot be are left in float). The
count of compute nodes left in float after optimization is what tells an "INT8" artifact that
runs mostly in float; it is measured on the build machine's CPU and recorded with it.
"""

from __future__ import annotations

import os
import platform
import tempfile
from collections import Counter
from typing import Any

# int8 kernels of the default (ai.onnx) and Microsoft (com.microsoft) domains
INTEGER_OPS = {
    "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QGemm", "QLinearAdd", "QLinearMul",
    "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
    "QLinearSoftmax", "QLinearReduceMean", "QLinearWhere", "QAttention", "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat", "QLinearConvTranspose", "NhwcQLinearConv", "QEmbedLayerNormalization",
}
CONVERTING_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
# float ops that carry the model's arithmetic (what INT8 was meant to take over)
FLOAT_COMPUTE_OPS = {
    "Conv", "FusedConv", "NhwcFusedConv", "ConvTranspose", "MatMul", "FusedMatMul", "Gemm", "FusedGemm", "Add",
    "Mul", "Sub", "Div", "Sigmoid", "Relu", "Clip", "HardSigmoid", "HardSwish", "Softmax", "LSTM", "GRU", "RNN",
    "AveragePool", "GlobalAveragePool", "BatchNormalization", "LayerNormalization", "Gelu", "BiasGelu",
    "FastGelu", "Attention", "SkipLayerNormalization", "Tanh", "LeakyRelu", "PRelu", "ReduceMean",
}


def runtime_graph(path: str) -> dict[str, Any]:
    """Node counts of the model at ``path`` after ONNX Runtime's full CPU graph optimization:
    int8 kernels, float compute nodes (by op type), Q/DQ conversions; with the CPU it was read on."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="edgekit-ortgraph-") as scratch:
        optimized = os.path.join(scratch, "optimized.onnx")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = optimized
        options.log_severity_level = 3
        ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        model = onnx.load(optimized, load_external_data=False)
    ops = Counter(node.op_type for node in model.graph.node)
    integer = sum(n for op, n in ops.items() if op in INTEGER_OPS)
    floating = {op: n for op, n in sorted(ops.items()) if op in FLOAT_COMPUTE_OPS}
    compute = integer + sum(floating.values())
    return {
        "runtime": f"onnxruntime {ort.__version__}",
        "cpu": _cpu(),
        "int8_ops": integer,
        "float_ops": sum(floating.values()),
        "float_op_types": floating,
        "quantize_dequantize_ops": sum(n for op, n in ops.items() if op in CONVERTING_OPS),
        "int8_fraction": round(integer / compute, 4) if compute else None,
    }


def _cpu() -> str:
    """The machine and the int8 features that decide ONNX Runtime's kernels (VNNI, dot product)."""
    from .kernels import int8_kernel_features

    return f"{platform.machine()}: {int8_kernel_features()}"
