"""Report files, `edgekit compare` (tables, baselines, regression gating, HTML) and pushing reports."""

from __future__ import annotations

import copy
import http.server
import json
import os
import re
import shutil
import subprocess
import threading

import numpy as np
import pytest

from edgekit.bench.compare import compare
from edgekit.bench.report import SCHEMA_FILE, ReportError, push, read_report, to_csv, write_report
from edgekit.errors import EdgekitError
from tests.conftest import run_cli


QUIET = {"throttled": False, "throttle_reasons": [], "max_c": 52.0, "governor": "performance", "capped": False,
         "other_cores": 0.02, "other_share": 0.005, "shared": False, "power_source": "mains", "power_mode": None,
         "under_voltage": False}


def make_report(device="pi5", model="digits", scale=1.0, seed=0, artifacts=("tflite", "onnx"), accuracy=0.985,
                conditions=None, versions=None):
    """A schema 1 report, or with ``conditions`` a schema 2 one carrying that run context."""
    rng = np.random.default_rng(seed)
    results = []
    for i, artifact in enumerate(artifacts):
        samples = (scale * (1 + 0.5 * i) * rng.lognormal(0, 0.08, 300)).round(6).tolist()
        x = np.asarray(samples)
        results.append({
            "config": {"artifact": artifact, "backend": "litert" if artifact == "tflite" else "onnxruntime",
                       "precision": "int8", "threads": 4, "batch": 1},
            "size_bytes": 24000, "load_ms": {"total_s": 12.0}, "first_inference_ms": 2.0,
            "warmup": {"runs": 10, "total_ms": 1.0},
            "latency": {"unit": "ms", "count": 300, "p50": float(np.median(x)), "p90": float(np.percentile(x, 90)),
                        "p95": float(np.percentile(x, 95)), "p99": float(np.percentile(x, 99)), "mean": float(x.mean()),
                        "std": float(x.std()), "min": float(x.min()), "max": float(x.max()), "cv": 0.08,
                        "samples_ms": samples},
            "throughput": {"batch": 1, "per_s": 1000 / float(x.mean())}, "end_to_end": None,
            "accuracy": {"samples": 360, "accuracy": accuracy}, "peak_rss_mib": 45.0, "warnings": [],
        })
    return {"schema": "edgekit.bench.report", "schema_version": 1, "created": "2026-11-21T00:00:00Z",
            "edgekit_version": "0.1.0", "model": {"name": model},
            "device": {"name": device, "arch": "aarch64", "cpu": {"model": "x"}, "cores": 4, "os": "Linux",
                       "python": "3.11", "libraries": {}},
            "settings": {}, "thermal": {"before": {}, "after": {}, "throttled": False, "reasons": []},
            "results": results, "warnings": []} | ({} if conditions is None else {
                "schema_version": 2, "context": {"conditions": QUIET | conditions,
                                                 "versions": versions or {"onnxruntime": "1.22.0"}}})


@pytest.fixture
def fleet(tmp_path):
    folder = tmp_path / "fleet"
    folder.mkdir()
    write_report(make_report("pi5", scale=2.0, seed=1), folder / "pi5.bench.json")
    write_report(make_report("orin", scale=0.5, seed=2), folder / "orin.bench.json")
    write_report(make_report("server", scale=0.25, seed=3), folder / "server.bench.json")
    return folder


def test_bad_report_files_are_named(tmp_path):
    cases = {
        "plain.json": json.dumps({"hello": 1}),
        "truncated.json": json.dumps(make_report())[:500],
        "future.json": json.dumps(make_report() | {"schema_version": 99}),
        "empty.json": json.dumps(make_report() | {"results": []}),
    }
    expected = {"plain.json": "not an edgekit benchmark report", "truncated.json": "not JSON or truncated",
                "future.json": "newer than this edgekit reads", "empty.json": "has no results"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ReportError, match=expected[name]) as info:
            read_report(tmp_path / name)
        assert name in info.value.message


