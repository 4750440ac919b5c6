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

from typing import Any

import numpy as np

from ...conversion.forms import QDQ_OPS
from ...errors import ConversionError, OTHER_ROUTES

from . import elementwise, layers, quantize, recurrent, resize, shapes  # noqa: F401  (importing them registers their ops)
from .batch_norm import fold_batch_norms
from .fuse import _fuse_linear
from .loops import unroll_loops
from ..layer_names import attribute_name
from .patterns import fuse_patterns
from .graph import _QUANTIZED, ONNX_DOMAINS, Args, DataDependent, Node, _attributes
from .registry import _DTYPES, OPS, _run_node


def load(path: str, example: dict[str, np.ndarray], keep_qdq: bool = False) -> Any:
    """The ONNX model at ``path`` as a module specialised to the shapes of ``example``; a QDQ graph
    as the float graph it simulates (its weights on their learned grid; the activation ranges are
    the quantizer's to carry: ``conversion.quantized.strip_qdq``), or with ``keep_qdq`` with its
    pairs as PyTorch's quantize ops (``quantize.py``: for converters that take those)."""
    import onnx

    from ...conversion.quantized import is_qdq_graph, strip_qdq

    model = onnx.load(path)
    if is_qdq_graph(model):
        if not keep_qdq:
            strip_qdq(model)
        else:
            _narrowed_pairs(model)
    return module_from_onnx(model, example, keep_qdq=keep_qdq)


def _narrowed_pairs(model: Any) -> None:
    """Each Clip between a QuantizeLinear and its DequantizeLinear folded into both as their
    quant_min / quant_max (``edgekit_qmin``/``edgekit_qmax``, read by ``quantize.py``)."""
    from onnx import helper

    from ...conversion.quantized import fold_integer_clips

    narrowed = fold_integer_clips(model.graph)
    for node in model.graph.node:
        bounds = narrowed.get(node.output[0]) if node.op_type == "QuantizeLinear" else \
            narrowed.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if bounds is None:
            continue
        for name, value in zip(("edgekit_qmin", "edgekit_qmax"), bounds):
            if np.isfinite(value):
                node.attribute.append(helper.make_attribute(name, int(round(value))))


def load_module(path: str, example: dict[str, Any] | None = None) -> tuple[Any, list[str]]:
    """The loader of the PyTorch forms made from an ONNX graph (``edgekit.conversion.forms.load_module``):
    the module in eval mode, specialised to ``example`` (by input name; ``""`` for a one-input
    model), and its input names."""
    names = input_names(path)
    shaped = {names[0]: example[""]} if example and list(example) == [""] else dict(example or {})
    return load(path, shaped).eval(), names


def input_names(path: str) -> list[str]:
    import onnx

    model = onnx.load(path, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in initializers]


def module_from_onnx(model: Any, example: dict[str, np.ndarray], keep_qdq: bool = False) -> Any:
    """A ``torch.nn.Module`` running the ``onnx.ModelProto`` ``model`` on inputs shaped like
    ``example``; ``keep_qdq``: its QuantizeLinear / DequantizeLinear pairs as quantize ops, an
    int8 weight kept behind its dequantize (never folded into a float constant)."""
    unrolled = unroll_loops(model, example)
    module = _module_class()(model, example, keep_qdq)
    # the steps of unrolled loops, by submodule: the formats keep them float (the simulation, like ONNX
    # Runtime on the graph as given, runs a Loop's body in float), and their thousands of observers
    # made a 40-step recurrent model's PT2E quantization take minutes
    module.loop_modules = [a for a, step in zip(module.step_modules, module.steps) if step.node.name in unrolled]
    return module


def _module_class() -> type:
    """The module class, made on first use so that importing this file does not import torch."""
    import torch

    class _OnnxModule(torch.nn.Module):
        """The ONNX graph's data-dependent nodes, with everything else folded into constants."""

        def __init__(self, model: Any, example: dict[str, np.ndarray], keep_qdq: bool = False) -> None:
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
            _refuse_unsupported(nodes, [n.domain for n in graph.node], QDQ_OPS if keep_qdq else ())
            # Eager run: values that depend on input data are "dynamic"; the rest become constants.
            types = {v.name: _DTYPES.get(v.type.tensor_type.elem_type, "float32") for v in graph.input}
            values: dict[str, Any] = {name: torch.from_numpy(np.ascontiguousarray(example[name], dtype=types[name]))
                                      for name in self.input_names}
            dynamic, derived = _eager_run(nodes, values, constants, keep_qdq)
            self.example_outputs = {name: values[name] for name in self.output_names}
            run = [n for n in nodes if any(o in dynamic for o in n.outputs)]
            ranks = {name: value.dim() for name, value in values.items() if isinstance(value, torch.Tensor)}
            run = fold_batch_norms(run, constants, set(self.output_names))
            run = fuse_patterns(run, constants, set(self.output_names), ranks)
            self.steps = _fuse_linear(run, constants, set(self.output_names), ranks)
            # each step a submodule named after its ONNX node (``naming``): converters name ops by module path
            self.step_modules: list[str] = []
            for step in self.steps:
                attribute = base = attribute_name(step.node.name)
                count = 1
                while hasattr(self, attribute):
                    count += 1
                    attribute = f"{base}_{count}"
                self.add_module(attribute, _step_class(step.node.op)(step))
                self.step_modules.append(attribute)
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
            for attribute in self.step_modules:
                getattr(self, attribute)(values, self)
            results = [values[o] if o in values else self.constant_tensor(o) for o in self.output_names]
            return results[0] if len(results) == 1 else tuple(results)

    return _OnnxModule


