"""Op names (ATen and edge dialect, overload dropped) that the ExecuTorch format sorts by what they
do, in one place: the build's precision count, the placement report and the build notes read
them. Kept free of imports: the device-side backend reads it too."""

from __future__ import annotations

# quantize/dequantize: convert between int8 and float, compute nothing
QDQ = frozenset({"quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel",
                 "choose_qparams"})

# copies that only lay a tensor out in memory (dim order, contiguity, views) or change its dtype:
# the edge program puts them around delegates; never compute left outside XNNPACK
LAYOUT_OPS = frozenset({"_to_dim_order_copy", "_clone_dim_order", "view_copy", "clone", "_to_copy", "alias_copy"})

# data movement and shape bookkeeping (as ONNX's NEUTRAL_OPS): runs on whatever it is given, so
# it is neither int8 nor float arithmetic; an input's transpose and padding before its first
# quantize are not a float layer
NEUTRAL_OPS = LAYOUT_OPS | frozenset({
    "getitem", "alloc", "view", "reshape", "_unsafe_view", "flatten", "permute", "permute_copy", "transpose",
    "transpose_copy", "t_copy", "squeeze", "squeeze_copy", "unsqueeze", "unsqueeze_copy", "expand", "expand_copy",
    "slice", "slice_copy", "select", "select_copy", "cat", "split", "split_copy", "split_with_sizes_copy", "unbind_copy",
    "constant_pad_nd", "pad", "repeat", "tile", "pixel_shuffle", "pixel_unshuffle", "index", "index_select",
    "embedding", "gather", "max_pool2d", "max_pool2d_with_indices", "upsample_nearest2d", "full", "full_like",
    "zeros", "zeros_like", "ones", "ones_like", "arange", "scalar_tensor", "eq", "ne", "lt", "le", "gt", "ge",
    "where", "logical_not", "logical_and", "logical_or", "bitwise_not", "sym_size"})

# ops a float tail may hold (as TFLite's TAIL_OPS): activations, normalisations, elementwise ops,
# never a layer with weights
TAIL_OPS = frozenset({
    "_softmax", "softmax", "_log_softmax", "log_softmax", "sigmoid", "tanh", "relu", "hardtanh", "leaky_relu",
    "hardswish", "abs", "mul", "div", "add", "sub", "sqrt", "rsqrt", "exp", "sum", "mean", "maximum", "minimum",
    "clamp", "linalg_vector_norm"}) | NEUTRAL_OPS

# ops whose second argument may be a weight
WEIGHTED = frozenset({"convolution", "linear", "addmm", "mm", "bmm"})

# not arithmetic: conversions and data movement
NOT_COMPUTE = QDQ | NEUTRAL_OPS


def op_name(target: object) -> str:
    """``aten.convolution.default`` (ATen or edge dialect) -> ``convolution``; a plain function by its name."""
    opname = getattr(target, "_opname", None)
    return str(opname) if opname else getattr(target, "__name__", str(target)).split(".")[-1]
