"""An ONNX graph as a ``torch.nn.Module``, so that an ONNX source reaches TFLite (litert-torch)
and CoreML (coremltools' PyTorch frontend) by the same route as a PyTorch source.

Why not onnx2torch: it imports torchvision, and the only torchvision wheels for torch 2.13 are
CUDA builds that cannot load next to the CPU torch a build machine uses.

The module is specialised to fixed input shapes, the shapes the converters trace with. Building
it runs the graph once on example inputs: every value that does not depend on the input *data*
(initializers, ``Constant`` nodes, shape arithmetic such as Shape -> Gather -> Concat ->
Reshape) is folded into a constant there, and ``forward`` runs only the nodes that depend on
the data, with shape arguments as Python ints. torch.export and torch.jit.trace then see a
static graph with no data-dependent shapes. Constant matrices feeding MatMul/Gemm (+ bias Add)
become ``F.linear`` so the PyTorch quantizers treat them as the fully connected layers they are.

Each ONNX op is one small function below with the ONNX specification's semantics and attribute
defaults. A model with an op outside the table, a subgraph, or a shape that depends on the data
is refused by name before anything is converted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConversionError

ONNX_DOMAINS = ("", "ai.onnx")
_QUANTIZED = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
              "ConvInteger", "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul"}


class DataDependent(ConversionError):
    """A node needs, as a Python number, a value computed from the input data."""


def load(path: str, example: dict[str, np.ndarray]) -> Any:
    """The ONNX model at ``path`` as a module specialised to the shapes of ``example``."""
    import onnx

    return module_from_onnx(onnx.load(path), example)


def input_names(path: str) -> list[str]:
    import onnx

    model = onnx.load(path, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in initializers]


# --- the graph ------------------------------------------------------------------------------


@dataclass
class Node:
    op: str
    name: str
    inputs: list[str]  # "" for an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any]
    opset: int


@dataclass
class Step:
    """One node (or a fused MatMul+Add) that forward() runs."""

    node: Node
    run: Callable[["Args"], list[Any]]  # the node's outputs, in order
    consumes: list[str] = field(default_factory=list)


def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper, numpy_helper

    found: dict[str, Any] = {}
    for attribute in node.attribute:
        if attribute.type == attribute.GRAPH or attribute.type == attribute.GRAPHS:
            raise ConversionError(f"ONNX node {node.name or node.op_type} ({node.op_type}) has a subgraph",
                                  hint="control flow (If/Loop/Scan) converts only to the ONNX format: --format onnx")
        if attribute.type == attribute.TENSOR:
            found[attribute.name] = numpy_helper.to_array(attribute.t)
        else:
            value = helper.get_attribute_value(attribute)
            found[attribute.name] = value.decode() if isinstance(value, bytes) else value
    return found


def module_from_onnx(model: Any, example: dict[str, np.ndarray]) -> Any:
    """A ``torch.nn.Module`` running the ``onnx.ModelProto`` ``model`` on inputs shaped like ``example``."""
    return _module_class()(model, example)


def _module_class() -> type:
    """The module class, made on first use so that importing this file does not import torch."""
    import torch

    class _OnnxModule(torch.nn.Module):
        """The ONNX graph's data-dependent nodes, with everything else folded into constants."""

        def __init__(self, model: Any, example: dict[str, np.ndarray]) -> None:
            super().__init__()
            from onnx import numpy_helper

            graph = model.graph
            opset = next((o.version for o in model.opset_import if o.domain in ONNX_DOMAINS), 13)
            constants: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
            self.input_names = [v.name for v in graph.input if v.name not in constants]
            self.output_names = [v.name for v in graph.output]
            missing = [n for n in self.input_names if n not in example]
            if missing:
                raise ConversionError(f"no example input for the ONNX model's inputs {missing}")
            nodes = [Node(n.op_type, n.name or f"{n.op_type}_{i}", list(n.input), list(n.output), _attributes(n),
                          opset) for i, n in enumerate(graph.node)]
            _refuse_unsupported(nodes, [n.domain for n in graph.node])
            # Eager run: values that depend on input data are "dynamic"; the rest become constants.
            types = {v.name: _DTYPES.get(v.type.tensor_type.elem_type, "float32") for v in graph.input}
            values: dict[str, Any] = {name: torch.from_numpy(np.ascontiguousarray(example[name], dtype=types[name]))
                                      for name in self.input_names}
            dynamic = set(self.input_names)
            for name, array in constants.items():
                values[name] = torch.from_numpy(np.array(array))
            derived: dict[str, np.ndarray] = {}  # index tables etc. that ops compute from static shapes
            with torch.no_grad():
                for node in nodes:
                    produced = _run_eagerly(node, Args(node, values, constants, None, derived))
                    for out, value in zip(node.outputs, produced):
                        if out:
                            values[out] = value
                    if node.op not in ("Shape", "Size") and any(i in dynamic for i in node.inputs if i):
                        dynamic.update(o for o in node.outputs if o)
                    else:
                        for out, value in zip(node.outputs, produced):
                            if out:
                                constants[out] = value.detach().numpy() if isinstance(value, torch.Tensor) \
                                    else np.asarray(value)
            self.example_outputs = {name: values[name] for name in self.output_names}
            run = [n for n in nodes if any(o in dynamic for o in n.outputs)]
            ranks = {name: value.dim() for name, value in values.items() if isinstance(value, torch.Tensor)}
            self.steps = _fuse_linear(run, constants, set(self.output_names), ranks)
            used = {i for step in self.steps for i in step.consumes if i in constants}
            used |= {o for o in self.output_names if o in constants}
            self._buffer_of: dict[str, str] = {}
            for index, name in enumerate(sorted(used)):
                self._buffer_of[name] = f"const_{index}"
                self.register_buffer(f"const_{index}", torch.from_numpy(np.array(constants[name])), persistent=True)
            self.constants = {name: constants[name] for name in used}
            for index, (key, array) in enumerate(sorted(derived.items())):
                self._buffer_of[key] = f"derived_{index}"
                self.register_buffer(f"derived_{index}", torch.from_numpy(np.array(array)), persistent=True)

        def constant_tensor(self, name: str) -> Any:
            return getattr(self, self._buffer_of[name])

        def forward(self, *inputs: Any) -> Any:
            values: dict[str, Any] = dict(zip(self.input_names, inputs))
            for step in self.steps:
                produced = step.run(Args(step.node, values, self.constants, self))
                for out, value in zip(step.node.outputs, produced):
                    if out:
                        values[out] = value
            results = [values[o] if o in values else self.constant_tensor(o) for o in self.output_names]
            return results[0] if len(results) == 1 else tuple(results)

    return _OnnxModule


