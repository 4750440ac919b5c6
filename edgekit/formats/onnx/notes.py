"""What `edgekit package` says of an ONNX artifact, from the details only the ONNX build writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base import BuildNote


def build_notes(details: Mapping[str, Any]) -> tuple[BuildNote, ...]:
    """A companion (.ort) that failed, a quantized build holding no INT8 op, and an "INT8" graph
    that mostly runs in float after ONNX Runtime's optimization on this CPU: said, not only recorded."""
    found = [BuildNote(f"{companion} was not written ({reason}); the artifact itself passed and is in the package",
                       warning=True) for companion, reason in (details.get("companions_failed") or {}).items()]
    if details.get("no_int8"):
        found.append(BuildNote(str(details["no_int8"])))
    if details.get("quantized_source"):
        biases, grids = details.get("quantized_biases") or [], details.get("weights_on_grid") or []
        found.append(BuildNote("the source's quantized graph ships as it is, its learned scales and zero points kept"
                               + (f"; the float weights of {len(grids)} layers, already on a symmetric int8 grid, "
                                  "written as those int8 values and scales" if grids else "")
                               + (f"; the float biases of {len(biases)} int8 layers written as int32 at scale input x "
                                  "weight, so ONNX Runtime fuses them into int8 kernels" if biases else "")))
    graph = details.get("runtime_graph") or {}
    if graph.get("float_ops") and (graph.get("int8_fraction") or 0) < 0.5:
        kinds = ", ".join(f"{op} x{n}" for op, n in sorted(graph["float_op_types"].items(), key=lambda i: -i[1])[:4])
        found.append(BuildNote(f"after ONNX Runtime's graph optimization on this CPU ({graph['cpu']}), "
                               f"{graph['float_ops']} of {graph['float_ops'] + graph['int8_ops']} compute ops run in "
                               f"float ({kinds}); `edgekit tune` on the device measures whether it beats float there"))
    return tuple(found)