def test_compare_a_fleet_folder_with_baseline_and_csv(fleet, tmp_path, capsys):
    (fleet / "notes.json").write_text("{}")  # not a report: skipped with a warning
    code, out, err = run_cli(capsys, "compare", fleet, "--baseline", "pi5", "--csv", tmp_path / "s.csv")
    assert code == 0, err
    assert "warning: skipped" in err and "notes.json" in err
    assert "orin" in out and "server" in out
    comparison = compare([str(fleet)], baseline="pi5")
    speedups = {r.device: round(r.speedup, 1) for r in comparison.rows if r.config["artifact"] == "tflite" and r.speedup}
    assert speedups == {"orin": pytest.approx(4.0, rel=0.1), "server": pytest.approx(8.0, rel=0.1)}
    assert {r.verdict["verdict"] for r in comparison.rows if r.device != "pi5"} == {"improvement"}
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert rows[0].startswith("device,model,artifact") and len(rows) == 1 + 6
    code, _, err = run_cli(capsys, "compare", fleet, "--strict")
    assert code == 1 and "notes.json: not an edgekit benchmark report" in err


def test_regression_gate_uses_the_raw_samples(tmp_path, capsys):
    write_report(make_report("ci", seed=1), tmp_path / "before.json")
    write_report(make_report("ci", seed=2), tmp_path / "noise.json")
    write_report(make_report("ci", seed=3, scale=1.3), tmp_path / "slower.json")
    code, _, err = run_cli(capsys, "compare", tmp_path / "before.json", tmp_path / "noise.json",
                           "--baseline", "before", "--fail-on-regression", "5")
    assert code == 0, err
    code, _, err = run_cli(capsys, "compare", tmp_path / "before.json", tmp_path / "slower.json",
                           "--baseline", "before", "--fail-on-regression", "5")
    assert code == 1 and "REGRESSION:" in err and "% slower than" in err


def _wide_report(device: str, scale: float, seed: int) -> dict:
    """A normal run on a busy machine: IQR / median around 50%."""
    report = make_report(device, scale=scale, seed=seed, artifacts=("tflite",))
    samples = (scale * np.random.default_rng(seed).lognormal(0, 0.4, 3000)).round(6).tolist()
    report["results"][0]["latency"] |= {"samples_ms": samples, "p50": float(np.median(samples))}
    return report


def test_two_runs_of_one_package_are_no_change(tmp_path, capsys):
    """Back-to-back runs whose medians drift 3% with spreads near 50% were called "improvement"
    with the former zero threshold."""
    write_report(_wide_report("vm", 1.0, 1), tmp_path / "first.json")
    write_report(_wide_report("vm", 0.97, 2), tmp_path / "second.json")
    comparison = compare([str(tmp_path / "first.json"), str(tmp_path / "second.json")])
    (row,) = [r for r in comparison.rows if r.report == "second"]
    assert row.verdict["verdict"] == "no change" and row.verdict["threshold_pct"] == 5.0
    code, out, _ = run_cli(capsys, "compare", tmp_path / "first.json", tmp_path / "second.json", "--markdown")
    assert code == 0 and "no change (" in out and "improvement" not in out
    write_report(_wide_report("vm", 0.6, 3), tmp_path / "faster.json")  # a real difference is still stated
    comparison = compare([str(tmp_path / "first.json"), str(tmp_path / "faster.json")])
    assert [r.verdict["verdict"] for r in comparison.rows if r.verdict] == ["improvement"]


def test_different_models_are_refused_unless_allowed(tmp_path, capsys):
    write_report(make_report(model="digits"), tmp_path / "a.json")
    write_report(make_report(model="mobilenet_v2"), tmp_path / "b.json")
    code, _, err = run_cli(capsys, "compare", tmp_path / "a.json", tmp_path / "b.json")
    assert code == 1 and "different models (digits, mobilenet_v2)" in err and "--allow-different-models" in err
    code, out, _ = run_cli(capsys, "compare", tmp_path / "a.json", tmp_path / "b.json", "--allow-different-models",
                           "--markdown")
    assert code == 0
    rows = [line for line in out.splitlines() if "/ mobilenet_v2" in line]  # each row says its model
    assert rows and all("regression" not in r and "x |" not in r.split("|")[-3] for r in rows), out  # no speedups
    assert all("another model: no speedup stated" in r for r in rows)
    with pytest.raises(EdgekitError, match="matches no report"):
        compare([str(tmp_path / "a.json")], baseline="nope")