class Args:
    """A node's inputs and attributes as its op function wants them: tensors, or Python numbers
    for shape-like arguments (which must be constants)."""

    def __init__(self, node: Node, values: dict[str, Any], constants: dict[str, np.ndarray], module: Any,
                 derived: dict[str, np.ndarray] | None = None) -> None:
        self.node, self._values, self._constants, self._module = node, values, constants, module
        self._derived = derived

    def derived(self, tag: str, make: Callable[[], np.ndarray]) -> Any:
        """A constant tensor this node computes from static shapes (an index table, a divisor):
        made during the eager run, a module buffer in forward()."""
        import torch

        key = f"{self.node.name}/{tag}"
        if self._module is not None:
            return self._module.constant_tensor(key)
        array = np.ascontiguousarray(make())
        if self._derived is not None:
            self._derived[key] = array
        return torch.from_numpy(array)

    @property
    def opset(self) -> int:
        return self.node.opset

    def count(self) -> int:
        return len(self.node.inputs)

    def has(self, index: int) -> bool:
        return index < len(self.node.inputs) and self.node.inputs[index] != ""

    def t(self, index: int) -> Any:
        """Input ``index`` as a tensor."""
        import torch

        name = self.node.inputs[index]
        if name in self._values:
            return self._values[name]
        if self._module is not None:
            return self._module.constant_tensor(name)
        return torch.from_numpy(np.array(self._constants[name]))

    def const(self, index: int) -> np.ndarray | None:
        """Input ``index`` as a NumPy array when it does not depend on the data, else None."""
        return self._constants.get(self.node.inputs[index])

    def ints(self, index: int) -> list[int]:
        value = self.const(index)
        if value is None:
            raise DataDependent(
                f"ONNX node {self.node.name} ({self.node.op}) takes input {index} ({self.node.inputs[index]!r}) "
                "as a shape or index computed from the input data",
                hint="TFLite and CoreML need shapes that follow from the input shapes; package this model for "
                     "ONNX only (--format onnx), or export it with static shapes")
        return [int(v) for v in np.asarray(value).reshape(-1)]

    def number(self, index: int) -> float | None:
        value = self.const(index)
        return None if value is None else float(np.asarray(value).reshape(-1)[0])

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)


def _run_eagerly(node: Node, args: Args) -> list[Any]:
    """One node on the example inputs; a failure names the node and the shapes it got."""
    try:
        return _run_node(node, args)
    except ConversionError:
        raise
    except Exception as exc:
        shapes = [tuple(args.t(i).shape) if args.has(i) else None for i in range(args.count())]
        raise ConversionError(
            f"ONNX node {node.name} ({node.op}) fails on inputs shaped {shapes}: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
            hint="the model is converted at the calibration samples' shape (batch 1); check that the data has "
                 "the shape the model was exported for, or package it for ONNX only (--format onnx)") from None


def _run_node(node: Node, args: Args) -> list[Any]:
    produced = OPS[node.op](args)
    return list(produced) if isinstance(produced, (list, tuple)) else [produced]


def _refuse_unsupported(nodes: list[Node], domains: list[str]) -> None:
    quantized = sorted({n.op for n in nodes if n.op in _QUANTIZED})
    if quantized:
        raise ConversionError(
            f"the ONNX model is already quantized ({', '.join(quantized)})",
            hint="package the float model: edgekit calibrates and quantizes it for each format")
    unknown = sorted({f"{d}.{n.op}" if d not in ONNX_DOMAINS else n.op
                      for n, d in zip(nodes, domains) if d not in ONNX_DOMAINS or n.op not in OPS})
    if unknown:
        raise ConversionError(
            f"edgekit cannot convert these ONNX ops to TFLite or CoreML: {', '.join(unknown)}",
            hint="package the model for ONNX only (--format onnx), or export it without these ops")


# --- the op table ------------------------------------------------------------------------------

OPS: dict[str, Callable[[Args], Any]] = {}


def op(*names: str) -> Callable[[Callable[[Args], Any]], Callable[[Args], Any]]:
    def register(function: Callable[[Args], Any]) -> Callable[[Args], Any]:
        for name in names:
            OPS[name] = function
        return function

    return register


def _torch() -> Any:
    import torch

    return torch


def _F() -> Any:
    import torch.nn.functional as F

    return F


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
           10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def _dtype(onnx_type: int) -> Any:
    if onnx_type not in _DTYPES:
        raise ConversionError(f"ONNX tensor type {onnx_type} has no PyTorch equivalent here",
                              hint="package the model for ONNX only (--format onnx)")
    return getattr(_torch(), _DTYPES[onnx_type])


def _unary(function_name: str) -> Callable[[Args], Any]:
    return lambda a: getattr(_torch(), function_name)(a.t(0))


for _name, _function in {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
                         "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Neg": "neg", "Abs": "abs", "Floor": "floor",
                         "Ceil": "ceil", "Round": "round", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Sign": "sign",
                         "IsNaN": "isnan", "Not": "logical_not"}.items():
    OPS[_name] = _unary(_function)


