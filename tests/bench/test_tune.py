"""Float fallbacks in the package and ``edgekit tune``: every candidate measured on real
artifacts, the decision stored and used by ``load``, and dropped when the package, the device
or a runtime changes. Timings are never asserted: the decision rule is tested on samples whose
order is known, and the measured run only has to pick one of the candidates and stick to it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import edgekit
from edgekit.device.devices import get_profile
from edgekit.bench.tune import decide, thread_counts, tune
from edgekit.device.tuned import Choice, decision_path, manifest_digest
from tests.conftest import EVAL, device_cli, load_npz

pytestmark = pytest.mark.slow


@pytest.fixture
def package(digits_all_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy (tuned choices are stored per package digest) and a private cache."""
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "digits.edgekit"
    shutil.copytree(digits_all_package, copy)
    return copy


def x_eval(n: int = 16) -> np.ndarray:
    return load_npz(EVAL)[0][:n].astype(np.float32) / 255


def test_small_models_get_a_validated_float_fallback_per_format(digits_all_package):
    manifest = edgekit.load(digits_all_package, artifact="onnx").manifest
    keys = [a.key for a in manifest.artifacts]
    assert {"tflite", "onnx", "coreml", "tflite-float16", "onnx-float32", "coreml-float16"} <= set(keys)
    by_key = {a.key: a for a in manifest.artifacts}
    assert by_key["tflite-float16"].path == "tflite/model.float16.tflite"
    assert by_key["onnx-float32"].converter["float_fallback_for"] == "onnx"
    for key in ("tflite-float16", "onnx-float32", "coreml-float16"):
        record = manifest.validation.to_dict()["artifacts"][key]
        assert record["passed"] and record["sqnr_db"] > 40, (key, record)  # float: near-exact
    reference = edgekit.load(digits_all_package, artifact="onnx-float32")
    x = x_eval()
    for name, key in (("tflite-float16", "tflite-float16"), ("tflite", "tflite"), ("onnx-s8s8", "onnx")):
        with edgekit.load(digits_all_package, artifact=name) as model:  # onnx-s8s8: exactly the main ONNX build
            assert model.artifact.key == key
            assert np.abs(model.predict_tensor(x) - reference.predict_tensor(x)).max() < 0.1
    with edgekit.load(digits_all_package, artifact="tflite") as model:  # a format's name: its INT8 artifact
        assert model.artifact.precision.startswith("int8")


def test_no_also_float_packages_int8_only(tmp_path):
    from tests.conftest import CALIBRATION, DIGITS_MODEL

    built = edgekit.package(str(DIGITS_MODEL), str(CALIBRATION), str(tmp_path), formats=["onnx"], also_float=False)
    assert [a.key for a in built.manifest.artifacts] == ["onnx", "onnx-u8s8", "onnx-u8s7"]  # INT8 schemes, no float


def test_untuned_load_runs_the_fastest_passing_artifact_measured_here_and_names_float_ones_on_request(package):
    from edgekit.machine.facts import DeviceFacts
    from edgekit.manifest import Manifest

    manifest = Manifest.from_json((package / "manifest.json").read_text())
    measured = manifest.speed_order(DeviceFacts.read().cpu_kind())
    assert {e.artifact for e in measured} >= {"tflite", "tflite-float16", "onnx-float32"}  # across formats
    assert [e.ms for e in measured] == sorted(e.ms for e in measured)
    with edgekit.load(package) as model:
        assert (model.artifact.key, model.backend.name) == (measured[0].artifact, measured[0].backend)
    from edgekit.errors import PackageError

    with pytest.raises(PackageError, match="has no onnx-float16 artifact"):
        edgekit.load(package, artifact="onnx-float16")


