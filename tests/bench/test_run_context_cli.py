"""`--bench` writes the run context, launch times and placement; `--fail-on-fallback`; and a
sustained run with a CPU hog started halfway shows the slowdown and the compare warning."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgekit.bench.compare import compare
from edgekit.bench.report import SCHEMA_FILE, read_report
from tests.bench.test_bench_cli import _check_required, bench

pytestmark = pytest.mark.slow

SPIN = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\nwhile time.monotonic() < end: pass\n"


def matmul_model(path: Path, width: int = 768, layers: int = 6) -> Path:
    """A float MLP of a few milliseconds per call: long enough that sharing the cores shows in its
    median (a 20 µs model runs between the scheduler's time slices and its median hardly moves)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights, previous = [], [], "x"
    for i in range(layers):
        weights.append(numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                                               f"w{i}"))
        output = "y" if i == layers - 1 else f"r{i}"
        nodes += [helper.make_node("MatMul", [previous, f"w{i}"], [f"h{i}"]), helper.make_node("Relu", [f"h{i}"], [output])]
        previous = output
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, width])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_report_carries_the_run_context_launch_times_and_placement(digits_package, tmp_path):
    report_path = tmp_path / "r.json"
    result = bench(digits_package, "--bench", "--runs", "20", "--min-seconds", "0.2", "--report", report_path)
    assert result.returncode == 0, result.stderr
    report = read_report(report_path)
    schema = json.loads(SCHEMA_FILE.read_text())
    _check_required(schema, report, "report", schema["$defs"])
    assert report["schema_version"] == 2
    context = report["context"]
    for signal in ("cpu_frequency", "power", "raspberry_pi", "jetson", "accelerator_clocks"):
        assert isinstance(context[signal], dict) and context[signal], signal  # a value, or why it is unreadable
    assert context["versions"]["ai_edge_litert"] and context["during"].get("other_cores") is not None
    assert set(context["conditions"]) >= {"throttled", "governor", "other_cores", "power_source", "power_mode"}
    (entry,) = report["results"]
    first, again = entry["launch"]["first_launch"], entry["launch"]["relaunch"]
    assert first["process_ms"] > first["load_ms"] > 0 and again["process_ms"] > 0 and first["first_inference_ms"] > 0
    assert first["cache_hit"] is None or first["cache_hit"] is False
    placement = entry["placement"]
    assert placement["partitions"] >= 1 and sum(placement["by_target"].values()) == placement["ops"] > 0
    assert entry["rss_after_load_mib"] > 0
    assert "first launch" in result.stdout and "ops by where they ran: XNNPACK" in result.stdout
    assert "conditions:" in result.stdout


def test_fail_on_fallback_exits_3_when_a_requested_provider_is_missing(digits_all_package, tmp_path):
    """The gpu-server profile asks for TensorRT and CUDA; this onnxruntime build has neither: every
    node ran on the CPU, which the report says and --fail-on-fallback turns into exit 3."""
    args = (digits_all_package, "--bench", "--profile", "gpu-server", "--artifact", "onnx", "--runs", "10",
            "--min-seconds", "0", "--no-launch", "--report", tmp_path / "gpu.json")
    result = bench(*args, "--fail-on-fallback")
    assert result.returncode == 3, result.stderr
    assert "error: fallback:" in result.stderr and "TensorrtExecutionProvider" in result.stderr
    assert "Traceback" not in result.stderr
    placement = read_report(tmp_path / "gpu.json")["results"][0]["placement"]
    assert placement["missing"] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    assert bench(*args).returncode == 0  # without the flag the same run succeeds and only reports it


@pytest.mark.serial
def test_sustained_run_with_a_cpu_hog_started_halfway(tmp_path):
    model = matmul_model(tmp_path / "mlp.onnx")
    quiet, hogged = tmp_path / "quiet.json", tmp_path / "hogged.json"
    assert bench(model, "--bench", "--sustained", "6s", "--window", "1", "--threads", "2", "--no-launch",
                 "--device-name", "quiet", "--report", quiet).returncode == 0
    command = [sys.executable, "-m", "edgekit.run", str(model), "--bench", "--sustained", "12s", "--window", "1",
               "--threads", "2", "--no-launch", "--device-name", "hogged", "--report", str(hogged)]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(6)
    # four spinning processes, 9 s at most: under fair sharing they take a clear share of the cores from
    # the run's two threads whether the machine was idle (0 -> ~1.3 other cores) or already running another
    # job (~0.7 -> ~1.4), so the rise the run sees never hides under the load that was there before them
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN, "9"]) for _ in range(4)]
    try:
        out, err = run.communicate(timeout=120)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert run.returncode == 0, err
    report = read_report(hogged)
    sustained = report["results"][0]["sustained"]
    assert len(sustained["windows"]) >= 10 and sustained["edge_s"] == 3
    assert sustained["last"]["p50"] > 1.2 * sustained["first"]["p50"], sustained  # the slowdown, over time
    assert sustained["verdict"]["verdict"] == "slowed down" and "contention" in sustained["verdict"]["reason"]
    points = report["context"]["timeline"]
    early = [p["other_cores"] for p in points if p["other_cores"] is not None and p["t_s"] < 5]
    late = [p["other_cores"] for p in points if p["other_cores"] is not None and p["t_s"] > 8]
    # the hogs are seen, relative to what ran before them: under fair sharing they take part of what
    # the machine leaves (all of two idle cores; on a machine already running another job, about a
    # third of a core more: measured 1.00 -> 1.38 beside a 2-worker test run), never nothing
    assert statistics.mean(late) > statistics.mean(early) + 0.15, points
    assert "slowed down over the run" in err and "SHARED" in err
    warnings = compare([str(quiet), str(hogged)]).warnings
    # the comparison says the hogged run's figures include contention: against the quiet run's average load
    # on an idle machine, or (where another job kept both runs busy, so their averages are close) by the
    # hogged run's own slowdown and the load in its last windows
    assert any("hogged ran while other processes used" in w or ("hogged" in w and "slowed down during its own "
               "sustained run" in w and "other processes used" in w) for w in warnings), warnings
    assert any("slowed down during its own sustained run" in w for w in warnings), warnings