@op("Identity")
def _identity(a: Args) -> Any:
    return a.t(0)


@op("Dropout")
def _dropout(a: Args) -> Any:  # inference: identity; the optional mask is all true
    x = a.t(0)
    return (x, _torch().ones_like(x, dtype=_torch().bool)) if len(a.node.outputs) > 1 else x


@op("Add")
def _add(a: Args) -> Any:
    return a.t(0) + a.t(1)


@op("Sub")
def _sub(a: Args) -> Any:
    return a.t(0) - a.t(1)


@op("Mul")
def _mul(a: Args) -> Any:
    return a.t(0) * a.t(1)


@op("Div")
def _div(a: Args) -> Any:
    x, y = a.t(0), a.t(1)
    if not x.is_floating_point() and not y.is_floating_point():  # ONNX integer division truncates
        return _torch().div(x, y, rounding_mode="trunc")
    return x / y


@op("Pow")
def _pow(a: Args) -> Any:
    exponent = a.number(1) if a.const(1) is not None and a.const(1).size == 1 else None
    if exponent == 2.0:
        x = a.t(0)
        return x * x
    if exponent == 0.5:
        return _torch().sqrt(a.t(0))
    x, y = a.t(0), a.t(1)
    return _torch().pow(x, y.to(x.dtype))


@op("Mod")
def _mod(a: Args) -> Any:
    return _torch().fmod(a.t(0), a.t(1)) if a.attr("fmod", 0) else _torch().remainder(a.t(0), a.t(1))


def _variadic(function_name: str) -> Callable[[Args], Any]:
    def run(a: Args) -> Any:
        result = a.t(0)
        for index in range(1, a.count()):
            result = getattr(_torch(), function_name)(result, a.t(index))
        return result

    return run


OPS["Max"] = _variadic("maximum")
OPS["Min"] = _variadic("minimum")
OPS["Sum"] = _variadic("add")


@op("Mean")
def _mean(a: Args) -> Any:
    return OPS["Sum"](a) / a.count()


for _name, _function in {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le",
                         "GreaterOrEqual": "ge", "And": "logical_and", "Or": "logical_or",
                         "Xor": "logical_xor"}.items():
    OPS[_name] = (lambda f: lambda a: getattr(_torch(), f)(a.t(0), a.t(1)))(_function)


@op("Where")
def _where(a: Args) -> Any:
    return _torch().where(a.t(0), a.t(1), a.t(2))


@op("Cast")
def _cast(a: Args) -> Any:
    return a.t(0).to(_dtype(int(a.attr("to"))))


@op("CastLike")
def _cast_like(a: Args) -> Any:
    return a.t(0).to(a.t(1).dtype)


@op("LeakyRelu")
def _leaky_relu(a: Args) -> Any:
    return _F().leaky_relu(a.t(0), float(a.attr("alpha", 0.01)))


@op("Elu")
def _elu(a: Args) -> Any:
    return _F().elu(a.t(0), float(a.attr("alpha", 1.0)))


@op("Selu")
def _selu(a: Args) -> Any:
    alpha, gamma = float(a.attr("alpha", 1.67326319217681884765625)), float(a.attr("gamma", 1.05070102214813232421875))
    x = a.t(0)
    return gamma * _torch().where(x > 0, x, alpha * (_torch().exp(x) - 1))


@op("HardSigmoid")
def _hard_sigmoid(a: Args) -> Any:
    alpha, beta = float(a.attr("alpha", 0.2)), float(a.attr("beta", 0.5))
    if math.isclose(alpha, 1 / 6, rel_tol=1e-6) and beta == 0.5:
        return _F().hardsigmoid(a.t(0))
    return _torch().clamp(alpha * a.t(0) + beta, 0.0, 1.0)


@op("HardSwish")
def _hard_swish(a: Args) -> Any:
    return _F().hardswish(a.t(0))


@op("PRelu")
def _prelu(a: Args) -> Any:
    x, slope = a.t(0), a.t(1)
    return _torch().where(x >= 0, x, x * slope)


@op("Softplus")
def _softplus(a: Args) -> Any:
    return _F().softplus(a.t(0))


@op("Softsign")
def _softsign(a: Args) -> Any:
    return _F().softsign(a.t(0))


@op("Mish")
def _mish(a: Args) -> Any:
    return _F().mish(a.t(0))


@op("Gelu")
def _gelu(a: Args) -> Any:
    return _F().gelu(a.t(0), approximate=str(a.attr("approximate", "none")))


@op("Clip")
def _clip(a: Args) -> Any:
    x = a.t(0)
    if a.opset < 11:
        low, high = a.attr("min", None), a.attr("max", None)
    else:
        low = a.number(1) if a.has(1) else None
        high = a.number(2) if a.has(2) else None
        if (a.has(1) and low is None) or (a.has(2) and high is None):  # bounds computed from the data
            return _torch().clamp(x, a.t(1) if a.has(1) else None, a.t(2) if a.has(2) else None)
    if low == 0.0 and high == 6.0:
        return _F().relu6(x)
    if low == 0.0 and high is None:
        return _torch().relu(x)
    return _torch().clamp(x, low, high)


# --- linear algebra and normalization --------------------------------------------------------------


@op("MatMul")
def _matmul(a: Args) -> Any:
    return _torch().matmul(a.t(0), a.t(1))


@op("Gemm")
def _gemm(a: Args) -> Any:
    x, w = a.t(0), a.t(1)
    if a.attr("transA", 0):
        x = x.t()
    if a.attr("transB", 0):
        w = w.t()
    y = _torch().matmul(x, w) * float(a.attr("alpha", 1.0))
    if a.has(2):
        y = y + float(a.attr("beta", 1.0)) * a.t(2)
    return y


@op("Einsum")
def _einsum(a: Args) -> Any:
    return _torch().einsum(str(a.attr("equation")), *[a.t(i) for i in range(a.count())])


