"""Shared by the converters that quantize a PyTorch program with PT2E (torchao's
``prepare_pt2e``/``convert_pt2e``: litert-torch's route to TFLite and ExecuTorch's); child side."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
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


def pattern_programs_exported_once(quantizer_utils: ModuleType) -> None:
    """PT2E quantizers (XNNPACK's, litert-torch's) match convolution + batch-norm patterns against
    programs they export from small pattern functions first (``_get_aten_graph_module_for_pattern``
    in ``quantizer_utils``), again for every quantization: about 2-3.5 s of each of a batch-normed
    model's, the same programs each time (a search's tries, the next package in a reused converter
    child). Each is exported once per process here, and every caller gets its own copy (the
    matcher rewrites the pattern's outputs). A pattern is known by its function's code, the values
    it closes over (its convolution, its ReLU), the shapes it is exported on and the device; one
    that cannot be keyed so is exported as before. Installed once per module."""
    import copy

    export_pattern = getattr(quantizer_utils, "_get_aten_graph_module_for_pattern", None)
    if export_pattern is None or getattr(export_pattern, "edgekit_exported", None) is not None:
        return
    exported: dict[tuple, Any] = {}

    def exported_once(pattern: Any, example_inputs: tuple[Any, ...], is_cuda: bool = False, **kwargs: Any) -> Any:
        key = _pattern_key(pattern, example_inputs, is_cuda, kwargs)
        if key is None:
            return export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        if key not in exported:
            exported[key] = export_pattern(pattern, example_inputs, is_cuda)
        return copy.deepcopy(exported[key])

    exported_once.edgekit_exported = exported  # type: ignore[attr-defined]
    quantizer_utils._get_aten_graph_module_for_pattern = exported_once  # type: ignore[attr-defined]


def _pattern_key(pattern: Any, example_inputs: tuple[Any, ...], is_cuda: bool, kwargs: dict[str, Any]) -> tuple | None:
    """What makes a pattern's program: its function's code (a module wrapping it: its ``fn``), the
    values it closes over, the example inputs' shapes and dtypes, the device; None where one of
    them cannot be compared."""
    import torch

    function = getattr(pattern, "fn", pattern)
    code = getattr(function, "__code__", None)
    if code is None or kwargs or not all(isinstance(x, torch.Tensor) for x in example_inputs):
        return None
    try:
        closed = tuple(cell.cell_contents for cell in function.__closure__ or ())
        hash(closed)
    except (ValueError, TypeError):  # an empty cell, an unhashable value
        return None
    return code, closed, tuple((tuple(x.shape), x.dtype) for x in example_inputs), is_cuda
