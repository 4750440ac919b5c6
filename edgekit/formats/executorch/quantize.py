"""ExecuTorch's XNNPACK quantizer as edgekit configures it (child side): every node annotated but
those of a layer kept in float, those reading integers and an attention mask's mix."""

from __future__ import annotations

from typing import Any

from ...conversion.layer_names import inside, traced_modules
from ...conversion.pt2e import pattern_programs_exported_once
from .ops import op_name


def xnnpack_quantizer_for(xnnpack_quantizer: type, config: Any, exported: Any, kept_paths: list[str],
                          kept_ops: tuple[str, ...] | list[str] = ()) -> Any:
    """ExecuTorch's XNNPACK quantizer, static int8 with per-channel weights, annotating every node
    but those of a layer kept in float, those reading integers (an embedding's token ids, a
    gather's indices: quantized, the op would get float ids) and an attention mask's mix into the
    scores with the softmax after it (``mask_nodes``)."""
    kept = frozenset(f"inner.{path}" for path in kept_paths)
    masked = mask_nodes(exported.graph_module.graph, set(exported.graph_signature.user_inputs))
    ops = set(kept_ops)

    def quantized(node: Any) -> bool:
        return (not _reads_integers(node) and node.name not in masked and node.name not in ops
                and not any(inside(path, kept) for path in traced_modules(node)))

    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer_utils

    pattern_programs_exported_once(xnnpack_quantizer_utils)
    base = _integer_scalars_kept(xnnpack_quantizer)
    quantizer = _filter_honoured_by_cat(base, quantized)().set_global(config(is_per_channel=True, is_dynamic=False))
    quantizer.set_filter_function(quantized)
    if not any("batch_norm" in str(node.target) for node in exported.graph_module.graph.nodes):
        quantizer.SUPPORTED_PATTERNS = [p for p in quantizer.SUPPORTED_PATTERNS if not _batch_norm_pattern(p)]
    return quantizer


def _batch_norm_pattern(pattern: Any) -> bool:
    """One of the XNNPACK quantizer's convolution + batch-norm patterns (made for QAT). It tries
    them on every graph, and each try exports small pattern programs first: about 2 s of every
    quantization, most of a small model's. A graph holding no batch norm cannot match them, so
    ``_quantizer`` leaves them out there (the annotation is the same)."""
    return pattern.name.endswith(("_bn", "_bn_relu"))


def _filter_honoured_by_cat(base: type, quantized: Any) -> type:
    """The XNNPACK quantizer annotates every ``cat`` with one scale shared by its inputs and its
    output, without asking the filter: a concatenation kept in float (a detector's box rows beside
    its score rows) still had its quantities forced onto one int8 grid. A cat the filter leaves out
    is marked annotated with nothing first, so each input keeps the scale its producer gives it and
    the cat runs in float."""
    import torch
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation
    from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

    class FilterHonouredByCat(base):  # type: ignore[misc, valid-type]
        def annotate(self, model: Any) -> Any:
            for node in model.graph.nodes:
                if node.op == "call_function" and node.target == torch.ops.aten.cat.default and not quantized(node):
                    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(_annotated=True)
            return super().annotate(model)

    return FilterHonouredByCat


def _integer_scalars_kept(base: type) -> type:
    """ExecuTorch's XNNPACK quantizer before annotating turns every scalar of an ``add``/``mul``
    into a float tensor constant, on integer tensors too: token ids plus a vocabulary offset then
    become float and an embedding refuses them. Such integer ops are given their ``.Scalar``
    overload (same arguments) first, which that transform leaves alone."""
    import torch

    scalar = {torch.ops.aten.add.Tensor: torch.ops.aten.add.Scalar, torch.ops.aten.mul.Tensor: torch.ops.aten.mul.Scalar}

    class IntegerScalarsKept(base):  # type: ignore[misc, valid-type]
        def transform_for_annotation(self, model: Any) -> Any:
            for node in model.graph.nodes:
                value = node.meta.get("val") if node.op == "call_function" else None
                if (node.target in scalar and value is not None and not value.dtype.is_floating_point
                        and len(node.args) == 2 and isinstance(node.args[0], torch.fx.Node)
                        and not isinstance(node.args[1], torch.fx.Node)):
                    node.target = scalar[node.target]
            model.recompile()
            return super().transform_for_annotation(model)

    return IntegerScalarsKept


# as edgekit/formats/onnx/masks.py on ONNX graphs: ops a mask-derived value passes through, ops that
# mix it into activations, and the shape ops between such a mix and its softmax
MASK_OPS = {"to", "_to_copy", "sub", "rsub", "mul", "add", "div", "neg", "eq", "ne", "lt", "le", "gt", "ge", "where",
            "unsqueeze", "squeeze", "view", "reshape", "expand", "slice", "clone", "cat", "clamp", "logical_not",
            "logical_and", "logical_or", "bitwise_not", "permute", "transpose", "repeat", "masked_fill", "full_like",
            "type_as", "minimum", "maximum"}


MIXING_OPS = {"add", "sub", "mul", "where", "masked_fill"}


PASS_THROUGH = {"view", "reshape", "permute", "transpose", "_to_copy", "to", "squeeze", "unsqueeze", "clone"}


def mask_nodes(graph: Any, user_inputs: set[str]) -> set[str]:
    """The nodes adding an attention mask to activations, and the softmax each feeds: a text
    encoder's ``(1 - mask) * -1e4`` added to the scores gets one int8 scale spanning -10000..10,
    every score rounds to one value and the attention is lost. A value is mask-derived when it
    follows from integer inputs through elementwise and shape ops only (an embedding's output is
    learned features, not a mask). ``user_inputs``: the placeholders that are the model's inputs
    (the others are its lifted weights and constants)."""
    derived = {node for node in graph.nodes if node.op == "placeholder" and node.name in user_inputs
               and getattr(node.meta.get("val"), "dtype", None) is not None
               and not node.meta["val"].dtype.is_floating_point}
    constants = {node for node in graph.nodes if node.op == "get_attr"
                 or node.op == "placeholder" and node.name not in user_inputs}
    if not derived:
        return set()
    found: set[str] = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        live = [a for a in node.all_input_nodes if a not in constants]
        from_mask = [a for a in live if a in derived]
        name = op_name(node.target)
        if live and len(from_mask) == len(live) and name in MASK_OPS:
            derived.add(node)
        elif from_mask and name in MIXING_OPS:
            found.add(node.name)
            frontier, steps = [node], 0
            while frontier and steps < 4:
                following = [user for n in frontier for user in n.users]
                found.update(user.name for user in following if "softmax" in op_name(user.target))
                frontier = [user for user in following if op_name(user.target) in PASS_THROUGH]
                steps += 1
    return found


def _reads_integers(node: Any) -> bool:
    """Whether a graph node takes an integer tensor (token ids, indices)."""
    for arg in node.all_input_nodes:
        value = arg.meta.get("val")
        dtype = getattr(value, "dtype", None)
        if dtype is not None and not dtype.is_floating_point and not dtype.is_complex and str(dtype) != "torch.bool":
            return True
    return False
