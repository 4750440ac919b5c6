"""`edgekit card`: a latency card from a real run of the digits package on this machine, every
field filled, valid against its schema; a run under a CPU hog says so first; cards table side by
side (with a warning when their conditions differ); the Markdown renders readably at phone and
desktop widths in headless Chromium."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.bench.card import markdown, side_by_side
from edgekit.device.card_files import SCHEMA_FILE, read_card
from tests.bench.test_report_compare import _browser_flags, _required_chromium
from tests.conftest import EVAL, edgekit_cli

pytestmark = pytest.mark.slow

QUICK = ("--runs", "40", "--min-seconds", "0.2", "--warmup", "3")


def _check(schema: dict, value: object, where: str) -> None:
    """The schema's required keys and types, recursively (the subset of JSON Schema it uses)."""
    types = schema.get("type")
    if types is not None:
        allowed = types if isinstance(types, list) else [types]
        python = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float),
                  "boolean": bool, "null": type(None)}
        assert any(isinstance(value, python[t]) for t in allowed), f"{where}: {value!r} is not {allowed}"
    if "const" in schema:
        assert value == schema["const"], where
    if "enum" in schema:
        assert value in schema["enum"], where
    if isinstance(value, dict):
        for key in schema.get("required", []):
            assert key in value, f"{where}.{key} missing"
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                _check(sub, value[key], f"{where}.{key}")


