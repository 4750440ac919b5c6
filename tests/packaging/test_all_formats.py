"""`--target all`: one calibration, one table; partial failures; --explain and --keep-float."""

from __future__ import annotations

import json

import pytest

from edgekit.manifest import Manifest
from edgekit.formats import FORMATS as TARGETS
from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, run_cli

pytestmark = pytest.mark.slow


def test_all_targets_share_one_calibration_and_preprocessing(digits_all_package):
    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    main = [a.target for a in manifest.artifacts if not a.is_float and not a.variant]  # not ONNX's scheme variants
    assert main == list(TARGETS) == ["tflite", "onnx", "coreml", "executorch"]
    assert manifest.failed == []
    assert manifest.calibration["samples"] == 300
    assert set(manifest.validation.to_dict()["artifacts"]) == {a.key for a in manifest.artifacts}
    # every cell measured on Linux, CoreML by the MIL evaluator; ExecuTorch (Keras -> tf2onnx -> the
    # ONNX -> PyTorch rebuild -> PT2E) by its runtime
    for target in ("tflite", "onnx", "coreml", "executorch"):
        assert manifest.validation.to_dict()["artifacts"][target]["measured"] is True
        assert manifest.validation.to_dict()["artifacts"][target]["top1_agreement"] >= 0.98


def test_validation_table_has_a_row_per_artifact(digits_all_package, capsys):
    from edgekit.cli.console import stdout_console
    from edgekit.packaging.table import render

    render(Manifest.from_json((digits_all_package / "manifest.json").read_bytes()), stdout_console(120))
    out = capsys.readouterr().out
    for target in ("tflite", "onnx", "coreml", "executorch"):
        assert f"│ {target}" in out
    assert "not measurable here" not in out and out.count("98.89%") >= 6


def test_a_target_that_fails_is_recorded_and_the_others_still_build(sin_saved_model, tmp_path, capsys):
    code, out, err = run_cli(capsys, "package", sin_saved_model, "--target", "all", "--calibration", CALIBRATION,
                             "-o", tmp_path, "--allow-accuracy-drop", "--full-integer")
    assert code == 1
    assert "without tflite" in err and "SIN" in err and "--allow-partial" in err
    manifest = json.loads((tmp_path / "sin_model.edgekit" / "manifest.json").read_text())
    assert [f["target"] for f in manifest["failed"]] == ["tflite"]
    assert {a["target"] for a in manifest["artifacts"]} == {"onnx", "coreml", "executorch"}
    assert "tflite" in out and "failed" in out
    coreml = next(a for a in manifest["artifacts"] if a["target"] == "coreml")  # evaluator lacks sin:
    assert coreml["details"]["activations"] == "float16"  # weights-only INT8, said plainly
    assert "not supported by the evaluator: sin" in coreml["details"]["activations_reason"]
    assert manifest["validation"]["artifacts"]["coreml"]["measured"] is False

    code, _, err = run_cli(capsys, "package", sin_saved_model, "--target", "tflite", "--target", "onnx",
                           "--calibration", CALIBRATION, "-o", tmp_path, "--allow-accuracy-drop", "--allow-partial",
                           "--force", "--full-integer")  # tflite fails again; --allow-partial keeps the package with onnx
    assert code == 0, err
    manifest = json.loads((tmp_path / "sin_model.edgekit" / "manifest.json").read_text())
    assert [f["target"] for f in manifest["failed"]] == ["tflite"] and manifest["artifacts"][0]["target"] == "onnx"


def test_explain_reports_worst_layers_and_keep_float_excludes_them(tmp_path, capsys):
    code, out, err = run_cli(capsys, "package", DIGITS_MODEL, "--target", "tflite", "--target", "onnx",
                             "--calibration", CALIBRATION, "--eval", EVAL, "-o", tmp_path, "--explain",
                             "--keep-float", "block1_dw")
    assert code == 0, err
    assert "worst layers by SQNR" in out
    import re

    titles = re.findall(r"^(\S+): worst layers by SQNR", out, re.M)  # each artifact's own: onnx, onnx-u8s8, ...
    assert "tflite" in titles and "onnx" in titles and len(titles) == len(set(titles)), titles
    manifest = Manifest.from_json((tmp_path / "digits.edgekit" / "manifest.json").read_bytes())
    for target in ("tflite", "onnx"):
        artifact = manifest.artifact(target)
        rows = artifact.details["explain"]
        finite = [r["sqnr_db"] for r in rows if r["sqnr_db"] is not None]
        assert len(rows) >= 5 and finite == sorted(finite)
        assert artifact.details["keep_float"] == ["block1_dw"]
        assert artifact.precision.startswith("int8+float (")
        assert artifact.float_ops and all("block1_dw" in op["tensor"] for op in artifact.float_ops)
        metrics = manifest.validation.to_dict()["artifacts"][target]
        assert metrics["accuracy"] >= manifest.validation.to_dict()["float"]["accuracy"] - 0.01
    # ONNX's other INT8 schemes are built on the same plan and record it, read back from their own files
    variants = [a for a in manifest.artifacts if a.key.startswith("onnx-") and a.precision.startswith("int8")]
    assert variants, [a.key for a in manifest.artifacts]
    for variant in variants:
        assert variant.details["precision_plan"]["layers"] == {"block1_dw": "float"}, variant.key
        assert variant.details["precision_plan"]["read_back"] == {"landed": ["block1_dw"], "missed": []}, variant.key


def test_keep_float_with_an_unknown_layer_names_it(tmp_path, capsys):
    """Refused once the model is described, before the simulation and any format (it was refused by
    the first converter that looked, after the simulation had said every format builds the plan)."""
    code, out, err = run_cli(capsys, "package", DIGITS_MODEL, "--target", "onnx", "--calibration", CALIBRATION,
                             "-o", tmp_path / "out", "--keep-float", "no_such_layer", "--keep-float", "block1_dww")
    assert code == 2 and "--keep-float: the model has no layer 'no_such_layer', 'block1_dww'" in err, err
    assert "did you mean block1_dw" in err and "INT8 simulation" not in out + err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_op_no_converter_supports_names_it_for_every_target(lgamma_saved_model, tmp_path, capsys):
    code, _, err = run_cli(capsys, "package", lgamma_saved_model, "--target", "all", "--calibration", CALIBRATION,
                           "-o", tmp_path / "out")
    assert code == 1
    assert "error: no target could be built" in err
    # TensorFlow's converter writes lgamma as builtins LiteRT then cannot run: named as such
    assert "tflite: litert cannot run the tflite artifact the converter wrote" in err
    fix = err.split("fix:", 1)[1]
    assert "--format onnx" not in fix and "--format coreml" not in fix  # the final fix names no failed format
    assert "onnx: tf2onnx cannot convert op(s) Lgamma (in gamma" in err
    assert "coreml: coremltools cannot convert this model" in err and "Lgamma" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
