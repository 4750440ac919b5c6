import json

import pytest

from edgekit.errors import PackageError
from edgekit.manifest import SCHEMA_VERSION, Artifact, Manifest, Preprocessing, QuantParams, TensorSpec
from edgekit.validation_record import ArtifactRecord, ValidationRecord


def _manifest() -> Manifest:
    return Manifest(
        name="m",
        edgekit_version="0.1.0",
        created="2026-01-01T00:00:00+00:00",
        source={"format": "keras", "sha256": "0" * 64},
        inputs=[TensorSpec("image", [-1, 8, 8, 1], layout="NHWC", preprocessing=Preprocessing(resize=[8, 8]))],
        outputs=[TensorSpec("output_0", [-1, 10], labels=[str(i) for i in range(10)])],
        artifacts=[
            Artifact(
                "tflite", "tflite/model.int8.tflite", "a" * 64, 10,
                inputs=[QuantParams("in", "int8", 0.0039, -128)], outputs=[QuantParams("out", "int8", 0.0039, -128)],
            )
        ],
        validation=ValidationRecord.from_dict({"artifacts": {"tflite": {"sqnr_db": float("inf")}}}),
    )


def test_round_trip_keeps_everything_the_runtime_needs():
    manifest = _manifest()
    again = Manifest.from_json(manifest.to_json())
    assert again.to_dict() == Manifest.from_json(again.to_json()).to_dict()
    assert again.inputs[0].preprocessing == manifest.inputs[0].preprocessing
    assert again.artifacts[0].inputs[0].zero_point == -128
    assert again.labels == manifest.labels


def test_non_finite_measurements_are_written_as_strict_json_null():
    data = json.loads(_manifest().to_json())
    assert data["validation"]["artifacts"]["tflite"]["sqnr_db"] is None


def test_newer_schema_is_refused_with_upgrade_hint():
    data = _manifest().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(PackageError, match="newer than this edgekit") as info:
        Manifest.from_dict(data)
    assert "upgrade" in info.value.hint


def test_unknown_keys_are_tolerated():
    data = _manifest().to_dict()
    data["future_field"] = {"x": 1}
    data["artifacts"][0]["future"] = True
    assert Manifest.from_dict(data).name == "m"


@pytest.mark.parametrize(
    "path", ["../evil.tflite", "/etc/passwd", "a/../../b", "", "./x", "a\\b"]
)
def test_artifact_paths_must_stay_inside_the_package(path):
    data = _manifest().to_dict()
    data["artifacts"][0]["path"] = path
    with pytest.raises(PackageError, match="relative path inside the package"):
        Manifest.from_dict(data)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["artifacts"][0].update(sha256="xyz"), "sha256"),
        (lambda d: d["inputs"][0].update(shape=[0, 8]), "shape"),
        (lambda d: d.update(artifacts=[]), "artifacts must be a non-empty list"),
        (lambda d: d["inputs"][0]["preprocessing"].update(std=[0.0]), "std must not contain 0"),
        (lambda d: d.pop("schema_version"), "schema_version"),
    ],
)
def test_malformed_manifests_name_the_problem(mutate, message):
    data = _manifest().to_dict()
    mutate(data)
    with pytest.raises(PackageError, match=message):
        Manifest.from_dict(data)


def test_invalid_json_is_a_package_error():
    with pytest.raises(PackageError, match="not valid JSON"):
        Manifest.from_json(b"{not json")


OLD_VALIDATION = {  # as a package made before the gates and the per-artifact verdict wrote it
    "data": {"source": "calibration.npz", "split": "held-out calibration samples", "samples": 120, "labeled": True},
    "float": {"accuracy": 0.98},
    "max_accuracy_drop_pp": 1.0,
    "passed": True,
    "artifacts": {"tflite": {"measured": True, "accuracy": 0.975, "sqnr_db": 31.2},
                  "coreml": {"measured": False, "reason": "not measurable here: macOS only"}},
}


def test_the_validation_record_reads_old_manifests_and_writes_the_same_json():
    record = ValidationRecord.from_dict(OLD_VALIDATION)
    assert record.data.samples == 120 and record.data.labeled and record.float_accuracy == 0.98
    assert record.min_sqnr_db is None and record.kinds == {} and record.passed
    tflite = record.artifact("tflite")
    assert tflite.measured and tflite.passed is None and not tflite.failed and tflite.failed_gates() is None
    assert tflite.get("sqnr_db") == 31.2 and tflite.metrics.accuracy == 0.975
    assert not record.artifact("coreml").measured and "macOS" in record.artifact("coreml").reason
    assert record.artifact("absent") == ArtifactRecord(recorded=False)
    written = record.to_dict()
    assert written["artifacts"]["coreml"] == OLD_VALIDATION["artifacts"]["coreml"]
    assert {k: v for k, v in written["artifacts"]["tflite"].items() if k != "gates"} == \
        OLD_VALIDATION["artifacts"]["tflite"]
    assert ValidationRecord.from_dict(written) == record
    assert ValidationRecord.from_dict({}).to_dict() == {}  # a package without validation stays without