def _card(package: Path, out: Path, *extra: object) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = edgekit_cli("card", package, "--eval", EVAL, "-o", out, *QUICK, "--report", out / "run.json", *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = sorted(out.glob("*.card.json"))
    return result, read_card(path)


def test_a_card_from_a_real_run_holds_every_field_and_follows_its_schema(digits_all_package, tmp_path):
    result, card = _card(digits_all_package, tmp_path, "--artifact", "tflite")  # an INT8 card: its float beside it
    _check(json.loads(SCHEMA_FILE.read_text()), card, "card")
    assert card["artifact"]["key"] == "tflite" and card["artifact"]["size_bytes"] > 1000
    latency = card["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] and latency["queries"] >= 40
    assert latency["p50_ci95"][0] <= latency["p50"] <= latency["p50_ci95"][1] and latency["p90_ci95"]
    first = card["first_inference_ms"]
    assert first["new_process_empty_cache"] > 0 and first["new_process_warm_cache"] > 0 and first["in_process"] > 0
    assert card["load_ms"]["cache_miss"] > 0 and card["load_ms"]["cache_hit"] > 0 and card["memory_mib"]["peak_rss"] > 0
    accuracy = card["accuracy"]  # measured here, against the package's verdict
    assert accuracy["on_device"] >= 0.97 and accuracy["samples"] == 360 and accuracy["verdict_at_packaging"] == "passed"
    assert accuracy["change_pp"] == pytest.approx((accuracy["on_device"] - accuracy["at_packaging"]) * 100, abs=0.01)
    speed = card["speedup_vs_float"]  # the float fallback measured in the same run
    assert speed["float_artifact"].startswith("tflite-float") and speed["speedup"] > 0
    assert card["placement"]["ops"] > 0 and card["placement"]["by_target"]
    assert card["versions"]["edgekit"] and card["device"]["cores"] >= 1
    assert card["conditions"]["cpus_online"] >= 1 and card["single_stream"]["met"] is False  # a short run
    text = next(tmp_path.glob("digits.tflite.*.card.md")).read_text()
    for label in ("p50 / p90 / p99", "first result, new process", "load", "peak memory (RSS)", "artifact size",
                  "accuracy on this device", "speed-up over float", "where the ops ran", "run conditions", "versions"):
        assert f"| {label} |" in text
    assert "card: " in result.stdout
    from edgekit.bench.card import cards_from_report
    from edgekit.manifest import Manifest

    report = json.loads((tmp_path / "run.json").read_text())  # a model the on-device accuracy does not cover
    for measured in report["results"]:
        measured["accuracy"] = {"samples": 0, "accuracy": None, "reason": "accuracy is measured for one-input, "
                                                                          "one-output classifiers"}
    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    (unmeasured,) = cards_from_report(report, manifest)
    assert "| accuracy on this device | not measured (accuracy is measured for one-input, one-output classifiers) |" \
        in markdown(unmeasured)
    report = json.loads((tmp_path / "run.json").read_text())  # mislabelled or other data: no "device loss"
    for measured in report["results"]:
        if measured.get("accuracy"):
            measured["accuracy"] = {**measured["accuracy"], "accuracy": 0.25, "data_sha256": "0" * 64}
    other = next(c for c in cards_from_report(report, manifest) if c["accuracy"]["on_device"] == 0.25)
    assert other["accuracy"]["change_pp"] is None and other["accuracy"]["same_data_as_packaging"] is False
    assert "on other samples than packaging judged: not comparable" in markdown(other)
    assert accuracy["same_data_as_packaging"] is True
    assert not any(w.startswith(("FAILED", "VERDICT")) for w in card["warnings"])
    failed = json.loads((digits_all_package / "manifest.json").read_text())  # kept by --allow-accuracy-drop
    failed["validation"]["artifacts"]["tflite"].update(passed=False, verdict="failed",
                                                       gates=[{"what": "output_0 top-1 agreement 95.8% < 99%"}])
    (refused,) = [c for c in cards_from_report(report, Manifest.from_json(json.dumps(failed).encode()))
                  if c["artifact"]["key"] == "tflite"]
    assert "FAILED: this artifact failed its gates at packaging (output_0 top-1 agreement 95.8% < 99%)" in \
        markdown(refused)
    agreement = card["accuracy"]["agreement_with_float"]  # with labels too: how it follows float here
    assert agreement["float_artifact"] == speed["float_artifact"] and agreement["samples"] == 360
    (output,) = agreement["outputs"].values()
    assert output["task"]["evidence"][0]["n"] == 360 and agreement["passed"] is True


def test_a_model_accuracy_cannot_judge_gets_each_outputs_agreement_with_float_on_the_device(heads_package, tmp_path):
    """Two heads (class scores and a value) and data without labels: no accuracy, but each output
    judged against the float fallback here by its kind's gate, beside packaging's numbers."""
    data = heads_package.parent.parent / "heads_eval.npz"
    result = edgekit_cli("card", heads_package, "--artifact", "onnx", "--eval", data, "-o", tmp_path, *QUICK, "--no-launch",
                         "--report", tmp_path / "run.json")
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = tmp_path.glob("heads.onnx*.card.json")  # the ONNX scheme this CPU runs best (onnx, onnx-u8s8)
    card = read_card(path)
    _check(json.loads(SCHEMA_FILE.read_text()), card, "card")
    assert card["accuracy"]["on_device"] is None and "one-output classifiers" in card["accuracy"]["not_measured_because"]
    agreement = card["accuracy"]["agreement_with_float"]
    assert agreement["float_artifact"] == "onnx-float32" and agreement["samples"] == 200
    kind, age = agreement["outputs"]["kind"], agreement["outputs"]["age"]
    assert kind["kind"] == "classes" and kind["task"]["evidence"][0]["n"] == 200 and kind["sqnr_db"] > 20
    assert kind["at_packaging"]["sqnr_db"] > 20 and "top1_agreement" in kind["at_packaging"]["values"]
    assert age["task"] is None and age["sqnr_floor_db"] == 20 and age["sqnr_passed"] is (age["sqnr_db"] >= 20)
    text = markdown(card)
    assert "| kind vs onnx-float32 here | top1 agreement " in text and "(packaging " in text
    assert "| age vs onnx-float32 here | SQNR " in text and "gate SQNR >= 20 dB" in text


def test_a_run_under_a_cpu_hog_says_so_first_and_unlike_cards_are_tabled_with_a_warning(digits_all_package,
                                                                                     tmp_path):
    hog = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 60\nwhile time.time() < end: pass"])
    try:
        _, card = _card(digits_all_package, tmp_path, "--artifact", "tflite", "--threads", "1")
    finally:
        hog.kill()
        hog.wait()
    assert card["warnings"] and card["warnings"][0].startswith("SHARED: "), card["warnings"]
    text = markdown(card)
    title, blank, first = text.splitlines()[:3]
    assert title.startswith("# digits · tflite on ") and first.startswith("> **Warning:** SHARED: ")
    idle = copy.deepcopy(card)  # the same card as an idle run would have it
    idle["warnings"], idle["conditions"]["shared"], idle["device"]["name"] = [], False, "other"
    table = side_by_side([card, idle])
    assert table.startswith("> **Warning:** these cards were measured under unlike conditions")
    assert "| measurement | " in table and " · tflite | other · tflite |" in table
    assert not side_by_side([card, card]).startswith("> **Warning:**")  # alike conditions: no warning
    both = tmp_path / "both"
    both.mkdir()
    for name, data in (("a.card.json", card), ("b.card.json", idle)):
        (both / name).write_text(json.dumps(data))
    shown = edgekit_cli("compare", both)
    assert shown.returncode == 0 and "unlike conditions" in shown.stdout and "other · tflite" in shown.stdout
    for given, page in (((both,), "cards.html"), ((both, tmp_path / "run.json"), "report.html")):
        written = edgekit_cli("compare", *given, "--html", tmp_path / page)  # the HTML report's card section
        assert written.returncode == 0, written.stderr[-2000:]
        html = (tmp_path / page).read_text()
        assert "<h2>Latency cards (one artifact on one device each)</h2>" in html and "other · tflite</th>" in html
        assert '<p class="warning"><strong>Warning:</strong> these cards were measured under unlike conditions' in html
        assert "SHARED: " in html  # each card's own warnings under the table
    assert "<h2>Every measured configuration</h2>" in html  # with a report: its sections and the cards


def test_the_markdown_renders_readably_on_a_phone_and_a_desktop(digits_all_package, tmp_path):
    import markdown as renderer

    _, card = _card(digits_all_package, tmp_path, "--artifact", "tflite", "--no-launch")
    body = renderer.markdown(markdown(card), extensions=["tables"])
    # what a Markdown viewer gives a table (GitHub: a scrolling block), and a script that measures
    page = tmp_path / "card.html"
    page.write_text(
        '<!doctype html><html><head><meta name="viewport" content="width=device-width, initial-scale=1">'
        "<style>body{font:16px sans-serif;margin:8px} table{display:block;overflow:auto;border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}</style></head><body>" + body +
        "<script>const cells=[...document.querySelectorAll('tbody tr td:first-child')];"
        "const w=Math.min(...cells.map(c=>c.getBoundingClientRect().width));"
        "const f=Math.min(...cells.map(c=>parseFloat(getComputedStyle(c).fontSize)));"
        "document.body.dataset.labels=cells.length;document.body.dataset.narrowest=Math.round(w);"
        "document.body.dataset.font=f;document.body.dataset.pageOverflow="
        "(document.documentElement.scrollWidth>window.innerWidth);</script></body></html>")
    browser = _required_chromium()
    for width in (390, 1280):
        dom = subprocess.run([browser, *_browser_flags(tmp_path), f"--window-size={width},900", "--dump-dom",
                              page.as_uri()], capture_output=True, text=True, timeout=120).stdout
        assert 'data-labels="' in dom, dom[-2000:]
        attrs = dict(part.split('="') for part in dom.split("<body", 1)[1].split(">", 1)[0].split('" ') if '="' in part)
        labels = {k.strip(): v.strip('"') for k, v in attrs.items()}
        assert int(labels["data-labels"]) >= 12 and float(labels["data-font"]) >= 14
        assert int(labels["data-narrowest"]) >= 60, (width, labels)  # a label column one can read
        assert labels["data-page-overflow"] == "false", (width, labels)  # the page itself never scrolls sideways


def test_single_stream_counts_each_configurations_own_query_time(digits_package):
    """Two artifacts interleaved shared the wall clock: under MLPerf's rule each needs its own
    queries' time (the sum of its latencies), and a long run's report keeps a stride of them."""
    from edgekit.bench.harness import MAX_STORED_SAMPLES, BenchOptions, bench
    from edgekit.manifest import Manifest

    keys = [a.key for a in Manifest.from_json((digits_package / "manifest.json").read_bytes()).artifacts]
    options = BenchOptions(runs=1024, min_seconds=1.0, warmup=3, threads=1, single_stream=True, launch=False)
    report = bench(str(digits_package), options, keys)
    assert report["settings"]["single_stream"] is True and len(report["results"]) == len(keys) >= 2
    for result in report["results"]:
        latency = result["latency"]
        assert latency["count"] >= 1024 and latency["query_s"] >= 1.0
        assert len(latency["samples_ms"]) <= MAX_STORED_SAMPLES < latency["count"]  # a 0.02 ms model: >40k queries


def test_card_refuses_labels_outside_the_models_classes_as_packaging_does(digits_package, tmp_path):
    import numpy as np

    with np.load(str(EVAL)) as data:
        np.savez(tmp_path / "shifted.npz", x=data["x"][:50], y=data["y"][:50] + 20)
    result = edgekit_cli("card", digits_package, "--eval", tmp_path / "shifted.npz", "-o", tmp_path / "cards", *QUICK,
                         "--no-launch")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "class targets range 20..29 but the model outputs 10 classes" in result.stderr
    assert "-100.00 pp" not in result.stdout + result.stderr


def test_card_writes_only_inside_its_folder_offers_only_its_options_and_caps_runs(digits_package, tmp_path):
    here = tmp_path / "cwd"
    here.mkdir()
    result = edgekit_cli("card", digits_package, "-o", tmp_path / "cards", *QUICK, "--no-launch", cwd=here)
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(here.iterdir()) == []  # the report beside the cards, not in the current directory
    assert list((tmp_path / "cards").glob("*.bench.json")) and list((tmp_path / "cards").glob("*.card.md"))
    assert all("Single-stream rule" not in p.read_text() for p in (tmp_path / "cards").glob("*.card.md"))
    shown = edgekit_cli("card", "--help").stdout
    assert "--output DIR" in shown and not any(f"{flag} " in shown for flag in ("--serve", "--tune", "--stream",
                                                                                  "--top-k"))
    refused = edgekit_cli("card", digits_package, "--serve")
    assert refused.returncode == 2 and "unrecognized arguments: --serve" in refused.stderr
    endless = edgekit_cli("card", digits_package, "--runs", "99999999999999999999", "-o", tmp_path / "cards")
    assert endless.returncode == 2 and "--runs: must be at most 10,000,000" in endless.stderr
