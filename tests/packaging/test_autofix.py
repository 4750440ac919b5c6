"""--auto-fix keeps a rebuild only when the gates that failed improve on their own metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.packaging.search import Candidate, improves
from edgekit.packaging.gates import check
from edgekit.packaging.validate import Measured
from edgekit.kinds import infer
from edgekit.comparison.metrics import compare_outputs
from edgekit.kinds import evaluate
from tests.conftest import ROOT, edgekit_cli, outlier_cnn_searched, verdict_model

STRUCTURE = {"op": "concat", "axis": 1, "node": "head", "parts": [{"size": 4, "op": "values"},
                                                                  {"size": 3, "op": "sigmoid"}]}


def _detections(rng: np.random.Generator) -> np.ndarray:
    """[N, 7, A]: boxes in pixels, sigmoid scores, a few confident anchors per image."""
    n, anchors = 30, 40
    boxes = np.stack([rng.uniform(20, 300, (n, anchors)), rng.uniform(20, 300, (n, anchors)),
                      rng.uniform(10, 40, (n, anchors)), rng.uniform(10, 40, (n, anchors))], axis=1)
    scores = rng.uniform(0, 0.1, (n, 3, anchors))
    confident = rng.random((n, anchors)) < 0.15
    scores[:, 0][confident] = rng.uniform(0.5, 0.9, confident.sum())
    return np.concatenate([boxes, scores], axis=1)


def _candidate(reference: np.ndarray, candidate: np.ndarray) -> Candidate:
    kind = infer("out", reference, STRUCTURE)
    task = evaluate(kind.spec, reference, candidate, None, 1.0, kind.axis)
    measured = Measured({"out": compare_outputs(reference, candidate, kind=kind)},
                        compare_outputs(reference, candidate, kind=kind), {"out": task})
    return Candidate(None, None, measured, check("onnx", measured, 20.0, {}, {"out": kind}))  # type: ignore[arg-type]


def test_d_a_rebuild_with_higher_sqnr_but_lower_recall_is_not_kept():
    rng = np.random.default_rng(0)
    reference = _detections(rng)
    first = reference.copy()
    confident = np.argwhere(reference[:, 4] >= 0.25)
    dropped = confident[::2]  # half the detections lost: their scores collapsed to zero
    first[dropped[:, 0], 4, dropped[:, 1]] = 0.0
    # a "fix" that moves every score closer to float on average (higher SQNR), but more of them
    # below the score threshold: fewer detections
    second = reference.copy()
    second[:, 4:] = reference[:, 4:] * 0.35
    before, after = _candidate(reference, first), _candidate(reference, second)
    assert before.failures and after.failures
    task_before = next(f for f in before.failures if f.cause == "task")
    task_after = next(f for f in after.failures if f.cause == "task")
    slice_before = next(f for f in before.failures if f.cause == "slice")
    slice_after = next(f for f in after.failures if f.cause == "slice")
    assert slice_after.margin > slice_before.margin  # the SQNR went up...
    assert task_after.margin < task_before.margin  # ...while the detections got worse
    assert not improves(after, before)
    # the rebuild that makes the scores match float is kept
    good = reference.copy()
    good[:, 4:] += rng.normal(0, 1e-3, good[:, 4:].shape)
    assert improves(_candidate(reference, good), before)


def test_a_gate_that_passed_must_not_start_failing():
    rng = np.random.default_rng(1)
    reference = _detections(rng)
    only_scores = reference.copy()
    only_scores[:, 4:] = np.round(only_scores[:, 4:] * 4) / 4
    worse_boxes = reference.copy()
    worse_boxes[:, :4] = np.round(worse_boxes[:, :4] / 100) * 100  # scores fixed, boxes collapsed
    before = _candidate(reference, only_scores)
    after = _candidate(reference, worse_boxes)
    assert any(f.key not in {g.key for g in before.failures} for f in after.failures)
    assert not improves(after, before)


@pytest.mark.slow
def test_default_flags_search_the_layers_a_failing_gate_needs_in_higher_precision(tmp_path_factory, tmp_path):
    """A CNN whose plain INT8 agrees with float on ~97.5% of decisions (one tensor with two
    outlier channels): no single layer in float passes (the tensor is quantized where conv2 writes
    it and again where conv3 reads it). With default flags the search ranks layers by their
    effect on the failing gate (after blocks of them), raises them together and ships: >= 99% agreement, confirmed on the
    half of the held-out samples no try was judged by."""
    folder = verdict_model(tmp_path_factory, "outlier_cnn")
    data = ("-c", folder / "calibration.npz", "--eval", folder / "eval.npz", "--profile", "x86-cpu")
    # plain INT8's messages, on one format (the searched run below records each format's plain build)
    plain = edgekit_cli("package", folder / "outlier_cnn.keras", *data, "--format", "tflite",
                        "-o", tmp_path / "plain", "--no-auto-fix")
    assert plain.returncode == 1 and "top1_agreement" in plain.stderr
    assert "tflite: refused: output 'output_0' (classes): top1_agreement" in plain.stdout
    assert "best configuration plain INT8" in plain.stdout
    assert "without --no-auto-fix, edgekit searches" in plain.stderr
    package, searched = outlier_cnn_searched(tmp_path_factory)  # the same flags with --format all
    assert searched.returncode == 0, searched.stderr
    manifest = json.loads((package / "manifest.json").read_text())
    # one search on the INT8 simulation; its plan built by every format first
    assert "INT8 simulation: --keep-float" in searched.stdout and "passes every gate" in searched.stdout
    for fmt in ("tflite", "onnx", "coreml"):  # CoreML: no per-layer report; its weighted layers are probed
        record = manifest["validation"]["artifacts"][fmt]
        assert record["top1_agreement"] >= 0.99, (fmt, record)
        artifact = next(a for a in manifest["artifacts"] if a["format"] == fmt and not a.get("variant"))
        simulation = artifact["details"]["simulation"]
        tries = simulation["trials"] + record.get("auto_fix", [])  # the shared search's, then the format's own
        assert any(t.get("stage") == "layer search" and t.get("change", "").startswith("--keep-float") for t in tries)
        assert "budget" in simulation["trials"][-1]  # the simulated search's budget, counted in tries
        confirmation = [t for t in simulation["trials"] if t.get("stage") == "confirmation"]  # the held-out check
        assert confirmation and confirmation[-1]["kept"] and not confirmation[-1]["gates"]
        raised = set(artifact["details"].get("keep_float", [])) | set(artifact["details"].get("int16_layers", []))
        assert raised and "conv3" in raised, raised  # the layer reading the outlier channels
        assert "int8+" in artifact["precision"], artifact["precision"]
        # the per-format summary: shipped, or passing but said to be slower than its float fallback
        assert f"{fmt}: shipped int8+" in searched.stdout or f"{fmt}: int8+" in searched.stdout
        if fmt == "coreml":
            continue  # CoreML runs only on macOS: not timed here
        # the build this CPU runs (ONNX: its u8s8 scheme on x86 with VNNI) is timed against the float fallback
        timed = [a for a in manifest["artifacts"] if a["format"] == fmt and "speed_vs_float" in a["details"]]
        assert len(timed) == 1, [a["path"] for a in timed]
        speed = timed[0]["details"]["speed_vs_float"]
        assert speed["float_artifact"] == f"{fmt}-{'float16' if fmt == 'tflite' else 'float32'}"
        assert speed["speedup"] > 0 and speed["arch"] and speed["mixed_ms"] > 0
    assert "runs" in searched.stdout and "its float fallback" in searched.stdout


def test_a_model_that_passes_plain_int8_is_built_as_before_with_no_search(tmp_path):
    digits = ROOT / "models" / "digits"
    result = edgekit_cli("package", digits / "digits.keras", "-c", digits / "data" / "calibration.npz", "--eval",
                         digits / "data" / "eval.npz", "-o", tmp_path, "--format", "tflite", "--no-also-float",
                         "--preprocessing", "0..1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "search" not in result.stdout
    manifest = json.loads((tmp_path / "digits.edgekit" / "manifest.json").read_text())
    assert "auto_fix" not in manifest["validation"]["artifacts"]["tflite"]
    assert manifest["artifacts"][0]["precision"] == "int8"
    assert "LiteRT Quantizer" not in manifest["artifacts"][0]["converter"]["tool"]  # TFLiteConverter, as before


def test_a_format_refused_beside_one_that_passes_is_left_out_and_the_rest_ships(tmp_path_factory, tmp_path):
    """Several formats, one INT8 artifact refused (CoreML at 93.9% agreement, plain INT8) and one
    passing (TFLite at 97.2%, with --max-accuracy-drop 4 allowing 96%): the package is written
    without the refused artifact, its float fallback ships, the manifest names what failed, and the
    exit code says the package is partial unless --allow-partial."""
    folder = verdict_model(tmp_path_factory, "outlier_cnn")
    common = ("-c", folder / "calibration.npz", "--eval", folder / "eval.npz", "--format", "tflite", "--format",
              "coreml", "--no-auto-fix", "--max-accuracy-drop", "4", "-o", tmp_path / "out", "--force")
    partial = edgekit_cli("package", folder / "outlier_cnn.keras", *common)
    assert partial.returncode == 1
    assert "without coreml" in partial.stderr and "top1_agreement" in partial.stderr
    assert "--allow-partial" in partial.stderr
    assert "coreml: refused, left out of the package: output 'output_0' (classes): top1_agreement" in partial.stdout
    assert "tflite: shipped int8" in partial.stdout and "coreml-float16: float fallback (float16), shipped" in partial.stdout
    manifest = json.loads((tmp_path / "out" / "outlier_cnn.edgekit" / "manifest.json").read_text())
    assert [a["precision"] for a in manifest["artifacts"] if a["target"] == "coreml"] == ["float16"]
    assert [f["target"] for f in manifest["failed"]] == ["coreml"]
    assert "left out of the package" in manifest["failed"][0]["error"]
    assert not (tmp_path / "out" / "outlier_cnn.edgekit" / "coreml" / "model.int8.mlpackage").exists()
    assert set(manifest["validation"]["artifacts"]) == {"tflite", "tflite-float16", "coreml-float16"}
    allowed = edgekit_cli("package", folder / "outlier_cnn.keras", *common, "--allow-partial")
    assert allowed.returncode == 0, allowed.stderr