def test_a_failed_artifact_record_says_what_failed_and_is_frozen():
    record = ValidationRecord.from_dict({"passed": False, "artifacts": {"onnx": {
        "measured": True, "passed": False, "sqnr_db": 3.1,
        "gates": [{"output": "y", "cause": "sqnr", "what": "the output: SQNR 3.1 dB < 20 dB", "fixes": []}]}}})
    onnx = record.artifact("onnx")
    assert onnx.failed and onnx.failed_gates() == ["the output: SQNR 3.1 dB < 20 dB"] and not record.passed
    with pytest.raises(AttributeError):
        onnx.passed = True  # type: ignore[misc]
    fixed = record.with_auto_fix({"onnx": [{"change": "--reduce-range", "kept": False}]})
    assert fixed.artifact("onnx").auto_fix[0]["change"] == "--reduce-range" and record.artifact("onnx").auto_fix == ()


def test_a_malformed_validation_record_is_a_package_error():
    data = _manifest().to_dict()
    data["validation"] = {"artifacts": {"tflite": ["not", "a", "record"]}}
    with pytest.raises(PackageError, match="manifest.validation is malformed"):
        Manifest.from_dict(data)


def test_a_package_whose_artifacts_were_never_measured_is_not_passed(digits_package, tmp_path):
    """Only unmeasurable artifacts (CoreML with ops outside the evaluator): the manifest said
    passed: true and the hint called them the ones that passed. Not measured is its own state."""
    import shutil
    import warnings

    import edgekit
    from edgekit.errors import UnmeasuredArtifactWarning
    from edgekit.manifest import Manifest
    from edgekit.validation_record import ValidationRecord
    from edgekit.packaging.table import render
    from rich.console import Console

    package = tmp_path / "digits.edgekit"
    shutil.copytree(digits_package, package)
    data = json.loads((package / "manifest.json").read_text())
    for key in data["validation"]["artifacts"]:
        data["validation"]["artifacts"][key] = {"measured": False, "reason": "not measurable here: no evaluator"}
    data["validation"]["passed"] = None
    (package / "manifest.json").write_text(json.dumps(data))
    manifest = Manifest.from_json((package / "manifest.json").read_bytes())
    assert manifest.validation.passed is None and manifest.validation.state == "not measured"
    assert manifest.validation.to_dict()["passed"] is None  # read and written back as it was
    assert ValidationRecord.from_dict({"artifacts": {}}).passed is True  # an older manifest without the key
    console = Console(record=True, width=200)
    render(manifest, console)
    text = console.export_text()
    assert "not measurable here" in text and "gates NOT MEASURED" in text and "gates pass" not in text
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with edgekit.load(package) as model:
            assert model.artifact is not None
    assert any(issubclass(w.category, UnmeasuredArtifactWarning) for w in caught)


def test_a_keras_package_records_the_frameworks_that_loaded_it(digits_package):
    """The source says which versions loaded the model (``versions`` in its description); the
    manifest keeps them beside edgekit's and the runtimes'."""
    import json

    versions = json.loads((digits_package / "manifest.json").read_text())["versions"]
    assert versions["tensorflow"] and versions["keras"] and versions["edgekit"], versions


def test_a_format_left_out_is_a_typed_record_that_round_trips():
    """``left_out`` was a list of plain mappings read by key; it is a record like ``failed``."""
    from dataclasses import replace

    from edgekit.manifest import LeftOut

    manifest = replace(_manifest(), left_out=[LeftOut("coreml", "coremltools is not installed", "edgekit[coreml]")])
    stored = json.loads(manifest.to_json())
    assert stored["left_out"] == [{"format": "coreml", "why": "coremltools is not installed", "extra": "edgekit[coreml]"}]
    (again,) = Manifest.from_json(manifest.to_json()).left_out
    assert isinstance(again, LeftOut) and again.format == "coreml" and again.extra == "edgekit[coreml]"


def test_a_gate_a_pass_cannot_be_decided_on_is_read_back_typed():
    """``undecided`` entries were mappings every reader took apart by key (the CLI, the runtime's
    warning, the table); they are ``Undecided`` records, written as the JSON they always were."""
    from edgekit.validation_record import Undecided, Verdict

    stored = {"measured": True, "verdict": "not decidable",
              "undecided": [{"output": "probs", "gate": "top1_agreement", "have": 160, "needed": 500, "unit": "samples",
                             "samples_needed": 500}]}
    record = ArtifactRecord.from_dict(stored)
    (gate,) = record.undecided
    assert isinstance(gate, Undecided) and gate.needed == 500 and record.verdict is Verdict.NOT_DECIDABLE
    assert record.to_dict()["undecided"] == stored["undecided"]
    assert record.outcome() == "not decidable: 500 held-out samples would decide it (top1_agreement: 160 samples, 500 needed)"


def test_a_failed_gate_is_a_typed_record_and_an_old_worded_gate_still_reads():
    """``gates`` entries were mappings read by ``.get("what")``; they are ``GateRecord``s, and a
    manifest from before gates were mappings (a gate as words) still reads."""
    from edgekit.validation_record import GateRecord

    gate = {"format": "onnx", "output": "scores", "cause": "sqnr", "what": "output 'scores': SQNR 12.0 dB < 20 dB",
            "fixes": ["--keep-float head"], "saturated": False, "channels": [4, 84], "axis": 1, "margin": -8.0}
    record = ArtifactRecord.from_dict({"measured": True, "passed": False, "gates": [gate, "an old worded gate"]})
    typed, worded = record.gates
    assert isinstance(typed, GateRecord) and typed.channels == (4, 84) and typed.fixes == ("--keep-float head",)
    assert record.to_dict()["gates"][0] == gate and worded.what == "an old worded gate"
    assert record.failed_gates() == [gate["what"], "an old worded gate"]
