"""Latency cards: one page per artifact and device that a device owner can trust and share.

A card is distilled from one benchmark report (``report.py``) and the package's manifest, both
read on the device: single-stream percentiles with their 95% intervals, first inference in a new
process (edgekit's cache empty, then warm) and in the measuring process, load time, peak memory,
size, accuracy measured here against the build machine's verdict (a device-only accuracy loss
shows as a change), the speed-up over the artifact's float fallback measured in the same run,
where the ops ran, and the run's conditions and versions. Conditions that make the numbers
unlike an idle device's (a shared CPU, throttling, pinned CPUs, noisy intervals) are the card's
first lines, and cards measured under unlike conditions are never tabled side by side without
saying so (``side_by_side``).

Files: ``CARD.json`` (schema ``card.schema.json``, versioned) and ``CARD.md`` (GitHub and phone
readable Markdown), named ``<model>.<artifact>.<device>.card``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..fsutil import write_text_atomic
from ..device.card_files import SCHEMA, SCHEMA_VERSION

# MLPerf Inference's single-stream rule: at least this many queries over at least this long, the
# 90th percentile reported
SINGLE_STREAM_QUERIES, SINGLE_STREAM_SECONDS = 1024, 60.0
SINGLE_STREAM_RULE = (f"MLPerf single stream: one query at a time, at least {SINGLE_STREAM_QUERIES} queries and "
                      f"{SINGLE_STREAM_SECONDS:g} s, headline the 90th percentile")


def cards_from_report(report: Mapping[str, Any], manifest: Any) -> list[dict[str, Any]]:
    """One card per quantized artifact measured in ``report`` (a float artifact measured alone gets
    its own card too); ``manifest`` is the package's ``Manifest``."""
    results = list(report["results"])
    by_key = {(r["config"]["artifact"], r["config"].get("threads"), r["config"].get("batch")): r for r in results}
    floats = {a.key for a in manifest.artifacts if a.is_float}
    measured_quantized = [r for r in results if r["config"]["artifact"] not in floats]
    chosen = measured_quantized or results
    return [card(report, manifest, result, _fallback_result(manifest, result, by_key)) for result in chosen]


def card(report: Mapping[str, Any], manifest: Any, result: Mapping[str, Any],
         fallback: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The card of one measured configuration (``result``) of ``report``; ``fallback``: its float
    fallback's result from the same run, for the speed-up."""
    config = result["config"]
    latency = result["latency"]
    # the queries' own time (reports before query_s: their stored samples, which a long run strides)
    seconds = latency.get("query_s", round(sum(latency.get("samples_ms") or []) / 1000.0, 3))
    single_stream = bool(report["settings"].get("single_stream"))
    launch = result.get("launch") or {}
    first, again = launch.get("first_launch") or {}, launch.get("relaunch") or {}
    context = report.get("context") or {}
    conditions = context.get("conditions") or {}
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created": report.get("created"),
        "edgekit_version": report.get("edgekit_version"),
        "warnings": _warnings(report, result) + _verdict_warning(manifest, config["artifact"]),
        "model": {"name": report["model"]["name"], "package": report["model"].get("source")},
        "artifact": {"key": config["artifact"], "sha256": manifest.artifact(config["artifact"]).sha256,
                     "precision": config.get("precision"), "size_bytes": result["size_bytes"],
                     "backend": config.get("backend"), "library": config.get("library"),
                     "delegate": config.get("delegate"), "providers": config.get("providers"),
                     "threads": config.get("threads"), "batch": config.get("batch")},
        "device": _device(report["device"]),
        "latency_ms": {
            "headline": "p90" if single_stream else "p50",
            "p50": latency["p50"], "p90": latency["p90"], "p99": latency["p99"], "mean": latency["mean"],
            "p50_ci95": latency.get("p50_ci95"), "p90_ci95": latency.get("p90_ci95"),
            "queries": latency["count"], "seconds": seconds, "noisy": bool(latency.get("noisy")),
        },
        "single_stream": {"rule": SINGLE_STREAM_RULE, "asked": single_stream,
                          "met": latency["count"] >= SINGLE_STREAM_QUERIES and seconds >= SINGLE_STREAM_SECONDS},
        "first_inference_ms": {
            "new_process_empty_cache": first.get("process_ms"), "new_process_warm_cache": again.get("process_ms"),
            "in_process": result.get("first_inference_ms"),
        },
        "load_ms": {"cache_miss": first.get("load_ms"), "cache_hit": again.get("load_ms"),
                    "in_process": (result.get("load_ms") or {}).get("total_s")},
        "memory_mib": {"peak_rss": result.get("peak_rss_mib"), "after_load": result.get("rss_after_load_mib")},
        "accuracy": _accuracy(manifest, config["artifact"], result.get("accuracy"))
        | {"agreement_with_float": result.get("agreement_with_float")},
        "speedup_vs_float": _speedup(result, fallback),
        "placement": _placement(result.get("placement")),
        "conditions": {key: conditions.get(key) for key in (
            "shared", "other_share", "throttled", "throttle_reasons", "governor", "capped", "cpus_allowed",
            "cpus_online", "power_source", "power_mode", "max_c")},
        "versions": dict(context.get("versions") or {}),
    }


