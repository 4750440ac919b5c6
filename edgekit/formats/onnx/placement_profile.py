"""ONNX Runtime's node placement, read from a profiled run (``SessionOptions.enable_profiling``).

The profile's "Node" events carry each executed node's ``provider`` and ``op_name``: the same
account ``onnxruntime_perf_test`` prints. A provider that fuses a subgraph (TensorRT, CoreML,
OpenVINO EP) shows as one node per fused partition.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import TensorInfo
from ..placement import placement, unreadable_placement

CPU = "CPUExecutionProvider"
# ONNX Runtime puts these on the CPU whatever the providers ("ORT explicitly assigns shape related
# ops to CPU to improve perf"): not an accelerator's failure
CPU_BY_DESIGN = {"Shape", "Size", "MemcpyToHost", "MemcpyFromHost"}


def _zeros(inputs: list[TensorInfo]) -> dict[str, np.ndarray]:
    return {info.name: np.zeros([d if d > 0 else 1 for d in info.shape], info.dtype) for info in inputs}


def _node_events(path: str) -> dict[str, tuple[str, str]]:
    nodes = {}
    for event in json.loads(Path(path).read_text()):
        if event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time"):
            args = event.get("args") or {}
            nodes[event["name"]] = (str(args.get("provider", "?")), str(args.get("op_name", "?")))
    return nodes


def profiled_placement(ort: Any, model: str, options: Any, providers: list[Any], requested: list[str],
                       inputs: list[TensorInfo]) -> dict[str, Any]:
    accelerators = [name for name in requested if name != CPU]
    with tempfile.TemporaryDirectory(prefix="edgekit-placement-") as folder:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "placement")
        try:
            session = ort.InferenceSession(model, sess_options=options, providers=providers)
            session.run(None, _zeros(inputs))
            nodes = _node_events(session.end_profiling())
        except Exception as exc:  # onnxruntime raises its own types; placement is a report, never a failure
            return unreadable_placement(f"the profiled run failed: {str(exc).strip().splitlines()[0][:200]}")
        active = list(session.get_providers())
    if not nodes:
        return unreadable_placement("ONNX Runtime's profile listed no nodes")
    by_target = Counter(provider for provider, _ in nodes.values())
    fallback = Counter(op for provider, op in nodes.values() if provider == CPU and op not in CPU_BY_DESIGN)
    by_design = sum(1 for provider, op in nodes.values() if provider == CPU and op in CPU_BY_DESIGN)
    return placement(dict(by_target), accelerators, [p for p in active if p != CPU] if accelerators else active,
                     fallback if accelerators else Counter(), "ONNX Runtime profile (node -> provider)",
                     cpu_by_design=by_design)
