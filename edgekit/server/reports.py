"""Benchmark reports pushed by devices (``--push``), stored as files one ``edgekit compare`` can read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..bench.report import ReportError, validate_report
from ..fsutil import write_text_atomic
from ..names import is_safe_name, slug


class ReportStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def add(self, report: Any) -> str:
        validate_report(report, "pushed report")
        text = json.dumps(report, indent=1)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        device = slug(str(report["device"].get("name", "device")), "device")[:40].strip("-._") or "device"
        model = slug(str(report["model"].get("name", "model")))[:40].strip("-._") or "model"
        report_id = f"{model}.{device}.{digest}"
        write_text_atomic(self.directory / f"{report_id}.json", text + "\n")
        return report_id

    def list(self) -> list[dict[str, Any]]:
        entries = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            entries.append({"id": path.stem, "model": data.get("model", {}).get("name"),
                            "device": data.get("device", {}).get("name"), "created": data.get("created"),
                            "results": len(data.get("results", []))})
        return entries

    def get(self, report_id: str) -> dict[str, Any]:
        if not is_safe_name(report_id):
            raise ReportError(f"invalid report id {report_id!r}")
        path = self.directory / f"{report_id}.json"
        if not path.is_file():
            raise FileNotFoundError(report_id)
        return json.loads(path.read_text())
