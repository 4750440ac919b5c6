"""Lowering a PyTorch program to an ExecuTorch ``.pte`` with XNNPACK (child side): the partitioner
(no partitions inside unrolled loops), XNNPACK's pattern passes run only where they can match,
what runs where read back before the program is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .backend import IO_METHOD
from .program_report import placement_of, precision_of


def lower_and_write(exported: Any, path: str, io: str, named: dict[str, str],
                    loops: list[str] | None = None) -> tuple[dict, dict]:
    """Lower ``exported`` with the XNNPACK partitioner, write the ``.pte`` (temp name, then
    rename) with the names in ``IO_METHOD``; what runs where and in what precision, read from
    the lowered graph before ``to_executorch`` adds its memory planning to it. ``loops``: the
    module paths of unrolled loop steps, left to ExecuTorch's own kernels (``_partitioner``)."""
    import executorch.kernels.quantized  # noqa: F401 - the quantized ops' out variants, for what XNNPACK leaves
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackPartitioner,
    )
    from executorch.exir import to_edge_transform_and_lower

    pattern_passes_only_where_they_can_match()
    edge = to_edge_transform_and_lower(exported, partitioner=[_partitioner(XnnpackPartitioner, loops or [])],
                                       constant_methods={IO_METHOD: io})
    lowered = edge.exported_program()
    read = placement_of(lowered.graph_module, named), precision_of(lowered, named)
    program = edge.to_executorch()
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(program.buffer)
    partial.replace(target)
    return read


def _partitioner(xnnpack_partitioner: type, loops: list[str]) -> Any:
    """XNNPACK's partitioner, taking no node traced inside ``loops`` (module paths). An unrolled
    loop's steps mix ops XNNPACK runs with ops it does not (a mask's select, a step's gather), so
    each step split into partitions of a few ops, each lowered on its own: a 40-step
    bidirectional GRU pair's lowering ran for minutes. Its steps run on ExecuTorch's kernels."""
    if not loops:
        return xnnpack_partitioner()
    from ...conversion.pt2e import outside_of

    outside = outside_of(loops)

    class OutsideLoops(xnnpack_partitioner):  # type: ignore[misc, valid-type]
        def get_matched_nodes_from_configs(self, ep: Any) -> list[list[Any]]:
            return [group for group in super().get_matched_nodes_from_configs(ep) if all(outside(n) for n in group)]

        def ops_to_not_decompose(self, ep: Any) -> tuple[list[Any], Any]:
            # an op XNNPACK would have taken whole (linear) is decomposed for ExecuTorch's kernels there
            ops, keeps = super().ops_to_not_decompose(ep)
            return ops, (lambda node: outside(node) and (keeps is None or keeps(node)))

    return OutsideLoops()


# XNNPACK's pattern passes and an op every one of their patterns holds: a graph without that op
# cannot match them (module, class, op name)
PATTERN_PASSES = (
    ("executorch.backends.xnnpack._passes.convert_to_upsample_bilinear2d", "ConvertToUpsampleBilinear2d",
     "upsample_bilinear2d"),
    ("executorch.backends.xnnpack._passes.convert_to_sdpa", "ConvertToSDPAPass", "aten.bmm"),
)


def pattern_passes_only_where_they_can_match() -> None:
    """XNNPACK's lowering runs passes that match bilinear upsampling and attention (SDPA) against
    pattern programs they build first by exporting and lowering small models: about 2.7 s and
    1.8 s of every lowering process, most of a small model's. Every bilinear pattern is one
    ``upsample_bilinear2d`` node and every attention pattern holds a ``bmm``, so a graph without
    such a node cannot match them: there the pass is skipped (the graph is left as it is, which is
    what the pass would return). Installed once per process."""
    import importlib

    from torch.fx.passes.infra.pass_base import PassResult

    for module_name, class_name, needed in PATTERN_PASSES:
        cls = getattr(importlib.import_module(module_name), class_name)
        original = cls.call
        if getattr(original, "edgekit_guarded", False):
            continue

        def call(self: Any, graph_module: Any, original: Any = original, needed: str = needed) -> Any:
            if not any(node.op == "call_function" and needed in str(node.target) for node in graph_module.graph.nodes):
                return PassResult(graph_module, False)
            return original(self, graph_module)

        call.edgekit_guarded = True  # type: ignore[attr-defined]
        cls.call = call