def float_fallbacks(manifest: Any, key: str) -> list[str]:
    """The keys of the float fallbacks built for the format of artifact ``key``."""
    fmt = manifest.artifact(key).format
    return [a.key for a in manifest.artifacts
            if a.is_float and a.converter.get("float_fallback_for") == fmt and a.key != key]


def _fallback_result(manifest: Any, result: Mapping[str, Any],
                     by_key: Mapping[tuple[Any, Any, Any], Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The same run's result for the float fallback of ``result``'s artifact (same threads, batch)."""
    config = result["config"]
    found = [by_key.get((key, config.get("threads"), config.get("batch")))
             for key in float_fallbacks(manifest, config["artifact"])]
    return next((r for r in found if r is not None), None)


def _warnings(report: Mapping[str, Any], result: Mapping[str, Any]) -> list[str]:
    """What makes these numbers unlike an idle device's: the run's conditions (``THROTTLED:``,
    ``SHARED:``), CPUs withheld from the run, and this configuration's own warnings (noise); the
    report's warnings about its other configurations are theirs."""
    conditions = (report.get("context") or {}).get("conditions") or {}
    found = [w for w in report.get("warnings", []) if re.match(r"^[A-Z]+: ", w)]
    allowed, online = conditions.get("cpus_allowed"), conditions.get("cpus_online")
    if allowed and online and allowed < online:
        found.append(f"PINNED: the run was allowed {allowed} of the {online} CPUs: not the whole device")
    found += list(result.get("warnings", []))
    if result["latency"].get("noisy") and not result.get("warnings"):
        found.append("NOISY: the latency samples spread more than the noise threshold: the intervals are wide")
    return list(dict.fromkeys(found))


def _verdict_warning(manifest: Any, key: str) -> list[str]:
    """An artifact that did not pass its gates at packaging (kept by --allow-accuracy-drop, too few
    samples to decide, never measured): said first, since its speed is then not a shipping result."""
    from ..validation_record import Verdict

    record = manifest.validation.artifact(key)
    if not record.recorded or record.verdict is Verdict.PASSED:
        return []
    if record.verdict is Verdict.REFUSED:
        return [f"FAILED: this artifact failed its gates at packaging ({'; '.join(record.failed_gates() or [])}): "
                "its accuracy is not float's, and the runtime does not pick it by default"]
    return [f"VERDICT: at packaging, {record.outcome()}: its accuracy was not shown to hold"]


def _device(device: Mapping[str, Any]) -> dict[str, Any]:
    cpu = device.get("cpu") or {}
    return {"name": device.get("name"), "model": device.get("device_model"), "arch": device.get("arch"),
            "cpu": cpu.get("model"), "simd": list(cpu.get("simd") or []), "cores": device.get("cores"),
            "memory_mib": device.get("memory_mib"), "os": device.get("os"), "profile": device.get("profile")}


def _accuracy(manifest: Any, key: str, measured: Mapping[str, Any] | None) -> dict[str, Any]:
    """Accuracy measured here and at packaging; the change is what this device loses (or gains)."""
    record = manifest.validation.artifact(key)  # the package's record: its verdict as decided when it was built
    here = (measured or {}).get("accuracy")
    built = record.metrics.accuracy
    # a change is this device's loss only on the samples packaging judged: other data (another split,
    # other labels, mislabelled files) differ by what the data hold, not by what the device computes
    packaged_on = manifest.validation.data.sha256
    same_data = bool(packaged_on) and (measured or {}).get("data_sha256") == packaged_on
    change = round((here - built) * 100, 2) if same_data and isinstance(here, (int, float)) \
        and isinstance(built, (int, float)) else None
    return {"on_device": here, "samples": (measured or {}).get("samples"), "data_sha256": (measured or {}).get("data_sha256"),
            "same_data_as_packaging": same_data,
            "not_measured_because": (measured or {}).get("reason"),
            "at_packaging": built, "float_at_packaging": record.get("float_accuracy"),
            "verdict_at_packaging": record.verdict.value if record.recorded else None, "change_pp": change}


def _speedup(result: Mapping[str, Any], fallback: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if fallback is None:
        return None
    mine, theirs = result["latency"]["p50"], fallback["latency"]["p50"]
    return {"float_artifact": fallback["config"]["artifact"], "float_p50_ms": theirs,
            "speedup": round(theirs / mine, 3) if mine > 0 else None}


def _placement(placement: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not placement:
        return None
    return {"ops": placement.get("ops"), "by_target": dict(placement.get("by_target") or {}),
            "fallback_ops": placement.get("fallback_ops"), "not_delegated": dict(placement.get("not_delegated") or {}),
            "how": placement.get("how")}


# --- files -------------------------------------------------------------------------------------


def card_name(card: Mapping[str, Any]) -> str:
    """``<model>.<artifact>.<device>.card``: safe in any file system."""
    parts = [card["model"]["name"], card["artifact"]["key"], card["device"]["name"] or "device"]
    return ".".join(re.sub(r"[^A-Za-z0-9_-]+", "_", str(p)) for p in parts) + ".card"


def write_card(card: Mapping[str, Any], folder: str | Path) -> tuple[Path, Path]:
    """``CARD.json`` and ``CARD.md`` in ``folder`` (each written to a temp name, then renamed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / card_name(card)
    json_path, md_path = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".md")  # CARD_SUFFIX
    write_text_atomic(json_path, json.dumps(card, indent=1, allow_nan=False) + "\n")
    write_text_atomic(md_path, markdown(card))
    return json_path, md_path


# --- Markdown ----------------------------------------------------------------------------------


def _ms(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "not measured"
    return f"{value:.3g} ms" if value < 10 else f"{value:.1f} ms"


def _interval(pair: Any) -> str:
    return f" (95% CI {_ms(pair[0])} to {_ms(pair[1])})" if isinstance(pair, (list, tuple)) and len(pair) == 2 else ""


def _percent(value: Any) -> str:
    return f"{value * 100:.2f}%" if isinstance(value, (int, float)) else "not measured"


def markdown(card: Mapping[str, Any]) -> str:
    """The card as Markdown: warnings first, then one two-column table (narrow enough for a phone)."""
    artifact, device, latency = card["artifact"], card["device"], card["latency_ms"]
    lines = [f"# {card['model']['name']} · {artifact['key']} on {device['name']}", ""]
    for warning in card["warnings"]:
        lines.append(f"> **Warning:** {warning}")
    if card["warnings"]:
        lines += ["> Compare these numbers only with cards measured under the same conditions.", ""]
    headline = latency["headline"]
    lines += [f"**{headline} latency {_ms(latency[headline])}**{_interval(latency.get(headline + '_ci95'))}, "
              f"{artifact['precision']}, {artifact['backend']} at {artifact['threads'] or 'default'} thread(s), "
              f"batch {artifact['batch']}.", "", "| measurement | value |", "|---|---|"]
    rows = [
        ("p50 / p90 / p99", f"{_ms(latency['p50'])} / {_ms(latency['p90'])} / {_ms(latency['p99'])}"),
        ("p90 interval", _interval(latency.get("p90_ci95")).strip(" ()") or "not measured"),
        ("queries, time", f"{latency['queries']} in {latency['seconds']:g} s"
                          f"{' (single-stream rule met)' if card['single_stream']['met'] else ''}"),
        ("first result, new process", f"{_ms(card['first_inference_ms']['new_process_empty_cache'])} (empty cache), "
                                      f"{_ms(card['first_inference_ms']['new_process_warm_cache'])} (warm cache)"),
        ("first inference after load", _ms(card["first_inference_ms"]["in_process"])),
        ("load", f"{_ms(card['load_ms']['cache_miss'])} (cache miss), {_ms(card['load_ms']['cache_hit'])} (cache hit)"),
        ("peak memory (RSS)", f"{card['memory_mib']['peak_rss']} MiB in the measuring process "
                              f"({card['memory_mib']['after_load']} MiB after load; its latency samples take 8 bytes each)"),
        ("artifact size", f"{artifact['size_bytes'] / 1024:.1f} KiB"),
    ]
    rows += _accuracy_rows(card["accuracy"])
    speed = card.get("speedup_vs_float")
    rows.append(("speed-up over float", f"{speed['speedup']}x ({speed['float_artifact']} p50 {_ms(speed['float_p50_ms'])})"
                 if speed else "float fallback not measured in this run"))
    rows.append(("where the ops ran", _where(card.get("placement"))))
    rows.append(("device", ", ".join(str(v) for v in (device["model"] or device["cpu"], f"{device['cores']} cores",
                                                      device["arch"], device["os"]) if v)))
    rows.append(("run conditions", _conditions(card["conditions"])))
    rows.append(("versions", ", ".join(f"{k} {v}" for k, v in card["versions"].items())))
    lines += [f"| {label} | {value} |" for label, value in rows]
    if card["single_stream"]["asked"]:  # the rule the run was held to, only where it was asked for
        lines += ["", f"Single-stream rule: {card['single_stream']['rule']}."]
    lines += ["", f"Measured {card['created']} with edgekit {card['edgekit_version']}.", ""]
    return "\n".join(lines)


def _accuracy_rows(accuracy: Mapping[str, Any]) -> list[tuple[str, str]]:
    agreement = _agreement_rows(accuracy.get("agreement_with_float"))
    if accuracy["on_device"] is None:
        why = accuracy.get("not_measured_because") or "pass --eval with labelled data"
        return [("accuracy on this device", f"not measured ({why})"), *agreement]
    change = accuracy["change_pp"]
    said = f", {change:+.2f} pp against packaging" if change is not None else (
        "" if accuracy.get("same_data_as_packaging", True) else
        ", on other samples than packaging judged: not comparable with its accuracy (give the same --eval data)")
    return [("accuracy on this device", f"{_percent(accuracy['on_device'])} on {accuracy['samples']} samples{said}"),
            ("accuracy at packaging", f"{_percent(accuracy['at_packaging'])} (float {_percent(accuracy['float_at_packaging'])}, "
                                      f"verdict {accuracy['verdict_at_packaging'] or 'none'})"), *agreement]


def _agreement_rows(agreement: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """One row per output: its task's agreement with the float fallback here, SQNR here and at packaging."""
    if not agreement:
        return []
    rows = []
    for name, output in agreement["outputs"].items():
        said = []
        task = output.get("task") or {}
        for rate in task.get("evidence") or []:
            low, high = rate["ci95"]
            said.append(f"{rate['name'].replace('_', ' ')} {_percent(rate['value'])} ({rate['k']}/{rate['n']} "
                        f"{rate['unit']}, 95% CI {_percent(low)} to {_percent(high)})")
        if output.get("sqnr_db") is not None:
            packaged = (output.get("at_packaging") or {}).get("sqnr_db")
            said.append(f"SQNR {output['sqnr_db']:.1f} dB" + (f" (packaging {packaged:.1f} dB)" if packaged is not None else ""))
        if task.get("passed") is not None:
            said.append("gate passed" if task["passed"] else f"GATE FAILED ({task.get('rule')})")
        elif output.get("sqnr_passed") is not None:
            floor = output["sqnr_floor_db"]
            said.append(f"gate SQNR >= {floor:g} dB passed" if output["sqnr_passed"] else f"GATE FAILED (SQNR >= {floor:g} dB)")
        rows.append((f"{name} vs {agreement['float_artifact']} here", "; ".join(said) or "not comparable"))
    return rows


def _where(placement: Mapping[str, Any] | None) -> str:
    if not placement:
        return "not reported by this runtime"
    spread = ", ".join(f"{target} {count}" for target, count in placement["by_target"].items())
    fell = placement.get("fallback_ops") or 0
    return f"{spread}{f'; {fell} ops fell back to the CPU' if fell else ''}"


def _conditions(conditions: Mapping[str, Any]) -> str:
    said = []
    if conditions.get("shared"):
        said.append(f"shared CPU ({_percent(conditions.get('other_share'))} of CPU time to other processes)")
    if conditions.get("throttled"):
        said.append("throttled")
    if conditions.get("governor"):
        said.append(f"governor {conditions['governor']}")
    allowed, online = conditions.get("cpus_allowed"), conditions.get("cpus_online")
    if allowed and online and allowed < online:
        said.append(f"pinned to {allowed} of {online} CPUs")
    return ", ".join(said) or "idle, not throttled"


def _condition_kind(conditions: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two runs' conditions alike: shared or idle, throttled or not, pinned or not, governor."""
    allowed, online = conditions.get("cpus_allowed"), conditions.get("cpus_online")
    return (bool(conditions.get("shared")), bool(conditions.get("throttled")),
            bool(allowed and online and allowed < online), conditions.get("governor"))


# --- several cards -----------------------------------------------------------------------------


def card_table(cards: Iterable[Mapping[str, Any]]) -> tuple[str | None, list[str], list[list[str]]]:
    """Cards as one table (devices and artifacts as columns): the unlike-conditions warning (None
    when their conditions are alike), the header and the rows. Markdown and HTML render it."""
    cards = list(cards)
    warned = [c for c in cards if c["warnings"]]
    warning = None
    if warned and len(warned) < len(cards) or len({_condition_kind(c["conditions"]) for c in cards}) > 1:
        warning = ("these cards were measured under unlike conditions ("
                   + "; ".join(f"{c['device']['name']} {c['artifact']['key']}: {_conditions(c['conditions'])}"
                               for c in cards) + "): differences may be the conditions, not the devices.")
    header = ["measurement", *(f"{c['device']['name']} · {c['artifact']['key']}" for c in cards)]
    rows = [("precision", lambda c: c["artifact"]["precision"]),
            ("p50", lambda c: _ms(c["latency_ms"]["p50"])), ("p90", lambda c: _ms(c["latency_ms"]["p90"])),
            ("p99", lambda c: _ms(c["latency_ms"]["p99"])),
            ("first result, new process", lambda c: _ms(c["first_inference_ms"]["new_process_empty_cache"])),
            ("peak RSS", lambda c: f"{c['memory_mib']['peak_rss']} MiB"),
            ("accuracy here", lambda c: _percent(c["accuracy"]["on_device"])),
            ("agreement with float here", lambda c: _agreement_cell(c["accuracy"].get("agreement_with_float"))),
            ("speed-up over float", lambda c: f"{c['speedup_vs_float']['speedup']}x" if c.get("speedup_vs_float") else "-"),
            ("warnings", lambda c: str(len(c["warnings"])) if c["warnings"] else "none"),
            ("conditions", lambda c: _conditions(c["conditions"]))]
    return warning, header, [[label, *(str(get(c)) for c in cards)] for label, get in rows]


def _agreement_cell(agreement: Mapping[str, Any] | None) -> str:
    """The weakest output's SQNR here and the gates' verdict, in one cell."""
    if not agreement:
        return "-"
    sqnrs = [o["sqnr_db"] for o in agreement["outputs"].values() if o.get("sqnr_db") is not None]
    verdict = {True: "gates pass", False: "GATE FAILED", None: "no gate"}[agreement.get("passed")]
    return (f"SQNR {min(sqnrs):.1f} dB, " if sqnrs else "") + verdict


def side_by_side(cards: Iterable[Mapping[str, Any]]) -> str:
    """A Markdown table of cards (devices and artifacts as columns); unlike conditions said first."""
    warning, header, rows = card_table(cards)
    lines = [f"> **Warning:** {warning}", ""] if warning else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