def test_the_decision_rule_needs_a_significant_difference():
    rng = np.random.default_rng(0)
    default, fast, same = Choice("tflite", "litert", 2), Choice("onnx-float32", "onnxruntime", 2), \
        Choice("onnx", "onnxruntime", 1)
    samples = {default: list(rng.normal(1.0, 0.05, 200)), fast: list(rng.normal(0.6, 0.05, 200)),
               same: list(rng.normal(0.995, 0.05, 200))}
    medians = {c: float(np.median(s)) for c, s in samples.items()}
    chosen, evidence = decide(default, medians, samples)
    assert chosen == fast and evidence["ci_high"] < 1
    del samples[fast], medians[fast]
    chosen, evidence = decide(default, medians, samples)  # 0.5% faster within noise: the default stays
    assert chosen == default and "not significantly faster" in evidence["reason"]
    assert thread_counts(1) == [1] and thread_counts(6) == [1, 2, 4, 6] and thread_counts(8) == [1, 2, 4, 8]


def test_tune_measures_every_candidate_and_load_uses_its_choice(package):
    report = tune(str(package), runs=20, min_seconds=0.2, threads=[1, 2])
    tuning = report["tuning"]
    tried = {(c["artifact"], c["backend"], c["threads"]) for c in tuning["candidates"]}
    keys = {a for a, _, _ in tried}
    assert {"tflite", "tflite-float16", "onnx", "onnx-float32"} <= keys  # CoreML does not run on Linux
    assert {"onnx-u8s8", "onnx-u8s7"} <= keys  # every ONNX INT8 scheme the package has
    from edgekit.formats.onnx.openvino import OpenVINOBackend

    if OpenVINOBackend.available():  # the x86 profile lists OpenVINO: measured beside ONNX Runtime and LiteRT
        assert {("onnx", "openvino"), ("onnx-float32", "openvino")} <= {(a, b) for a, b, _ in tried}
    assert {t for _, _, t in tried} == {1, 2}
    decision = Choice(**tuning["decision"])
    assert (decision.artifact, decision.backend, decision.threads) in tried
    assert len(report["results"]) == len(tried)  # a bench report: edgekit compare reads it
    stored = json.loads(Path(tuning["stored"]).read_text())
    assert stored["decision"] == tuning["decision"]
    with edgekit.load(package) as model:
        assert (model.artifact.key, model.backend.name, model.backend.threads) == \
            (decision.artifact, decision.backend, decision.threads)
    with edgekit.load(package, artifact="tflite") as model:  # asking for an artifact overrides tuning
        assert model.artifact.key == "tflite"
    never = replace(get_profile("x86-cpu"), use_tuned=False)
    with edgekit.load(package, profile=never) as model:  # a profile can refuse tuned choices
        assert not model.artifact.is_float and model.artifact.key == "tflite"


