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
