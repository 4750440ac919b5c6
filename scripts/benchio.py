"""Shared by the scripts/bench_*.py, fuzz.py and soak_server.py: save a JSON result atomically."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgekit.fsutil import write_text_atomic  # noqa: E402


def save_json(report: dict[str, Any], path: Path) -> None:
    """Write ``report`` to ``path`` (parents created; temp file + rename)."""
    write_text_atomic(path, json.dumps(report, indent=2) + "\n")


def print_and_save(report: dict[str, Any], path: Path) -> None:
    """Print the whole report as JSON on stdout, save it, and say where on stderr."""
    save_json(report, path)
    print(json.dumps(report, indent=2))
    print(f"saved {path}", file=sys.stderr)


def require_signal(manifest: Any) -> dict[str, float]:
    """Stop a benchmark whose INT8 artifacts carry no signal: timing a model that outputs constants
    measures nothing a user would run. Signal: outputs that vary (not degenerate, more than one
    distinct value) and whose top-1 agrees with the float model more often than chance.
    Returns each measured artifact's top-1 agreement."""
    found = {}
    classes = manifest.outputs[0].shape[-1]
    for target, metrics in manifest.validation.to_dict().get("artifacts", {}).items():
        if not metrics.get("measured"):
            continue
        agreement = metrics.get("top1_agreement")
        agreement = None if agreement is None or agreement != agreement else agreement  # NaN: not measured
        if metrics.get("degenerate") or metrics.get("distinct_values", 2) < 2 or (
                agreement is not None and classes > 1 and agreement <= 1.0 / classes):
            raise SystemExit(f"{manifest.name} {target}: INT8 outputs carry no signal "
                             f"({metrics.get('degenerate') or f'top-1 agreement {agreement}'}); "
                             "fix the reference model before benchmarking it")
        found[target] = round(float(agreement), 4) if agreement is not None else None
    return found
