"""The plan an artifact was built with, read back from the artifact: which entries it holds at
their precision (a layer kept in float, 16-bit activations), and which it does not, said. A
converter can fold a kept layer into its neighbour, fuse it under another name or quantize it
anyway; the manifest records what landed, and a miss is never assumed away."""

from __future__ import annotations

from typing import Any

from ..conversion.layer_names import LayerNames, PlanReadBack, read_back
from ..formats import Builder
from ..formats.plan import PrecisionPlan
from ..manifest import Artifact
from ..progress import Progress


def source_plan(plan: PrecisionPlan, names: LayerNames) -> PrecisionPlan:
    """``plan`` (in the names a converter took) in the source's names, as the manifest records it
    and the user is told it (``LayerNames.in_source``)."""
    return PrecisionPlan({name: plan.precision(own[0]) for name, own in names.in_source(plan.layers).items()})


def plan_record(builder: Builder, artifact: Artifact, plan: PrecisionPlan, names: LayerNames,
                progress: Progress) -> dict[str, Any]:
    """``plan``'s manifest record (a file a later run takes again with --precision-plan), in the
    source's names (``names.in_source``: a PyTorch module, not the ONNX nodes it became), with
    ``read_back``: the entries the artifact holds out of int8 and those it does not (said), or
    nothing where the format reads no per-layer record back from its artifact."""
    groups = names.in_source(plan.layers)
    record = source_plan(plan, names).to_dict()
    held = builder.held_out_of_int8(artifact)
    if held is None:
        return record
    built = set(read_back(plan.layers, held).landed)  # in the names the artifact was built with
    landed = tuple(name for name, own in groups.items() if built & set(own))
    found = PlanReadBack(landed, tuple(name for name in groups if name not in landed))
    record["read_back"] = found.record()
    if found.missed:
        shown = ", ".join(f"{name} ({record['layers'][name]})" for name in found.missed[:8])
        more = f" and {len(found.missed) - 8} more" if len(found.missed) > 8 else ""
        progress.warn(f"{builder.name}: {len(found.missed)} of the {len(groups)} precision plan entries are not in "
                      f"the artifact as planned: {shown}{more} (read back from the artifact: no op of them at "
                      "that precision; the converter folded, fused or quantized them)")
    return record