def test_the_cli_tunes_once_and_says_what_it_uses(package, tmp_path):
    np.save(tmp_path / "x.npy", x_eval(1))
    first = device_cli(package, "-i", tmp_path / "x.npy", "--tune", "--tune-threads", "1", "--tune-seconds", "0.2",
                       "-v", env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert first.returncode == 0, first.stderr[-2000:]
    assert "tuned: " in first.stderr and "<- chosen" in first.stderr
    assert "using the choice edgekit tune measured fastest" in first.stderr
    again = device_cli(package, "-i", tmp_path / "x.npy", "--tune", "-v", env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert again.returncode == 0 and "tuned: " not in again.stderr  # a choice holds: not measured again
    assert "using the choice edgekit tune measured fastest" in again.stderr
    forgot = device_cli(package, "--forget-tuned", env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert forgot.returncode == 0 and "removed" in forgot.stderr
    assert not decision_path(manifest_digest(package.resolve())).exists()


def _cpuinfo_root(tmp_path: Path, model: str) -> Path:
    root = tmp_path / f"sysroot-{model.replace(' ', '-')}"
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "cpuinfo").write_text(f"processor\t: 0\nmodel name\t: {model}\n")
    return root


def test_a_tuned_choice_is_dropped_when_the_package_device_or_runtime_changes(package, tmp_path, monkeypatch,
                                                                             caplog):
    from edgekit.device.devices import SYSROOT_ENV

    monkeypatch.setenv(SYSROOT_ENV, str(_cpuinfo_root(tmp_path, "Test CPU A")))
    decision = Choice(**tune(str(package), runs=10, min_seconds=0.1, threads=[1])["tuning"]["decision"])
    forced = Choice("onnx-float32", "onnxruntime", 1)
    path = decision_path(manifest_digest(package))
    record = json.loads(path.read_text())
    record["decision"] = {"artifact": forced.artifact, "backend": forced.backend, "threads": forced.threads}
    path.write_text(json.dumps(record))  # a known choice, so that "used" and "dropped" are told apart
    with edgekit.load(package) as model:
        assert model.artifact.key == "onnx-float32"

    caplog.set_level("INFO", logger="edgekit.runtime")
    monkeypatch.setenv(SYSROOT_ENV, str(_cpuinfo_root(tmp_path, "Test CPU B")))  # another device
    with edgekit.load(package) as model:
        assert model.artifact.key == "tflite"
    assert "the device changed" in caplog.text
    monkeypatch.setenv(SYSROOT_ENV, str(_cpuinfo_root(tmp_path, "Test CPU A")))

    changed = dict(record, runtime={**record["runtime"], "onnxruntime": "elsewhere:1:1"})  # measured with another
    path.write_text(json.dumps(changed))  # onnxruntime installation than the one here
    with edgekit.load(package) as model:
        assert model.artifact.key == "tflite"
    assert "runtime libraries changed" in caplog.text

    path.write_text(json.dumps(record))
    manifest = json.loads((package / "manifest.json").read_text())
    manifest["created"] = "2020-01-01T00:00:00Z"  # the same package rebuilt: a new manifest digest
    (package / "manifest.json").write_text(json.dumps(manifest))
    with edgekit.load(package) as model:
        assert model.artifact.key == "tflite"
    assert decision.artifact  # the measured run picked something real


def test_edgekit_tune_writes_a_report_that_compare_marks(package, tmp_path, capsys):
    from tests.conftest import edgekit_cli, run_cli

    report = tmp_path / "pi.tune.json"
    result = edgekit_cli("tune", package, "--tune-threads", "1", "--tune-seconds", "0.2", "--tune-artifacts",
                         "onnx,onnx-float32", "--tune-report", report,
                         env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr[-2000:]
    tuning = json.loads(report.read_text())["tuning"]
    measured = {c["artifact"] for c in tuning["candidates"]}  # those asked for, and the untuned default
    assert measured == {"onnx", "onnx-float32", tuning["default"]["artifact"]}
    code, out, _ = run_cli(capsys, "compare", report, "--markdown")
    assert code == 0 and out.count("(tuned)") == 1 and f"{tuning['decision']['artifact']} (tuned)" in out
    refused = edgekit_cli("tune", package, "--tune-artifacts", "onnx-float16",
                          env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert refused.returncode == 1 and "has no onnx-float16 artifact" in refused.stderr


def test_tuning_a_package_whose_artifacts_all_failed_says_so(digits_all_package, tmp_path):
    """It was told to install a runtime, which it had."""
    package = tmp_path / "refused.edgekit"
    shutil.copytree(digits_all_package, package)
    manifest = json.loads((package / "manifest.json").read_text())
    for record in manifest["validation"]["artifacts"].values():
        if record.get("measured") is not False:
            record.update(passed=False, verdict="failed", gates=[{"what": "output_0 top-1 agreement 90% < 99%"}])
    (package / "manifest.json").write_text(json.dumps(manifest))
    result = device_cli(package, "--tune")
    assert result.returncode == 1 and "failed its accuracy gates at packaging" in result.stderr, result.stderr
    assert "install the runtime" not in result.stderr and "Traceback" not in result.stderr