@op("BatchNormalization")
def _batch_norm(a: Args) -> Any:
    return _F().batch_norm(a.t(0), a.t(3), a.t(4), a.t(1), a.t(2), training=False,
                           eps=float(a.attr("epsilon", 1e-5)))


@op("InstanceNormalization")
def _instance_norm(a: Args) -> Any:
    return _F().instance_norm(a.t(0), weight=a.t(1), bias=a.t(2), eps=float(a.attr("epsilon", 1e-5)))


@op("LayerNormalization")
def _layer_norm(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", -1)), x.dim())
    normalized = tuple(x.shape[axis:])
    eps = float(a.attr("epsilon", 1e-5))
    scale = a.t(1)
    bias = a.t(2) if a.has(2) else None
    if tuple(scale.shape) == normalized and (bias is None or tuple(bias.shape) == normalized):
        return _F().layer_norm(x, normalized, scale, bias, eps)
    dims = tuple(range(axis, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (x - mean) / _torch().sqrt(variance + eps) * scale
    return y + bias if bias is not None else y


@op("LRN")
def _lrn(a: Args) -> Any:
    return _F().local_response_norm(a.t(0), int(a.attr("size")), float(a.attr("alpha", 1e-4)),
                                    float(a.attr("beta", 0.75)), float(a.attr("bias", 1.0)))


@op("Softmax", "LogSoftmax")
def _softmax(a: Args) -> Any:
    x = a.t(0)
    function = _torch().softmax if a.node.op == "Softmax" else _torch().log_softmax
    axis = _axis(int(a.attr("axis", -1 if a.opset >= 13 else 1)), x.dim())
    if a.opset >= 13 or axis == x.dim() - 1:
        return function(x, axis)
    shape = tuple(x.shape)  # before opset 13: over the input flattened to 2-D at axis
    return function(x.reshape(math.prod(shape[:axis]), -1), 1).reshape(shape)


# --- convolution and pooling ---------------------------------------------------------------------


def _padding(a: Args, spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> tuple[list[int], list[int]]:
    """Begin and end padding per spatial dimension (ONNX pads or auto_pad)."""
    n = len(spatial)
    auto_pad = str(a.attr("auto_pad", "NOTSET"))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        return begins, ends
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    pads = list(a.attr("pads", [0] * (2 * n)))
    return pads[:n], pads[n:]


def _torch_pad(begins: Sequence[int], ends: Sequence[int]) -> list[int]:
    """F.pad's order: last dimension first, (begin, end) pairs."""
    order: list[int] = []
    for begin, end in zip(reversed(begins), reversed(ends)):
        order += [begin, end]
    return order


@op("Conv")
def _conv(a: Args) -> Any:
    x, w = a.t(0), a.t(1)
    bias = a.t(2) if a.has(2) else None
    n = w.dim() - 2
    kernel = list(w.shape[2:])
    strides = list(a.attr("strides", [1] * n))
    dilations = list(a.attr("dilations", [1] * n))
    begins, ends = _padding(a, list(x.shape[2:]), kernel, strides, dilations)
    if begins != ends:
        x, begins = _F().pad(x, _torch_pad(begins, ends)), [0] * n
    function = {1: _F().conv1d, 2: _F().conv2d, 3: _F().conv3d}[n]
    return function(x, w, bias, stride=strides, padding=begins, dilation=dilations, groups=int(a.attr("group", 1)))


@op("ConvTranspose")
def _conv_transpose(a: Args) -> Any:
    x, w = a.t(0), a.t(1)
    bias = a.t(2) if a.has(2) else None
    n = w.dim() - 2
    kernel = list(w.shape[2:])
    strides = list(a.attr("strides", [1] * n))
    dilations = list(a.attr("dilations", [1] * n))
    output_padding = list(a.attr("output_padding", [0] * n))
    spatial = list(x.shape[2:])
    full = [s * (i - 1) + op + (k - 1) * d + 1 for i, s, k, d, op in zip(spatial, strides, kernel, dilations,
                                                                          output_padding)]
    if a.attr("output_shape") is not None:
        wanted = list(a.attr("output_shape"))[-n:]
        totals = [f - o for f, o in zip(full, wanted)]
        upper = str(a.attr("auto_pad", "NOTSET")) == "SAME_UPPER"
        begins = [t - t // 2 if upper else t // 2 for t in totals]
        ends = [t - b for t, b in zip(totals, begins)]
    elif str(a.attr("auto_pad", "NOTSET")) in ("SAME_UPPER", "SAME_LOWER"):
        totals = [f - i * s for f, i, s in zip(full, spatial, strides)]
        upper = str(a.attr("auto_pad")) == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
        ends = [t - b for t, b in zip(totals, begins)]
    else:
        pads = list(a.attr("pads", [0] * (2 * n)))
        begins, ends = pads[:n], pads[n:]
    function = {1: _F().conv_transpose1d, 2: _F().conv_transpose2d, 3: _F().conv_transpose3d}[n]
    groups = int(a.attr("group", 1))
    if begins == ends:
        return function(x, w, bias, stride=strides, padding=begins, output_padding=output_padding, groups=groups,
                        dilation=dilations)
    y = function(x, w, bias, stride=strides, padding=0, output_padding=output_padding, groups=groups,
                 dilation=dilations)
    index = [slice(None), slice(None)] + [slice(b, f - e) for b, e, f in zip(begins, ends, full)]
    return y[tuple(index)]


def _pool_geometry(a: Args, x: Any) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    kernel = list(a.attr("kernel_shape"))
    n = len(kernel)
    strides = list(a.attr("strides", [1] * n))
    dilations = list(a.attr("dilations", [1] * n))
    begins, ends = _padding(a, list(x.shape[2:]), kernel, strides, dilations)
    return kernel, strides, dilations, begins, ends


@op("MaxPool")
def _max_pool(a: Args) -> Any:
    if len(a.node.outputs) > 1 and a.node.outputs[1]:
        raise ConversionError(f"ONNX node {a.node.name}: MaxPool with an Indices output is not supported",
                              hint="package the model for ONNX only (--format onnx)")
    x = a.t(0)
    kernel, strides, dilations, begins, ends = _pool_geometry(a, x)
    n = len(kernel)
    if begins != ends or any(b > k // 2 for b, k in zip(begins, kernel)):
        x, begins = _F().pad(x, _torch_pad(begins, ends), value=float("-inf")), [0] * n
    function = {1: _F().max_pool1d, 2: _F().max_pool2d, 3: _F().max_pool3d}[n]
    return function(x, kernel, strides, begins, dilations, ceil_mode=bool(a.attr("ceil_mode", 0)))


@op("AveragePool")
def _average_pool(a: Args) -> Any:
    x = a.t(0)
    kernel, strides, dilations, begins, ends = _pool_geometry(a, x)
    n = len(kernel)
    include = bool(a.attr("count_include_pad", 0))
    if any(d != 1 for d in dilations):
        raise ConversionError(f"ONNX node {a.node.name}: AveragePool with dilations is not supported",
                              hint="package the model for ONNX only (--format onnx)")
    function = {1: _F().avg_pool1d, 2: _F().avg_pool2d, 3: _F().avg_pool3d}[n]
    ceil_mode = bool(a.attr("ceil_mode", 0))
    if begins == ends and all(b <= k // 2 for b, k in zip(begins, kernel)):
        return function(x, kernel, strides, begins, ceil_mode=ceil_mode, count_include_pad=include)
    spatial = [int(d) for d in x.shape[2:]]
    summed = function(_F().pad(x, _torch_pad(begins, ends)), kernel, strides, 0, ceil_mode=ceil_mode,
                      count_include_pad=True)
    if include:
        return summed
    # uneven padding left out of the average: rescale by each window's share of real pixels
    shape = [int(d) for d in summed.shape[2:]]
    share = a.derived("share", lambda: _window_share(spatial, shape, kernel, strides, begins))
    return summed / share


def _window_share(spatial: list[int], out: list[int], kernel: list[int], strides: list[int],
                  begins: list[int]) -> np.ndarray:
    """The fraction of each pooling window that lies inside the input (padding excluded)."""
    share = np.ones([1, 1], np.float32)
    for size, o, k, s, b in zip(spatial, out, kernel, strides, begins):
        start = np.arange(o) * s - b
        inside = np.clip(start + k, 0, size) - np.clip(start, 0, size)
        share = share[..., None] * (inside / k).astype(np.float32)
    return share


@op("GlobalAveragePool")
def _global_average_pool(a: Args) -> Any:
    x = a.t(0)
    return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@op("GlobalMaxPool")
def _global_max_pool(a: Args) -> Any:
    x = a.t(0)
    return _torch().amax(x, dim=tuple(range(2, x.dim())), keepdim=True)


# --- shapes and indexing -------------------------------------------------------------------------


@op("Shape")
def _shape(a: Args) -> Any:
    shape = list(a.t(0).shape)
    start, end = a.attr("start", 0), a.attr("end", None)
    return _torch().tensor([int(d) for d in shape[start:end]], dtype=_torch().int64)


@op("Size")
def _size(a: Args) -> Any:
    return _torch().tensor(int(a.t(0).numel()), dtype=_torch().int64)


@op("Constant")
def _constant(a: Args) -> Any:
    attrs = a.node.attrs
    if "value" in attrs:
        return _torch().from_numpy(np.array(attrs["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in attrs:
            return _torch().from_numpy(np.array(attrs[key], dtype=dtype))
    raise ConversionError(f"ONNX node {a.node.name}: a Constant of kind {sorted(attrs)} is not supported",
                          hint="package the model for ONNX only (--format onnx)")


@op("ConstantOfShape")
def _constant_of_shape(a: Args) -> Any:
    value = a.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return _torch().full(a.ints(0), fill[0].item(), dtype=_torch().from_numpy(fill).dtype)


@op("Range")
def _range(a: Args) -> Any:
    start, limit, delta = (a.const(i) for i in range(3))
    if start is None or limit is None or delta is None:
        a.ints(0 if start is None else 1 if limit is None else 2)  # raises the data-dependent error
    dtype = _torch().from_numpy(np.asarray(start)).dtype
    return _torch().arange(start.item(), limit.item(), delta.item(), dtype=dtype)


@op("Reshape")
def _reshape(a: Args) -> Any:
    x = a.t(0)
    shape = a.ints(1)
    if not a.attr("allowzero", 0):
        shape = [int(x.shape[i]) if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


@op("Flatten")
def _flatten(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 1)), x.dim())
    shape = [int(d) for d in x.shape]
    return x.reshape(math.prod(shape[:axis]), math.prod(shape[axis:]))


@op("Transpose")
def _transpose(a: Args) -> Any:
    x = a.t(0)
    perm = a.attr("perm", None)
    return x.permute(*(list(perm) if perm is not None else list(range(x.dim()))[::-1]))


def _axes(a: Args, index: int) -> list[int] | None:
    if a.attr("axes") is not None:
        return list(a.attr("axes"))
    return a.ints(index) if a.has(index) else None


@op("Squeeze")
def _squeeze(a: Args) -> Any:
    x = a.t(0)
    axes = _axes(a, 1)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    keep = [int(d) for i, d in enumerate(x.shape) if i not in {_axis(ax, x.dim()) for ax in axes}]
    return x.reshape(keep)


@op("Unsqueeze")
def _unsqueeze(a: Args) -> Any:
    x = a.t(0)
    axes = _axes(a, 1) or []
    rank = x.dim() + len(axes)
    shape = [int(d) for d in x.shape]
    for ax in sorted(_axis(ax, rank) for ax in axes):
        shape.insert(ax, 1)
    return x.reshape(shape)


@op("Concat")
def _concat(a: Args) -> Any:
    tensors = [a.t(i) for i in range(a.count()) if a.has(i)]
    tensors = [t for t in tensors if t.numel() > 0 or t.dim() > 1]  # ONNX allows empty 1-D pieces
    return _torch().cat(tensors, dim=int(a.attr("axis")))


@op("Split")
def _split(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 0)), x.dim())
    if a.attr("split") is not None:
        sizes = list(a.attr("split"))
    elif a.has(1):
        sizes = a.ints(1)
    else:
        parts = int(a.attr("num_outputs", len(a.node.outputs)))
        size = math.ceil(int(x.shape[axis]) / parts)
        sizes = [min(size, int(x.shape[axis]) - i * size) for i in range(parts)]
    return list(_torch().split(x, sizes, dim=axis))


@op("Slice")
def _slice(a: Args) -> Any:
    x = a.t(0)
    if a.opset < 10:
        starts, ends = list(a.attr("starts")), list(a.attr("ends"))
        axes = list(a.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = a.ints(1), a.ints(2)
        axes = a.ints(3) if a.has(3) else list(range(len(starts)))
        steps = a.ints(4) if a.has(4) else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, x.dim())
        size = int(x.shape[axis])
        picked = range(size)[slice(start, end, step)]  # ONNX clamps like Python slicing
        if step < 0:
            x = _torch().flip(x, [axis])
            picked = range(size - 1 - picked.start, size - 1 - picked.start + len(picked) * -step, -step) \
                if len(picked) else range(0, 0)
        index = [slice(None)] * x.dim()
        index[axis] = slice(picked.start, picked.start + len(picked) * picked.step, picked.step) if len(picked) \
            else slice(0, 0)
        x = x[tuple(index)]
    return x


@op("Gather")
def _gather(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 0)), x.dim())
    size = int(x.shape[axis])
    indices = a.const(1)
    if indices is not None:
        fixed = np.where(indices < 0, indices + size, indices).astype(np.int64)
        if fixed.ndim == 0:
            return x.select(axis, int(fixed))
        picked = x.index_select(axis, a.derived("indices", lambda: fixed.reshape(-1)))
        return picked.reshape(*x.shape[:axis], *fixed.shape, *x.shape[axis + 1:])
    ids = a.t(1).long()
    ids = _torch().where(ids < 0, ids + size, ids)
    if axis == 0 and x.dim() == 2:  # an embedding lookup
        return _F().embedding(ids, x)
    picked = x.index_select(axis, ids.reshape(-1))
    return picked.reshape(*x.shape[:axis], *ids.shape, *x.shape[axis + 1:])


@op("GatherElements")
def _gather_elements(a: Args) -> Any:
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 0)), x.dim())
    ids = a.t(1).long()
    return _torch().gather(x, axis, _torch().where(ids < 0, ids + int(x.shape[axis]), ids))


@op("Expand")
def _expand(a: Args) -> Any:
    x = a.t(0)
    return x.expand(*np.broadcast_shapes(tuple(int(d) for d in x.shape), tuple(a.ints(1))))


@op("Tile")
def _tile(a: Args) -> Any:
    return a.t(0).repeat(*a.ints(1))


@op("Pad")
def _pad(a: Args) -> Any:
    x = a.t(0)
    rank = x.dim()
    mode = str(a.attr("mode", "constant"))
    if a.opset < 11:
        pads, value = list(a.attr("pads")), float(a.attr("value", 0.0))
    else:
        pads = a.ints(1)
        value = a.number(2) if a.has(2) else 0.0
        if value is None:
            raise DataDependent(f"ONNX node {a.node.name} (Pad) takes its fill value from the input data",
                                hint="package the model for ONNX only (--format onnx)")
    axes = [_axis(ax, rank) for ax in a.ints(3)] if a.has(3) else list(range(rank))
    begins, ends = [0] * rank, [0] * rank
    for k, ax in enumerate(axes):
        begins[ax], ends[ax] = pads[k], pads[k + len(axes)]
    first = next((i for i in range(rank) if begins[i] or ends[i]), rank)
    order = _torch_pad(begins[first:], ends[first:])
    if mode == "constant":
        return _F().pad(x, order, value=value)
    torch_mode = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
    if torch_mode is None or first < 2:
        raise ConversionError(f"ONNX node {a.node.name}: Pad mode {mode!r} on these axes is not supported",
                              hint="package the model for ONNX only (--format onnx)")
    return _F().pad(x, order, mode=torch_mode)


@op("DepthToSpace")
def _depth_to_space(a: Args) -> Any:
    x = a.t(0)
    b, c, h, w = (int(d) for d in x.shape)
    block = int(a.attr("blocksize"))
    if str(a.attr("mode", "DCR")) == "CRD":
        return _F().pixel_shuffle(x, block)
    y = x.reshape(b, block, block, c // (block * block), h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(b, c // (block * block), h * block, w * block)


@op("SpaceToDepth")
def _space_to_depth(a: Args) -> Any:
    x = a.t(0)
    b, c, h, w = (int(d) for d in x.shape)
    block = int(a.attr("blocksize"))
    y = x.reshape(b, c, h // block, block, w // block, block).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(b, c * block * block, h // block, w // block)


# --- reductions ------------------------------------------------------------------------------------


def _reduce(a: Args) -> Any:
    torch = _torch()
    x = a.t(0)
    axes = list(a.attr("axes")) if a.attr("axes") is not None else (a.ints(1) if a.has(1) else None)
    keep = bool(a.attr("keepdims", 1))
    if not axes:
        if a.attr("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.dim()))
    dims = tuple(sorted(_axis(ax, x.dim()) for ax in axes))
    kind = a.node.op
    if kind == "ReduceMean":
        return x.mean(dim=dims, keepdim=keep)
    if kind == "ReduceSum":
        return x.sum(dim=dims, keepdim=keep)
    if kind == "ReduceMax":
        return torch.amax(x, dim=dims, keepdim=keep)
    if kind == "ReduceMin":
        return torch.amin(x, dim=dims, keepdim=keep)
    if kind == "ReduceSumSquare":
        return (x * x).sum(dim=dims, keepdim=keep)
    if kind == "ReduceL2":
        return torch.sqrt((x * x).sum(dim=dims, keepdim=keep))
    if kind == "ReduceL1":
        return x.abs().sum(dim=dims, keepdim=keep)
    if kind == "ReduceLogSumExp":
        return torch.logsumexp(x, dim=dims, keepdim=keep)
    result = x  # ReduceProd
    for dim in sorted(dims, reverse=True):
        result = result.prod(dim=dim, keepdim=keep)
    return result


for _name in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL2",
              "ReduceL1", "ReduceLogSumExp"):
    OPS[_name] = _reduce


@op("ArgMax", "ArgMin")
def _arg_extreme(a: Args) -> Any:
    torch = _torch()
    x = a.t(0)
    axis = _axis(int(a.attr("axis", 0)), x.dim())
    keep = bool(a.attr("keepdims", 1))
    function = torch.argmax if a.node.op == "ArgMax" else torch.argmin
    if a.attr("select_last_index", 0):
        return int(x.shape[axis]) - 1 - function(torch.flip(x, [axis]), dim=axis, keepdim=keep)
    return function(x, dim=axis, keepdim=keep)


@op("TopK")
def _top_k(a: Args) -> Any:
    x = a.t(0)
    k = a.ints(1)[0] if a.opset >= 10 else int(a.attr("k"))
    values, indices = _torch().topk(x, k, dim=int(a.attr("axis", -1)), largest=bool(a.attr("largest", 1)),
                                    sorted=bool(a.attr("sorted", 1)))
    return values, indices


@op("CumSum")
def _cumsum(a: Args) -> Any:
    torch = _torch()
    x = a.t(0)
    axis = _axis(a.ints(1)[0], x.dim())
    if a.attr("reverse", 0):
        x = torch.flip(x, [axis])
    y = torch.cumsum(x, dim=axis)
    if a.attr("exclusive", 0):
        y = y - x
    return torch.flip(y, [axis]) if a.attr("reverse", 0) else y


# --- resizing ------------------------------------------------------------------------------------


def _source_coordinates(mode: str, out: int, size: int, scale: float) -> np.ndarray:
    """Where each output pixel samples the input, per ONNX's coordinate_transformation_mode."""
    i = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    if mode == "align_corners":
        return i * (size - 1) / (out - 1) if out > 1 else np.zeros(out)
    if mode == "asymmetric":
        return i / scale
    raise ConversionError(f"Resize coordinate_transformation_mode {mode!r} is not supported",
                          hint="package the model for ONNX only (--format onnx)")


def _nearest(coordinates: np.ndarray, mode: str, size: int) -> np.ndarray:
    if mode == "floor":
        picked = np.floor(coordinates)
    elif mode == "ceil":
        picked = np.ceil(coordinates)
    elif mode == "round_prefer_ceil":
        picked = np.floor(coordinates + 0.5)
    else:  # round_prefer_floor, the default
        picked = np.ceil(coordinates - 0.5)
    return np.clip(picked, 0, size - 1).astype(np.int64)


@op("Resize", "Upsample")
def _resize(a: Args) -> Any:
    torch = _torch()
    x = a.t(0)
    shape = [int(d) for d in x.shape]
    mode = str(a.attr("mode", "nearest"))
    if a.node.op == "Upsample":
        scales = [float(s) for s in (a.attr("scales") or a.const(1))]
        transform, nearest_mode = "asymmetric", "floor"
    else:
        if a.attr("antialias", 0) or a.attr("axes") is not None:
            raise ConversionError(f"ONNX node {a.node.name}: Resize with antialias or axes is not supported",
                                  hint="package the model for ONNX only (--format onnx)")
        transform = str(a.attr("coordinate_transformation_mode", "half_pixel"))
        nearest_mode = str(a.attr("nearest_mode", "round_prefer_floor"))
        sizes = a.ints(3) if a.has(3) and a.const(3) is not None and a.const(3).size else None
        scale_index = 2 if a.opset >= 11 else 1
        if sizes is not None:
            scales = [o / i for o, i in zip(sizes, shape)]
        else:
            scales = [float(s) for s in np.asarray(a.const(scale_index)).reshape(-1)]
            if a.const(scale_index) is None:
                a.ints(scale_index)  # raises the data-dependent error
    if len(scales) != len(shape):
        raise ConversionError(f"ONNX node {a.node.name}: Resize scales {scales} do not match rank {len(shape)}")
    out = [int(math.floor(i * s + 1e-9)) for i, s in zip(shape, scales)] if a.node.op == "Upsample" or \
        not (a.has(3) and a.const(3) is not None and a.const(3).size) else a.ints(3)
    if out[:2] != shape[:2]:
        raise ConversionError(f"ONNX node {a.node.name}: Resize of the batch or channel axis is not supported",
                              hint="package the model for ONNX only (--format onnx)")
    if mode not in ("nearest", "linear"):
        raise ConversionError(f"ONNX node {a.node.name}: Resize mode {mode!r} is not supported (nearest, linear)",
                              hint="package the model for ONNX only (--format onnx)")
    spatial = list(range(2, len(shape)))
    coordinates = {d: _source_coordinates(transform, out[d], shape[d], scales[d]) for d in spatial}
    torch_mode = _matching_interpolate(mode, coordinates, nearest_mode, shape, out)
    if torch_mode is not None and len(spatial) in (1, 2, 3):
        torch_name, align = torch_mode
        if mode == "linear":
            torch_name = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(spatial)]
        return _F().interpolate(x, size=[out[d] for d in spatial], mode=torch_name,
                                **({"align_corners": align} if mode == "linear" else {}))
    for d in spatial:  # exact ONNX sampling with gathers where no interpolate mode matches
        size = shape[d]
        if mode == "nearest":
            x = x.index_select(d, a.derived(f"nearest{d}", lambda: _nearest(coordinates[d], nearest_mode, size)))
            continue
        c = np.clip(coordinates[d], 0, size - 1)
        low = np.floor(c).astype(np.int64)
        high = np.minimum(low + 1, size - 1)
        weight_shape = [1] * len(shape)
        weight_shape[d] = out[d]
        weight = a.derived(f"weight{d}", lambda: (c - low).astype(np.float32).reshape(weight_shape))
        x = x.index_select(d, a.derived(f"low{d}", lambda: low)) * (1 - weight) + \
            x.index_select(d, a.derived(f"high{d}", lambda: high)) * weight
    return x


def _matching_interpolate(mode: str, coordinates: dict[int, np.ndarray], nearest_mode: str, shape: list[int],
                          out: list[int]) -> tuple[str, bool] | None:
    """The F.interpolate mode that samples exactly where ONNX does, if any."""
    if mode == "nearest":
        for torch_mode, offset in (("nearest", 0.0), ("nearest-exact", 0.5)):
            if all(np.array_equal(_nearest(coordinates[d], nearest_mode, shape[d]),
                                  np.clip(np.floor((np.arange(out[d]) + offset) * shape[d] / out[d]), 0,
                                          shape[d] - 1).astype(np.int64)) for d in coordinates):
                return torch_mode, False
        return None
    for align in (False, True):
        matches = True
        for d, wanted in coordinates.items():
            i = np.arange(out[d], dtype=np.float64)
            if align:
                theirs = i * (shape[d] - 1) / (out[d] - 1) if out[d] > 1 else np.zeros(out[d])
            else:
                theirs = np.maximum((i + 0.5) * shape[d] / out[d] - 0.5, 0)
            if not np.allclose(np.clip(wanted, 0, shape[d] - 1), np.clip(theirs, 0, shape[d] - 1), atol=1e-6):
                matches = False
        if matches:
            return "linear", align
    return None


# --- fusing constant matrices into linear layers ---------------------------------------------------


def _fuse_linear(nodes: list[Node], constants: dict[str, np.ndarray], graph_outputs: set[str],
                 ranks: dict[str, int]) -> list[Step]:
    """MatMul by a constant matrix (+ Add of a constant vector) and Gemm with constant weights become
    ``F.linear`` with a pre-transposed weight constant, the form quantizers recognise."""
    consumers: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            consumers[name] = consumers.get(name, 0) + 1
    steps: list[Step] = []
    skip: set[int] = set()
    for index, node in enumerate(nodes):
        if index in skip:
            continue
        linear = _as_linear(node, constants)
        if linear is not None:
            weight, bias = linear
            follower = nodes[index + 1] if index + 1 < len(nodes) else None
            out = node.outputs[0]
            if bias is None and follower is not None and follower.op == "Add" and consumers.get(out) == 1 \
                    and out not in graph_outputs:
                other = [i for i in follower.inputs if i != out]
                vector = constants.get(other[0]) if len(other) == 1 else None
                # only a bias that broadcasts along the last axis without adding axes
                if vector is not None and vector.size == weight.shape[0] and vector.ndim >= 1 \
                        and vector.shape[-1] == weight.shape[0] and vector.ndim <= ranks.get(out, 0):
                    bias, node = vector.reshape(-1), Node("Linear", node.name, node.inputs[:1], follower.outputs,
                                                          {}, node.opset)
                    skip.add(index + 1)
            steps.append(_linear_step(node, weight, bias, constants))
            continue
        steps.append(Step(node, lambda a, n=node: _run_node(n, a), [i for i in node.inputs if i]))
    return steps


def _as_linear(node: Node, constants: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(weight [out, in], bias [out] or None) when the node is a linear layer with constant weights."""
    if node.op == "MatMul" and node.inputs[0] not in constants:
        w = constants.get(node.inputs[1])
        if w is not None and w.ndim == 2 and w.dtype == np.float32:
            return np.ascontiguousarray(w.T), None
    if node.op == "Gemm" and node.inputs[0] not in constants and not node.attrs.get("transA", 0):
        w = constants.get(node.inputs[1])
        c = constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if w is None or w.dtype != np.float32 or (len(node.inputs) > 2 and node.inputs[2] and c is None):
            return None
        weight = (w if node.attrs.get("transB", 0) else w.T) * np.float32(node.attrs.get("alpha", 1.0))
        bias = None
        if c is not None:
            if c.size not in (1, weight.shape[0]) or (c.ndim == 2 and c.shape[0] != 1):
                return None
            bias = np.broadcast_to(c.reshape(-1) * np.float32(node.attrs.get("beta", 1.0)),
                                   (weight.shape[0],)).astype(np.float32)
        return np.ascontiguousarray(weight, dtype=np.float32), bias
    return None


def _linear_step(node: Node, weight: np.ndarray, bias: np.ndarray | None,
                 constants: dict[str, np.ndarray]) -> Step:
    weight_name, bias_name = f"{node.name}/linear_weight", f"{node.name}/linear_bias"
    constants[weight_name] = weight
    fused = Node("Linear", node.name, [node.inputs[0], weight_name], node.outputs, {}, node.opset)
    if bias is not None:
        constants[bias_name] = np.ascontiguousarray(bias, dtype=np.float32)
        fused.inputs.append(bias_name)

    def run(a: Args) -> list[Any]:
        return [_F().linear(a.t(0), a.t(1), a.t(2) if a.has(2) else None)]

    return Step(fused, run, list(fused.inputs))


__all__ = ["OPS", "DataDependent", "input_names", "load", "module_from_onnx"]
