"""Benchmark report files: versioned JSON (schema in ``report.schema.json``), CSV summaries, push.

``read_report`` accepts every schema version this edgekit knows (upgrading older ones in
memory), refuses a newer version by name, and turns anything that is not a report into a
``ReportError`` naming the file and the problem.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ..errors import EdgekitError
from ..fsutil import write_text_atomic

SCHEMA = "edgekit.bench.report"
SCHEMA_VERSION = 2  # 2: run context, launch times, placement, sustained windows
SCHEMA_FILE = Path(__file__).with_name("report.schema.json")
CSV_COLUMNS = ("device", "model", "artifact", "backend", "precision", "threads", "batch", "size_bytes",
               "p50_ms", "p90_ms", "p99_ms", "mean_ms", "cv", "spread", "throughput_per_s", "peak_rss_mib", "accuracy",
               "throttled", "first_inference_ms", "first_launch_ms", "relaunch_ms", "sustained_change_pct",
               "fallback_ops", "other_cores")


class ReportError(EdgekitError):
    default_hint = "pass report files written by `python -m edgekit.run ... --bench --report FILE`"


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older schema version up to the current one. Version 1 recorded no run context:
    its conditions are what its thermal section says, the rest unknown (never guessed)."""
    if data.get("schema_version") == 1 and "context" not in data:
        thermal = data.get("thermal") or {}
        after = thermal.get("after") or {}
        readable = bool(after.get("zones_c") or after.get("raspberry_pi"))
        data = dict(data)
        data["context"] = {"unreadable": "schema 1 report: no run context was recorded", "conditions": {
            "throttled": bool(thermal.get("throttled")) if readable or thermal.get("throttled") else None,
            "throttle_reasons": list(thermal.get("reasons") or []), "max_c": after.get("max_c"),
            "governor": (data.get("device") or {}).get("cpu", {}).get("governor"), "capped": None,
            "other_cores": None, "other_share": None, "shared": None, "power_source": None,
            "power_mode": ((after.get("jetson") or {}).get("power_mode")), "under_voltage": None}}
    return data


def read_report(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot read ({exc})") from None
    except RecursionError:
        raise ReportError(f"{path}: nested too deeply to be a report") from None
    except ValueError as exc:
        raise ReportError(f"{path}: not JSON or truncated ({exc})") from None
    return validate_report(data, str(path))


def validate_report(data: Any, path: str) -> dict[str, Any]:
    """A report document checked (and upgraded) in memory; ``path`` names it in errors."""
    try:
        return _validate_report(data, path)
    except ReportError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        raise ReportError(f"{path}: malformed report ({type(exc).__name__}: {exc})") from None


def _validate_report(data: Any, path: str) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ReportError(f"{path}: not an edgekit benchmark report")
    version = data.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise ReportError(f"{path}: schema_version is missing or invalid")
    if version > SCHEMA_VERSION:
        raise ReportError(
            f"{path}: report schema_version {version} is newer than this edgekit reads ({SCHEMA_VERSION})",
            hint="upgrade edgekit where you compare reports",
        )
    data = _upgrade(data)
    results = data.get("results")
    if not isinstance(results, list) or not results:
        raise ReportError(f"{path}: has no results")
    for i, result in enumerate(results):
        latency = result.get("latency") if isinstance(result, dict) else None
        if not isinstance(latency, dict) or not isinstance(latency.get("samples_ms"), list) or not latency["samples_ms"]:
            raise ReportError(f"{path}: results[{i}] has no latency samples")
        if not isinstance(result.get("config"), dict):
            raise ReportError(f"{path}: results[{i}] has no config")
        samples = latency["samples_ms"]
        if not all(_is_sample(v) for v in samples):
            bad = next(v for v in samples if not _is_sample(v))
            raise ReportError(f"{path}: results[{i}].latency.samples_ms holds {bad!r}; expected non-negative "
                              "numbers of milliseconds")
        for key in ("p50", "p90", "p99"):
            if key in latency and not _is_sample(latency[key]):
                raise ReportError(f"{path}: results[{i}].latency.{key} is {latency[key]!r}, not a number")
    if not isinstance(data.get("model"), dict) or not isinstance(data.get("device"), dict):
        raise ReportError(f"{path}: model or device section missing")
    return data


def _is_sample(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and value == value \
        and value != float("inf")


def write_report(report: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    write_text_atomic(path, json.dumps(report, indent=1, allow_nan=False) + "\n")
    return path


def _spread(samples_ms: list[float]) -> float | None:
    """IQR / median for reports written before "spread" was recorded."""
    if not samples_ms:
        return None
    import numpy as np

    q25, q50, q75 = np.percentile(np.asarray(samples_ms, dtype=np.float64), [25, 50, 75])
    return float((q75 - q25) / q50) if q50 > 0 else 0.0


def summary_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for result in report["results"]:
        config, latency = result["config"], result["latency"]
        accuracy = (result.get("accuracy") or {}).get("accuracy")
        rows.append({
            "device": report["device"].get("name", "?"),
            "model": report["model"].get("name", "?"),
            "artifact": config.get("artifact"),
            "backend": config.get("backend"),
            "precision": config.get("precision"),
            "threads": config.get("threads"),
            "batch": config.get("batch"),
            "size_bytes": result.get("size_bytes"),
            "p50_ms": latency.get("p50"),
            "p90_ms": latency.get("p90"),
            "p99_ms": latency.get("p99"),
            "mean_ms": latency.get("mean"),
            "cv": latency.get("cv"),
            "spread": latency["spread"] if "spread" in latency else _spread(latency.get("samples_ms") or []),
            "throughput_per_s": (result.get("throughput") or {}).get("per_s"),
            "peak_rss_mib": result.get("peak_rss_mib"),
            "accuracy": accuracy,
            "throttled": (report.get("thermal") or {}).get("throttled", False),
            "first_inference_ms": result.get("first_inference_ms"),
            "first_launch_ms": ((result.get("launch") or {}).get("first_launch") or {}).get("process_ms"),
            "relaunch_ms": ((result.get("launch") or {}).get("relaunch") or {}).get("process_ms"),
            "sustained_change_pct": (result.get("sustained") or {}).get("change_pct"),
            "fallback_ops": (result.get("placement") or {}).get("fallback_ops"),
            "other_cores": ((report.get("context") or {}).get("conditions") or {}).get("other_cores"),
        })
    return rows


def to_csv(reports: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for report in reports:
        writer.writerows(summary_rows(report))
    return buffer.getvalue()


def push(report: dict[str, Any], url: str, timeout: float = 10.0) -> int:
    """POST the report as JSON (an edgekit server stores it); the HTTP status on success."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url, data=json.dumps(report).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        raise ReportError(f"pushing the report to {url} failed: HTTP {exc.code} {exc.reason}",
                          hint="check the server URL; the report file was still written") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ReportError(f"pushing the report to {url} failed: {getattr(exc, 'reason', exc)}",
                          hint="check the server URL and network; the report file was still written") from None
