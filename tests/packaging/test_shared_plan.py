"""One search per model on the INT8 simulation (``packaging/shared_plan.py``): its plan built by
every format first, each judged on its own artifact, the simulated and real margins recorded."""

from __future__ import annotations

import json

import pytest

from tests.conftest import edgekit_cli, verdict_model


@pytest.mark.slow
def test_one_simulated_search_gives_the_plan_every_format_builds(tmp_path_factory, tmp_path):
    """outlier_cnn: two channels of conv2's output 25x the rest; plain INT8 fails its 99% gate.
    The simulation finds the tensor's writer and reader in float; each format builds that plan
    first and records the simulated margins beside its own."""
    model = verdict_model(tmp_path_factory, "outlier_cnn")
    result = edgekit_cli("package", model / "outlier_cnn.keras", "-c", model / "calibration.npz", "--eval",
                         model / "eval.npz", "--format", "tflite", "--format", "onnx", "--no-also-float", "-o", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in result.stdout.splitlines() if line.startswith("INT8 simulation: --keep-float")]
    assert said and "passes every gate" in said[0], result.stdout[-3000:]
    manifest = json.loads((tmp_path / "outlier_cnn.edgekit" / "manifest.json").read_text())
    mains = [a for a in manifest["artifacts"] if not a.get("variant")]
    assert {a["format"] for a in mains} == {"tflite", "onnx"}
    for artifact in mains:
        simulation = artifact["details"]["simulation"]
        assert simulation["passed"] and set(simulation["plan"]) >= {"conv2", "conv3"}
        assert simulation["tries"] <= 60 and "real" in simulation and "simulated" in simulation
        kept = artifact["details"]["precision_plan"]["layers"]
        assert set(simulation["plan"]) <= set(kept)  # built from the simulated plan; a real miss only adds layers
        tries = [t for t in manifest["validation"]["artifacts"][artifact["format"]].get("auto_fix", [])
                 if t.get("stage") not in ("confirmation", "speed")]
        assert len(tries) <= 6  # a few real tries at most after the simulated plan
