"""Shared by the converters that quantize a PyTorch program with PT2E (torchao's
``prepare_pt2e``/``convert_pt2e``: litert-torch's route to TFLite and ExecuTorch's); child side."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .layer_names import inside, traced_modules


@contextmanager
def qat_folding_only_where_it_can_match() -> Iterator[None]:
    """torchao's ``convert_pt2e`` folds quantization-aware-training conv + BatchNorm patterns
    whenever a BatchNorm is left in the graph: it exports 96 pattern graphs to look for them (35 s
    on 2 cores). In post-training quantization ``prepare_pt2e`` has already folded every conv
    feeding a BatchNorm, and the patterns need a conv whose output reaches the BatchNorm through
    the pattern's division (and bias addition) only. Where no BatchNorm is reached that way (a
    BatchNorm after a ReLU or a Linear layer) the search is skipped; it runs as before wherever it
    could match, and on any torchao without the expected internals."""
    try:
        from torchao.quantization.pt2e import qat_utils
        from torchao.quantization.pt2e.utils import _is_bn_node, _is_conv_or_conv_transpose_node
    except ImportError:
        yield
        return
    original = getattr(qat_utils, "_fold_conv_bn_qat_helper", None)
    if original is None:
        yield
        return

    def helper(graph_module: Any, *args: Any, **kwargs: Any) -> Any:
        if conv_reaches_batch_norm(graph_module, _is_bn_node, _is_conv_or_conv_transpose_node):
            return original(graph_module, *args, **kwargs)
        return graph_module

    qat_utils._fold_conv_bn_qat_helper = helper
    try:
        yield
    finally:
        qat_utils._fold_conv_bn_qat_helper = original


def conv_reaches_batch_norm(graph_module: Any, is_batch_norm: Callable[[Any], bool],
                            is_conv: Callable[[Any], bool]) -> bool:
    """Whether a conv's output reaches a BatchNorm directly or through the division and bias
    addition of torchao's QAT conv + BatchNorm pattern: the only places that pattern can match."""
    import torch

    between = {torch.ops.aten.div.Tensor, torch.ops.aten.add.Tensor}
    for node in graph_module.graph.nodes:
        if not is_batch_norm(node):
            continue
        source = node.args[0]
        for _ in range(3):  # conv -> div -> add -> BatchNorm at most
            if is_conv(source):
                return True
            if getattr(source, "op", None) != "call_function" or source.target not in between:
                break
            source = source.args[0]
    return False


def outside_of(modules: list[str]) -> Callable[[Any], bool]:
    """A quantizer's filter: the nodes traced outside every module in ``modules`` (paths)."""
    kept = frozenset(modules)
    return lambda node: not any(inside(path, kept) for path in traced_modules(node))