def test_markdown_output_and_csv_export(fleet, capsys):
    code, out, _ = run_cli(capsys, "compare", fleet, "--markdown")
    assert code == 0 and out.startswith("| device | artifact |")
    rows, matrix, conditions = out.split("\n\n", 2)
    assert conditions.startswith("Conditions") and "throttling could not be read on any" in out
    assert rows.count("\n") == 2 + 6 - 1  # header, separator, one row per device x artifact
    assert matrix.startswith("| configuration | orin | pi5 | server |") and len(matrix.splitlines()) == 2 + 2
    assert "(baseline)" in matrix.splitlines()[2].split("|")[2]  # the first file is the default baseline
    assert to_csv([make_report()]).count("\n") == 3


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _required_chromium() -> str:
    browser = _chromium()
    if browser is None:
        if os.environ.get("EDGEKIT_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is required here (EDGEKIT_REQUIRE_CHROMIUM=1) but not installed")
        pytest.skip("chromium not installed (Debian package chromium); CI installs it")
    return browser


def _browser_flags(tmp_path) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}"]


def test_html_report_renders_its_charts_in_headless_chromium(fleet, tmp_path, capsys):
    html_path = tmp_path / "fleet.html"
    code, out, _ = run_cli(capsys, "compare", fleet, "--html", html_path)
    assert code == 0 and f"html: {html_path}" in out
    text = html_path.read_text()
    assert "<script src" not in text and "http" not in text.split("<body", 1)[1]  # self-contained
    for chart in ("latency-distribution", "p50-p90-bars", "accuracy-vs-latency"):
        assert f'data-chart="{chart}"' in text
    browser = _required_chromium()
    flags = _browser_flags(tmp_path)
    dom = subprocess.run([browser, *flags, "--dump-dom", html_path.as_uri()], capture_output=True, text=True,
                         timeout=120)
    match = re.search(r'data-charts-rendered="(\d+)"', dom.stdout)
    assert match, dom.stderr[-2000:]
    assert int(match.group(1)) == 3
    assert dom.stdout.count('class="box"') == 6 and dom.stdout.count('class="point"') == 6
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *flags, "--window-size=1000,1400", f"--screenshot={shot}", html_path.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000