def _eager_run(nodes: list[Node], values: dict[str, Any], constants: dict[str, np.ndarray],
               keep_qdq: bool) -> tuple[set[str], dict[str, np.ndarray]]:
    """Run every node once on the example inputs (``values``): the values that depend on the input
    data are "dynamic" (returned), the rest become ``constants``; with ``keep_qdq`` an 8-bit
    weight's DequantizeLinear stays a step on its int8 constant (converters take the pair as a
    quantized weight), an int32 bias's is folded into its float values. Also returns the index
    tables and such that ops compute from static shapes."""
    import torch

    dynamic = {name for name in values}
    for name, array in constants.items():
        values[name] = torch.from_numpy(np.array(array))
    derived: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for node in nodes:
            produced = _run_eagerly(node, Args(node, values, constants, None, derived))
            for out, value in zip(node.outputs, produced):
                if out:
                    values[out] = value
            weight = keep_qdq and node.op == "DequantizeLinear" \
                and str(constants.get(node.inputs[0], np.zeros(0)).dtype) in ("int8", "uint8")
            if weight or node.op not in ("Shape", "Size") and any(i in dynamic for i in node.inputs if i):
                dynamic.update(o for o in node.outputs if o)
            else:
                for out, value in zip(node.outputs, produced):
                    if out:
                        constants[out] = value.detach().numpy() if isinstance(value, torch.Tensor) \
                            else np.asarray(value)
    return dynamic, derived


_STEP_CLASSES: dict[str, type] = {}


def _step_class(op: str) -> type:
    """A module class named after the ONNX op type (the converters name ops ``Type_attribute``),
    one per op type, made on first use."""
    import torch

    if op not in _STEP_CLASSES:
        def forward(self: Any, values: dict[str, Any], owner: Any) -> None:
            step = self.step
            produced = step.run(Args(step.node, values, owner.constants, owner))
            for out, value in zip(step.node.outputs, produced):
                if out:
                    values[out] = value

        def init(self: Any, step: Any) -> None:
            torch.nn.Module.__init__(self)
            self.step = step

        name = attribute_name(op)
        _STEP_CLASSES[op] = type(name, (torch.nn.Module,), {"__init__": init, "forward": forward,
                                                             "__module__": __name__, "__qualname__": name})
    return _STEP_CLASSES[op]


def _run_eagerly(node: Node, args: Args) -> list[Any]:
    """One node on the example inputs; a failure names the node and the shapes it got."""
    try:
        return _run_node(node, args)
    except ConversionError:
        raise
    except Exception as exc:
        seen = [tuple(args.t(i).shape) if args.has(i) else None for i in range(args.count())]
        raise ConversionError(
            f"ONNX node {node.name} ({node.op}) fails on inputs shaped {seen}: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
            hint="the model is converted at the calibration samples' shape (batch 1); check that the data has "
                 f"the shape the model was exported for, or {OTHER_ROUTES}") from None




def _refuse_unsupported(nodes: list[Node], domains: list[str], kept: tuple[str, ...] = ()) -> None:
    quantized = sorted({n.op for n in nodes if n.op in _QUANTIZED and n.op not in kept})
    if quantized:
        raise ConversionError(
            f"the ONNX model is already quantized ({', '.join(quantized)}); this route cannot carry those ops' "
            "learned ranges",
            hint="package it with --format onnx (it ships as it is); a QDQ graph (QuantizeLinear/DequantizeLinear "
                 "pairs, not QLinear ops) also reaches TFLite; or package the float model")
    unknown = sorted({f"{d}.{n.op}" if d not in ONNX_DOMAINS else n.op
                      for n, d in zip(nodes, domains) if d not in ONNX_DOMAINS or n.op not in OPS})
    if unknown:
        raise ConversionError(
            f"edgekit's ONNX-to-PyTorch rebuild (the way from ONNX to TFLite, CoreML and ExecuTorch) cannot convert "
            f"these ONNX ops: {', '.join(unknown)}",
            hint=f"{OTHER_ROUTES}, or export it without these ops")


__all__ = ["OPS", "DataDependent", "input_names", "load", "module_from_onnx"]
