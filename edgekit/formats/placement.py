"""Where a configuration's ops ran: on the accelerator it asked for, or back on the CPU.

Each backend reads its runtime's own account (LiteRT's delegate partitions, ONNX Runtime's
per-node provider from a profiled run, OpenVINO's runtime model, CoreML's compute plan) and
returns it through ``placement`` in one shape, so a report and ``--fail-on-fallback`` read
every runtime alike. "Requested" is every accelerator the configuration asked for (a delegate,
an execution provider, a device); a requested one that is not active, or ops it left to the
CPU, is a fallback.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def placement(
    by_target: dict[str, int],
    requested: list[str],
    active: list[str],
    fallback_ops: Counter[str] | dict[str, int],
    how: str,
    **extra: Any,
) -> dict[str, Any]:
    """``by_target``: ops per place they ran ("XNNPACK", "CPU kernels", a provider name);
    ``fallback_ops``: op type -> count of ops a requested accelerator did not take."""
    missing = [name for name in requested if name not in active]
    fallback = dict(sorted(Counter(fallback_ops).items(), key=lambda kv: (-kv[1], kv[0])))
    return {
        "ops": int(sum(by_target.values())),
        "by_target": dict(by_target),
        "requested": list(requested),
        "active": list(active),
        "missing": missing,
        "fallback_ops": int(sum(fallback.values())) if requested else 0,
        "fallback": fallback if requested else {},
        "how": how,
        **extra,
    }


def unreadable_placement(reason: str) -> dict[str, Any]:
    return {"unreadable": reason}


def fell_back(entry: dict[str, Any]) -> str | None:
    """Why a configuration did not run where it asked to (None when it did, or asked for nothing)."""
    if "unreadable" in entry or not entry.get("requested"):
        return None
    if entry.get("missing"):
        return f"requested {', '.join(entry['missing'])} is not active (ran on {', '.join(entry['active']) or 'the CPU'})"
    if entry.get("fallback_ops"):
        ops = ", ".join(f"{op} x{n}" for op, n in list(entry["fallback"].items())[:8])
        return (f"{entry['fallback_ops']} of {entry['ops']} ops ran outside {', '.join(entry['requested'])} "
                f"({ops})")
    return None