def test_two_models_keep_their_own_labels_and_matrix_rows(tmp_path, capsys):
    """Two models measured with one configuration on one device: every label names its model and
    the device matrix keeps one row per model (they were merged under one label)."""
    write_report(make_report("vm", model="digits", seed=1, artifacts=("tflite",)), tmp_path / "a.json")
    write_report(make_report("vm", model="digits_torch", seed=2, artifacts=("tflite",)), tmp_path / "b.json")
    html_path = tmp_path / "two.html"
    code, out, err = run_cli(capsys, "compare", tmp_path / "a.json", tmp_path / "b.json", "--allow-different-models",
                             "--html", html_path)
    assert code == 0, err
    comparison = compare([str(tmp_path / "a.json"), str(tmp_path / "b.json")], allow_different_models=True)
    labels = [r.label for r in comparison.rows]
    assert labels == ["vm digits tflite/litert t4 b1", "vm digits_torch tflite/litert t4 b1"]
    browser = _required_chromium()
    dom = subprocess.run([browser, *_browser_flags(tmp_path), "--dump-dom", html_path.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    assert 'data-charts-rendered="' in dom
    for label in labels:
        assert f"<title>{label}</title>" in dom  # each chart row names its model
    matrix = dom.split("p50 per configuration and device")[1].split("</table>")[0]
    assert matrix.count("<tr>") == 1 + 2 and "digits tflite/litert" in matrix and "digits_torch tflite/litert" in matrix


class _Collector(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Collector.received.append({"path": self.path, "type": self.headers["Content-Type"], "body": json.loads(body)})
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_push_sends_the_report_to_a_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        report = make_report()
        status = push(report, f"http://127.0.0.1:{server.server_port}/v2/reports")
        assert status == 201
        (received,) = _Collector.received
        assert received["path"] == "/v2/reports" and received["type"] == "application/json"
        assert received["body"] == json.loads(json.dumps(report))
    finally:
        server.shutdown()
    with pytest.raises(ReportError, match="pushing the report to http://127.0.0.1:9/v2/reports failed"):
        push(report, "http://127.0.0.1:9/v2/reports", timeout=2)


def test_schema_file_requires_what_reports_carry():
    schema = json.loads(SCHEMA_FILE.read_text())
    report = make_report(conditions={})
    assert set(schema["required"]) <= set(report)
    assert set(schema["$defs"]["result"]["required"]) <= set(report["results"][0])
    copy.deepcopy(report)


def _config_report(device: str, scale: float, seed: int) -> dict:
    """One report with batch 1 and batch 8 of the same artifact (batch 8 is ~6x slower per call)."""
    report = make_report(device, scale=scale, seed=seed, artifacts=("tflite",))
    batch8 = copy.deepcopy(report["results"][0])
    batch8["config"]["batch"] = 8
    samples = [6 * v for v in batch8["latency"]["samples_ms"]]
    batch8["latency"] |= {"samples_ms": samples, "p50": float(np.median(samples))}
    report["results"].append(batch8)
    return report


def test_compare_matches_configurations_never_the_baselines_first_row(tmp_path):
    write_report(_config_report("pi5", 2.0, 1), tmp_path / "pi5.json")
    write_report(_config_report("orin", 0.5, 2), tmp_path / "orin.json")
    comparison = compare([str(tmp_path / "pi5.json"), str(tmp_path / "orin.json")], baseline="pi5")
    speedups = {(r.device, r.config["batch"]): r.speedup for r in comparison.rows}
    assert speedups[("pi5", 1)] is None and speedups[("pi5", 8)] is None  # the baseline itself
    assert speedups[("orin", 1)] == pytest.approx(4.0, rel=0.1)
    assert speedups[("orin", 8)] == pytest.approx(4.0, rel=0.1)  # batch 8 against batch 8, not 0.67x


def test_a_configuration_the_baseline_lacks_gets_no_speedup(tmp_path, capsys):
    write_report(make_report("pi5", artifacts=("tflite",)), tmp_path / "pi5.json")
    write_report(make_report("orin", artifacts=("tflite", "onnx"), seed=4), tmp_path / "orin.json")
    comparison = compare([str(tmp_path / "pi5.json"), str(tmp_path / "orin.json")], baseline="pi5")
    onnx = next(r for r in comparison.rows if r.config["artifact"] == "onnx")
    assert onnx.speedup is None and onnx.verdict is None
    code, out, _ = run_cli(capsys, "compare", tmp_path / "pi5.json", tmp_path / "orin.json", "--markdown")
    assert code == 0 and "no matching baseline configuration" in out
    assert "| configuration | pi5 | orin |" in out and "(baseline)" in out and "not measured" in out


def test_reports_with_non_numeric_samples_are_named(tmp_path, capsys):
    report = make_report()
    report["results"][0]["latency"]["samples_ms"][3] = "fast"
    (tmp_path / "odd.json").write_text(json.dumps(report))
    with pytest.raises(ReportError, match=r"samples_ms holds 'fast'"):
        read_report(tmp_path / "odd.json")
    code, _, err = run_cli(capsys, "compare", tmp_path / "odd.json", "--strict")
    assert code == 1 and "internal error" not in err and "holds 'fast'" in err
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ReportError, match="nested too deeply"):
        read_report(tmp_path / "deep.json")


def test_unwritable_compare_outputs_are_storage_errors(fleet, readonly_dir, capsys):
    for flag in ("--html", "--csv"):
        code, _, err = run_cli(capsys, "compare", fleet, flag, readonly_dir / "out")
        assert code == 1 and "read-only" in err and "internal error" not in err, err


def _rendered_layout(browser: str, flags: list[str], html_path, width: int, height: int) -> dict:
    """Each SVG text's box against its chart's box, measured by the browser at one window size."""
    probe = html_path.with_name(f"probe-{width}.html")
    probe.write_text(html_path.read_text().replace("</body>", """<script>
const out = {clipped: [], axes: {}};
for (const svg of document.querySelectorAll("svg.chart")) {
  const box = svg.getBoundingClientRect();
  out.axes[svg.dataset.chart] = svg.querySelectorAll("text").length;
  for (const t of svg.querySelectorAll("text")) {
    const r = t.getBoundingClientRect();
    if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
      out.clipped.push(svg.dataset.chart + ": " + t.textContent);
  }
}
document.body.dataset.layout = JSON.stringify(out);
</script></body>"""))
    dom = subprocess.run([browser, *flags, f"--window-size={width},{height}", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    match = re.search(r'data-layout="([^"]*)"', dom.stdout)
    assert match, dom.stderr[-2000:]
    import html as html_lib

    return json.loads(html_lib.unescape(match.group(1)))


def test_html_report_is_readable_at_common_window_sizes(tmp_path, capsys):
    """Two devices with very different speeds, long labels, one accuracy point: every label is inside
    its chart at laptop, desktop and phone widths; the latency axis is logarithmic and labelled."""
    slow = make_report("raspberry-pi-4-model-b-rev-1.4-in-the-lab", scale=8.0, seed=1, artifacts=("tflite",))
    fast = make_report("gpu-server", scale=0.05, seed=2, artifacts=("tflite",), accuracy=None)
    slow["results"][0]["latency"]["samples_ms"][0] = 11.0 * 8  # one slow whisker
    write_report(slow, tmp_path / "pi.json")
    write_report(fast, tmp_path / "gpu.json")
    html_path = tmp_path / "two.html"
    code, _, err = run_cli(capsys, "compare", tmp_path / "pi.json", tmp_path / "gpu.json", "--html", html_path)
    assert code == 0, err
    text = html_path.read_text()
    assert "latency, ms (logarithmic)" in text and 'class="matrix"' in text
    assert text.count('class="point"') == 1
    browser = _required_chromium()
    flags = _browser_flags(tmp_path)
    for width, height in ((1366, 768), (1920, 1080), (390, 844)):
        layout = _rendered_layout(browser, flags, html_path, width, height)
        assert layout["clipped"] == [], (width, layout["clipped"])
        assert all(count >= 4 for count in layout["axes"].values()), layout["axes"]  # tick labels on every axis
        shot = tmp_path / f"shot-{width}.png"
        subprocess.run([browser, *flags, f"--window-size={width},{height}", f"--screenshot={shot}",
                        html_path.as_uri()], capture_output=True, timeout=120)
        assert shot.exists() and shot.stat().st_size > 10_000


def test_a_device_baseline_with_two_reports_compares_the_newer_with_the_oldest(tmp_path, capsys):
    """An A/B run on one board: both reports carry its device name. Naming the device as the
    baseline took every row of both as baselines and compared nothing (exit 0 on a 55% slowdown)."""
    before = make_report("board", seed=1)
    after = make_report("board", seed=2, scale=1.55)
    after["created"] = "2026-11-22T00:00:00Z"
    write_report(after, tmp_path / "b-after.json")  # listed first: the date, not the order, picks the baseline
    write_report(before, tmp_path / "a-before.json")
    code, _, err = run_cli(capsys, "compare", tmp_path / "b-after.json", tmp_path / "a-before.json",
                           "--baseline", "board", "--fail-on-regression", "5")
    assert code == 1 and "REGRESSION:" in err and "the oldest, a-before" in err


def test_a_regression_gate_that_compared_nothing_fails(tmp_path, capsys):
    write_report(make_report("pi5", seed=1, artifacts=("tflite",)), tmp_path / "base.json")
    write_report(make_report("pi5", seed=2, artifacts=("onnx",)), tmp_path / "other.json")
    code, _, err = run_cli(capsys, "compare", tmp_path / "base.json", tmp_path / "other.json",
                           "--baseline", "base", "--fail-on-regression", "5")
    assert code != 0 and "compared nothing" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "compare", tmp_path / "base.json", "--fail-on-regression", "5")
    assert code != 0 and "compared nothing" in err


def test_compare_warns_when_conditions_differ(tmp_path, capsys):
    """Throttled against cool, powersave against performance, a shared CPU against an idle one,
    battery against mains, another runtime version: each is said, naming both devices."""
    write_report(make_report("pi5-a", seed=1, conditions={}), tmp_path / "a.json")
    write_report(make_report("pi5-b", seed=2, conditions={
        "throttled": True, "throttle_reasons": ["Raspberry Pi reports currently throttled (after the run)"],
        "governor": "powersave", "other_cores": 1.1, "other_share": 0.28, "shared": True, "power_source": "battery"},
        versions={"onnxruntime": "1.20.1"}), tmp_path / "b.json")
    comparison = compare([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    text = "\n".join(comparison.warnings)
    assert "pi5-b (b) was throttled during its run (Raspberry Pi reports currently throttled" in text
    assert "pi5-a (a) ran with CPU governor performance, pi5-b (b) with powersave" in text
    assert "pi5-b (b) ran while other processes used 1.10 cores (28% of its CPU time), pi5-a (a) 0.02" in text
    assert "power source mains" in text and "onnxruntime 1.22.0 vs 1.20.1" in text
    code, out, err = run_cli(capsys, "compare", tmp_path / "a.json", tmp_path / "b.json", "--markdown")
    assert code == 0 and err.count("WARNING: conditions differ:") == len(comparison.warnings) == 5
    assert "Conditions (read before trusting a speedup):" in out


def test_same_conditions_warn_about_nothing_and_old_reports_are_unknown(tmp_path):
    write_report(make_report("a", seed=1, conditions={}), tmp_path / "a.json")
    write_report(make_report("b", seed=2, conditions={"other_cores": 0.1}), tmp_path / "b.json")
    assert compare([str(tmp_path / "a.json"), str(tmp_path / "b.json")]).warnings == []
    write_report(make_report("old", seed=3), tmp_path / "old.json")  # schema 1: no run context
    warnings = compare([str(tmp_path / "a.json"), str(tmp_path / "old.json")]).warnings
    assert warnings == ["old: throttling could not be read there (no thermal zone or firmware flags): it cannot be "
                        "ruled out"]
    upgraded = read_report(tmp_path / "old.json")
    assert upgraded["context"]["unreadable"].startswith("schema 1 report")
    assert upgraded["context"]["conditions"]["other_cores"] is None


def _sustained(report: dict, slow_from: float, factor: float, busy: float) -> dict:
    """Give every result 60 s of windows that slow by ``factor`` from ``slow_from`` s, and the
    report a context timeline with other processes at ``busy`` cores from then on."""
    for result in report["results"]:
        base = result["latency"]["p50"]
        windows = [{"t_s": float(t), "count": 100, "p50": base * (factor if t >= slow_from else 1.0),
                    "p90": base * 1.2, "max": base * 2} for t in range(0, 60, 2)]
        result["sustained"] = {"duration_s": 60.0, "window_s": 2.0, "edge_s": 15.0, "windows": windows,
                               "first": {"p50": base, "count": 700, "span": "first 15 s"},
                               "last": {"p50": base * factor, "count": 700, "span": "last 15 s"},
                               "change_pct": round(100 * (factor - 1), 1),
                               "verdict": {"verdict": "slowed down" if factor > 1.05 else "steady",
                                           "reason": "contention", "throttled": False}}
    report["context"]["timeline"] = [{"t_s": float(t), "other_cores": busy if t >= slow_from else 0.01}
                                     for t in range(0, 62, 2)]
    return report


def test_html_report_plots_latency_over_time_and_the_context_in_chromium(tmp_path, capsys):
    write_report(_sustained(make_report("quiet", seed=1, conditions={}), 60, 1.0, 0.0), tmp_path / "quiet.json")
    write_report(_sustained(make_report("hogged", seed=2, conditions={"other_cores": 0.6, "other_share": 0.3,
                                                                        "shared": True}), 30, 1.4, 1.2),
                 tmp_path / "hogged.json")
    html_path = tmp_path / "over-time.html"
    code, _, err = run_cli(capsys, "compare", tmp_path / "quiet.json", tmp_path / "hogged.json", "--html", html_path)
    assert code == 0 and "hogged ran while other processes used 0.60 cores" in err
    text = html_path.read_text()
    for chart in ("latency-over-time", "load-over-time"):
        assert f'data-chart="{chart}"' in text
    assert text.count('class="timeline"') == 4 and text.count('class="load"') == 2
    context = text.split('<table class="context">')[1].split("</table>")[0]
    assert context.count("<tr>") == 3 and "performance" in context and "0.60" in context
    assert "+40% slowed down" in text and 'class="conditions"' in text
    browser = _required_chromium()
    dom = subprocess.run([browser, *_browser_flags(tmp_path), "--dump-dom", html_path.as_uri()], capture_output=True,
                         text=True, timeout=120)
    match = re.search(r'data-charts-rendered="(\d+)"', dom.stdout)
    assert match, dom.stderr[-2000:]
    assert int(match.group(1)) == 5  # distribution, bars, accuracy, latency over time, load over time
