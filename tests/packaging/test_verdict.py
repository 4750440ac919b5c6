"""The verdict is right in both directions on the model families of ``models/verdict``: a collapsed
detector is refused and repaired, good bins/embedding/mask artifacts pass, spatial axes are
never channels, and image folders are numbered as the model's labels say.

The models are built here in seconds (PyTorch -> ONNX, Keras in a child process) and packaged for real.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import assert_user_error, device_cli, edgekit_cli, verdict_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """``models/verdict`` models, each built once per test run and shared with the other test files."""
    def get(name: str) -> Path:
        return verdict_model(tmp_path_factory, name)

    return get


def manifest_of(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}.edgekit" / "manifest.json").read_text())


def packaged(model: Path, data: Path, fmt: str, out: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    """``edgekit package`` with default gates for one format (no float fallback): it must pass; the
    run and the format's validation record."""
    result = edgekit_cli("package", model, "-c", data, "--format", fmt, "-o", out, "--force", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    return result, manifest_of(out, model.stem)["validation"]["artifacts"][fmt]


def test_a_a_yolo_head_whose_scores_collapse_is_refused_by_plain_int8_and_ships_with_default_flags(zoo, tmp_path):
    pytest.importorskip("torch")
    yolo = zoo("yolo")
    args = ("package", yolo / "yolo.onnx", "-c", yolo / "images.npz", "--format", "onnx", "-o", tmp_path, "--force")
    refused = edgekit_cli(*args, "--no-auto-fix")
    assert_user_error(refused, "INT8 validation failed")
    # the kind, with its evidence, before anything is judged by it
    assert "output0: detections:yolo, YOLO layout [N, 22, A], from Concat(axis=1) of 4 box rows and 18 sigmoid rows" \
        in refused.stdout
    # named: the score rows of axis 1, the detection metric, and the Concat as the first fix
    assert "output 'output0' rows 4..21 of axis 1 (sigmoid rows" in refused.stderr
    assert "(detections:yolo)" in refused.stderr and "recall" in refused.stderr
    assert "fix: --int16-activations /Concat_6 or --keep-float /Concat_6" in refused.stderr  # 16-bit first
    assert not (tmp_path / "yolo.edgekit").exists()

    fixed = edgekit_cli(*args, "--no-also-float", "--no-simulate")  # each format's own search: its named fix
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    record = manifest_of(tmp_path, "yolo")["validation"]
    onnx = record["artifacts"]["onnx"]
    assert record["kinds"]["output0"]["kind"] == "detections:yolo"
    assert record["kinds"]["output0"]["groups_axis"] == 1 and record["kinds"]["output0"]["joined_by"] == "/Concat_6"
    assert onnx["auto_fix"][0]["change"] == "--int16-activations /Concat_6"  # 16-bit activations before float
    kept = [t["change"] for t in onnx["auto_fix"] if t["kept"] and not t.get("stage")]
    assert kept and kept[0] in ("--int16-activations /Concat_6", "--keep-float /Concat_6"), onnx["auto_fix"]
    task = onnx["tasks"]["output0"]["values"]
    assert task["recall"] >= 0.9 and task["class_agreement"] >= 0.9 and task["float_detections"] > 0
    # the scores themselves match float now (not just the decisions)
    assert onnx["worst_slice"]["channels"] == [4, 22] and onnx["worst_slice"]["sqnr_db"] >= 20
    assert onnx["passed"] is True


def test_b_a_360_bin_sigmoid_head_that_keeps_its_peak_passes_by_default(zoo, tmp_path):
    pitch = zoo("pitch")
    result, record = packaged(pitch / "pitch.keras", pitch / "frames.npz", "tflite", tmp_path)
    assert "output_0: bins, [N, 360], Sigmoid over 360 ordered bins on axis 1" in result.stdout
    assert record["worst_slice"] is None  # the bins are one quantity, whatever their magnitudes
    assert record["tasks"]["output_0"]["task"] == "bins" and record["tasks"]["output_0"]["passed"]
    assert "groups of different magnitude" not in result.stdout + result.stderr


def test_b_an_l2_embedding_with_dead_units_passes_by_cosine(zoo, tmp_path):
    embedding = zoo("embedding")
    result, record = packaged(embedding / "embedding.keras", embedding / "mel.npz", "onnx", tmp_path)
    assert "output_0: embedding, [N, 256], L2-normalised vectors" in result.stdout
    assert record["dead_units"] >= 2 and record["worst_slice"] is None
    task = record["tasks"]["output_0"]
    assert task["task"] == "embedding" and task["passed"] and task["values"]["min_cosine"] >= 0.9
    assert "-inf" not in result.stdout + result.stderr


def test_c_a_probability_map_never_reports_spatial_columns_as_channels(zoo, tmp_path):
    pytest.importorskip("torch")
    probmap = zoo("probmap")
    result, record = packaged(probmap / "probmap.onnx", probmap / "scenes.npz", "onnx", tmp_path)
    assert "mask: segmentation, [N, 1, 32, 32], Sigmoid map" in result.stdout
    assert record["worst_slice"] is None and "channels" not in result.stdout
    assert record["tasks"]["mask"]["task"] == "segmentation" and record["tasks"]["mask"]["values"]["mean_iou"] >= 0.9
    assert record["top1_agreement"] is None or np.isnan(record["top1_agreement"])  # no top-1 for a mask


def test_e_image_folders_follow_the_labels_order_on_the_build_and_on_the_device(zoo, tmp_path):
    shapes = zoo("shapes")
    assert float((shapes / "float_accuracy.txt").read_text()) == 1.0
    assert sorted(p.name for p in (shapes / "images").iterdir()) == ["hbar", "square", "vbar"]  # not the model's order
    result = edgekit_cli("package", shapes / "shapes.keras", "-c", shapes / "images", "--labels",
                         shapes / "labels.txt", "-o", tmp_path, "--force", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    validation = manifest_of(tmp_path, "shapes")["validation"]
    assert validation["float"]["accuracy"] == 1.0
    assert validation["artifacts"]["tflite"]["accuracy"] == 1.0
    bench = device_cli(tmp_path / "shapes.edgekit", "--bench", "--eval", shapes / "images", "--runs", "3",
                       "--warmup", "1", "--min-seconds", "0", "--report", tmp_path / "report.json")
    assert bench.returncode == 0, bench.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["results"][0]["accuracy"]["accuracy"] == 1.0, report["results"][0].get("accuracy")
    # labels that do not name the folders: refused, never a silent renumbering
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("square\nvertical\nhbar\n")
    refused = edgekit_cli("package", shapes / "shapes.keras", "-c", shapes / "images", "--labels", wrong,
                          "-o", tmp_path / "w", "--force")
    assert_user_error(refused, "do not match --labels", "folders without a label: vbar",
                      "labels without a folder: vertical")


def test_the_runtime_respects_the_verdict(zoo, tmp_path):
    """A failed artifact kept by --allow-accuracy-drop: never chosen by default, loaded with a warning
    when asked for, refused by the server without --allow-failed-artifact; every artifact key works."""
    pytest.importorskip("torch")
    yolo = zoo("yolo")
    kept = edgekit_cli("package", yolo / "yolo.onnx", "-c", yolo / "images.npz", "--format", "onnx", "-o", tmp_path,
                       "--force", "--allow-accuracy-drop", "--also-float", "--no-auto-fix")
    assert kept.returncode == 0, kept.stderr[-3000:]
    package = tmp_path / "yolo.edgekit"
    manifest = manifest_of(tmp_path, "yolo")
    assert manifest["validation"]["artifacts"]["onnx"]["passed"] is False
    assert manifest["validation"]["artifacts"]["onnx-float32"]["passed"] is True
    with np.load(yolo / "images.npz") as data:
        np.save(tmp_path / "x.npy", data["images"][:1])
    default = device_cli(package, "-i", tmp_path / "x.npy", "-o", tmp_path / "y.npy", "--verbose")
    assert default.returncode == 0, default.stderr[-2000:]
    assert "onnx-float32" in default.stdout + default.stderr and "failed validation" not in default.stderr
    chosen = device_cli(package, "--artifact", "onnx", "-i", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    assert chosen.returncode == 0, chosen.stderr[-2000:]
    assert "artifact 'onnx' of package 'yolo' failed validation when it was packaged" in chosen.stderr
    by_key = device_cli(package, "--artifact", "onnx-float32", "-i", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    assert by_key.returncode == 0, by_key.stderr[-2000:]
    missing = device_cli(package, "--artifact", "tflite-float16", "-i", tmp_path / "x.npy")
    assert_user_error(missing, "has no tflite-float16 artifact")
    served = device_cli(package, "--serve", "--artifact", "onnx", "--port", "0", timeout=120)
    assert_user_error(served, "failed validation", "--allow-failed-artifact")


def test_a_yolov5_export_levels_joined_on_the_anchor_axis_is_a_detector(zoo, tmp_path):
    """YOLOv5 joins [box | sigmoid(obj + classes)] per level on the last axis, then the levels on the
    anchor axis: the quantities are found inside the levels, through the Reshape that keeps the last
    axis, and the collapsed scores are refused by plain INT8, naming the joining Concat's 16-bit
    activations first. (A detector's search on that fix: the YOLO head above, on ONNX and TFLite.)"""
    pytest.importorskip("torch")
    yolo = zoo("yolov5")
    refused = edgekit_cli("package", yolo / "yolov5.onnx", "-c", yolo / "images.npz", "--format", "onnx",
                          "-o", tmp_path, "--no-also-float", "--no-auto-fix", "--no-simulate")
    assert_user_error(refused, "INT8 validation failed")
    assert ("output0: detections:yolov5, YOLOv5 layout [N, A, 10], from Concat(axis=2) of 4 box rows and 1 "
            "objectness row and 5 class rows, 2 levels joined on axis 1") in refused.stdout
    assert "(detections:yolov5)" in refused.stderr and "recall" in refused.stderr
    assert "output 'output0' rows 4..9 of axis 2 (sigmoid rows" in refused.stderr  # the scores, inside the levels
    assert "fix: --int16-activations /Concat_16 or --keep-float /Concat_16" in refused.stderr  # 16-bit first
