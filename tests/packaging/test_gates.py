"""Validation that cannot be fooled: every output gated without labels, task metrics, --metric,
ONNX measured with and without fused int8 kernels, and --auto-fix.

The models are built here in seconds (Keras, in a child process) and packaged for real.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from edgekit.formats.onnx.kernels import int8_kernel_features
from tests.conftest import assert_user_error, edgekit_cli, run_tf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("gates")
    run_tf(f"""
        import keras
        keras.utils.set_random_seed(0)
        root = {str(root)!r}
        # a detector head: box coordinates (0..300) and class scores (0..1) concatenated into one tensor
        image = keras.Input((16, 16, 3), name="image")
        d = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, activation="relu")(image))
        boxes = keras.layers.Rescaling(300.0)(keras.layers.Dense(4, activation="sigmoid")(d))
        scores = keras.layers.Dense(3, activation="softmax")(d)
        keras.Model(image, keras.layers.Concatenate(name="detections")([boxes, scores])).save(root + "/detector.keras")
        # 1-D audio in, four onset strengths out
        audio = keras.Input((256,), name="audio")
        a = keras.layers.Reshape((256, 1))(audio)
        a = keras.layers.GlobalAveragePooling1D()(keras.layers.Conv1D(8, 9, strides=4, activation="relu")(a))
        keras.Model(audio, keras.layers.Dense(4, name="onsets")(a)).save(root + "/audio.keras")
        # longer clips (4096 samples), for calibration data with one click in it
        long = keras.Input((4096,), name="audio")
        a = keras.layers.Reshape((4096, 1))(long)
        a = keras.layers.GlobalAveragePooling1D()(keras.layers.Conv1D(8, 9, strides=4, activation="relu")(a))
        keras.Model(long, keras.layers.Dense(4, name="onsets")(a)).save(root + "/long.keras")
        # a segmentation head: per-pixel class scores
        img = keras.Input((16, 16, 3), name="image")
        s = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(img)
        mask = keras.layers.Conv2D(4, 1, name="mask")(s)  # per-pixel class logits, as DeepLab-style heads emit
        keras.Model(img, mask).save(root + "/seg.keras")
        # the same head trained for seconds to label each pixel by its dominant colour (or dark): a
        # trained model's class margins, not a random one's near-ties
        import numpy as np
        rng = np.random.default_rng(1)
        fields = rng.uniform(0, 1, (400, 4, 4, 3)).astype(np.float32).repeat(4, axis=1).repeat(4, axis=2)
        targets = np.where(fields.max(axis=-1) < 0.3, 3, fields.argmax(axis=-1))
        img = keras.Input((16, 16, 3), name="image")
        s = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(img)
        trained = keras.Model(img, keras.layers.Conv2D(4, 1, name="mask")(s))
        trained.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        trained.fit(fields, targets, epochs=30, batch_size=32, verbose=0)
        trained.save(root + "/segtrained.keras")
    """)
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (120, 16, 16, 3)).astype(np.float32)
    np.savez(root / "images.npz", image=images)
    # photos are smooth: 4x4 colour fields scaled up, so neighbouring pixels agree as in real scenes
    fields = rng.uniform(0, 1, (250, 4, 4, 3)).astype(np.float32)
    np.savez(root / "smooth.npz", image=fields.repeat(4, axis=1).repeat(4, axis=2))
    t = np.linspace(0, 1, 256, dtype=np.float32)
    clips = np.stack([np.sin(2 * np.pi * rng.uniform(5, 40) * t) * rng.uniform(0.1, 1) for _ in range(150)])
    np.savez(root / "audio.npz", audio=clips[:120].astype(np.float32))
    np.savez(root / "audio_eval.npz", audio=clips[120:].astype(np.float32))
    # one click at 200x the clips' level: min/max calibration spends the INT8 range on one sample
    t = np.linspace(0, 1, 4096, dtype=np.float32)
    long = np.stack([np.sin(2 * np.pi * rng.uniform(50, 400) * t) * rng.uniform(0.1, 1) for _ in range(150)])
    long = long.astype(np.float32)
    np.savez(root / "long_eval.npz", audio=long[120:])
    long[7, 1000] = 200
    np.savez(root / "long_click.npz", audio=long[:120])
    return root


def package(models, model, data, *extra, formats=("tflite", "onnx")):
    flags = [f for fmt in formats for f in ("--format", fmt)]
    return edgekit_cli("package", models / f"{model}.keras", "-c", models / data, *flags, "-o", models / "out",
                       "--force", *extra)


def manifest_of(models, name):
    return json.loads((models / "out" / f"{name}.edgekit" / "manifest.json").read_text())


def test_a_collapsed_score_slice_fails_plain_int8_and_ships_with_default_flags(models):
    failed = package(models, "detector", "images.npz", "--no-auto-fix")
    assert failed.returncode == 1, failed.stdout
    # the kind comes from the graph: a Concatenate of 4 box values and 3 softmax scores
    assert "output_0: detections:yolo, YOLO layout [N, 7] (one box per sample), from Concat(axis=1) of 4 box rows " \
           "and 3 softmax rows" in failed.stdout
    for fmt in ("tflite", "onnx"):  # named: format, output, rows of the axis, the numbers, and the fix
        assert f"{fmt}: output 'output_0' rows 4..6 of axis 1 (softmax rows" in failed.stderr
        assert f"{fmt}: output 'output_0' (detections:yolo)" in failed.stderr
    assert "SQNR" in failed.stderr and "< 20 dB" in failed.stderr and "distinct values" in failed.stderr
    assert "(fix: --int16-activations detections or --keep-float detections" in failed.stderr
    assert "without --no-auto-fix, edgekit searches" in failed.stderr
    assert "Traceback" not in failed.stderr

    # each format's own search: its named fix, the joining op at 16-bit activations before float (the
    # shared simulated search tries float plans only: tests/packaging/test_shared_plan.py)
    fixed = package(models, "detector", "images.npz", "--no-simulate")
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    manifest = manifest_of(models, "detector")
    assert manifest["validation"]["passed"] is True
    for fmt in ("tflite", "onnx"):
        record = manifest["validation"]["artifacts"][fmt]
        assert record["worst_slice"]["channels"] == [4, 7]
        assert record["worst_slice"]["sqnr_db"] >= 20, record["worst_slice"]
        first = record["auto_fix"][0]  # the joining op at 16-bit activations, before float
        assert first["change"] == "--int16-activations detections", record["auto_fix"]
        assert first["before"]["worst_sqnr_db"] < 20
        assert first["before"]["gates"]["output_0 slice rows 4..6"] < 0
        kept = [t["change"] for t in record["auto_fix"] if t["kept"] and not t.get("stage")]
        assert kept and kept[0] in ("--int16-activations detections", "--keep-float detections"), record["auto_fix"]
        artifact = next(a for a in manifest["artifacts"] if a["format"] == fmt)
        assert artifact["details"]["precision_plan"]["layers"].get("detections") in ("int16", "float")
    assert "search tflite: --int16-activations detections" in fixed.stdout + fixed.stderr  # said, built or not


def test_the_detection_task_metric_judges_boxes_and_classes(models):
    result = package(models, "detector", "images.npz", "--output-kind", "detections:yolo", "--no-auto-fix",
                     formats=("tflite",))
    assert result.returncode == 1
    assert "detections:yolo" in result.stderr and "class_agreement" in result.stderr  # scores collapsed
    result = package(models, "detector", "images.npz", "--output-kind", "detections=detections:yolo:0.3",
                     "--auto-fix", formats=("tflite",))  # the output named by its Keras layer
    assert result.returncode == 0, result.stderr[-2000:]
    task = manifest_of(models, "detector")["validation"]["artifacts"]["tflite"]["tasks"]["output_0"]
    assert task["passed"] is True and task["values"]["class_agreement"] >= 0.9
    assert task["values"]["score_threshold"] == 0.3 and task["values"]["float_detections"] > 0
    assert "detections:yolo" in result.stdout and "passes" in result.stdout


def test_an_unlabeled_model_under_the_floor_fails_naming_the_output(models):
    """One click in the calibration clips: every artifact lands near 11 dB and no labels would catch it.
    The search tries what the failure names, keeps nothing that does not help, and with 30
    validation samples runs no layer search (its many tries would fit them), so it stops."""
    result = package(models, "long", "long_click.npz", "--eval", models / "long_eval.npz", "--auto-fix")
    assert_user_error(result, "INT8 validation failed", "--allow-accuracy-drop")
    assert "tflite: output 'output_0': SQNR" in result.stderr  # nothing to try for TFLite
    # ONNX: percentile calibration ignores the click; where that is enough the package is written
    # with ONNX alone (partial: exit 1, TFLite named in its failed entries), else both are refused
    onnx_passed = "percentile: margin vs floor: output_0 sqnr" in result.stdout and "passes" in result.stdout
    assert "onnx: output 'output_0': SQNR" in result.stderr or onnx_passed
    assert "< 20 dB" in result.stderr
    assert "search onnx: --calibration-method percentile" in result.stdout  # tried, once
    assert result.stdout.count("search onnx: --calibration-method percentile") == 1
    assert "no layer search on 30 validation samples" in result.stderr
    assert "layers by their effect" not in result.stdout
    if "without tflite" in result.stderr:  # ONNX passed: written without TFLite
        manifest = manifest_of(models, "long")
        assert [f["target"] for f in manifest["failed"]] == ["tflite"]
        assert "tflite" not in {a["target"] for a in manifest["artifacts"] if not a.get("precision", "").startswith("float")}
    else:
        assert not (models / "out" / "long.edgekit").exists()


def test_onnx_reports_the_quantization_and_this_cpus_kernels(models):
    """The user's own scheme (U8S8, no variants): this CPU runs that artifact, so its fused kernels
    judge it. The real CPU decides what they do (saturating 16-bit pair sums without VNNI)."""
    result = package(models, "seg", "images.npz", "--allow-accuracy-drop", "--onnx-activations", "u8",
                     formats=("onnx",))
    assert result.returncode == 0, result.stderr[-2000:]
    record = manifest_of(models, "seg")["validation"]["artifacts"]["onnx"]
    quantized, fused = record["quantization"]["sqnr_db"], record["sqnr_db"]
    assert "as quantized" in result.stdout and "on this CPU's fused int8 kernels" in result.stdout
    assert record["judged_by"].startswith("on this CPU's fused int8 kernels")
    features = int8_kernel_features()
    if "no VNNI" in features:  # x86 without VNNI: u8s8 pairs saturate in 16 bits (this model shows it)
        assert quantized - fused > 3, (quantized, fused)
        assert "fused int8 kernels saturate" in result.stderr and "AVX2 and no VNNI" in result.stderr
        assert "--reduce-range" in result.stderr
        assert record["notes"] and "saturate" in record["notes"][0]
        reduced = package(models, "seg", "images.npz", "--onnx-activations", "u8", "--reduce-range",
                          formats=("onnx",))
        assert reduced.returncode == 0, reduced.stderr[-2000:]
        again = manifest_of(models, "seg")["validation"]["artifacts"]["onnx"]
        assert again["sqnr_db"] > fused + 3 and "saturate" not in reduced.stderr
    else:
        assert abs(quantized - fused) < 3, (quantized, fused, features)


def test_an_s8s8_build_for_other_devices_is_judged_as_quantized_with_this_cpu_shown(models):
    """S8S8 is for ARM, TensorRT and VNNI CPUs, which compute the QDQ graph exactly; a package for a
    Pi is not judged by the build machine's kernels. The x86 variant this CPU runs is judged by them."""
    result = package(models, "seg", "images.npz", "--profile", "rpi5", formats=("onnx",))
    assert result.returncode == 0, result.stderr[-2000:]
    record = manifest_of(models, "seg")["validation"]["artifacts"]["onnx"]
    assert record["judged_by"].startswith("as quantized") and "none of the package's devices" in record["judged_by"]
    assert record["sqnr_db"] == record["quantization"]["sqnr_db"] and "on_this_cpu" in record
    assert "judged as quantized" in result.stdout
    both = package(models, "seg", "images.npz", "--profile", "rpi5", "--profile", "x86-cpu", "--allow-accuracy-drop",
                   formats=("onnx",))
    assert both.returncode == 0, both.stderr[-2000:]
    records = manifest_of(models, "seg")["validation"]["artifacts"]
    here = [key for key, r in records.items() if r.get("judged_by", "").startswith("on this CPU")]
    vnni = "VNNI" in int8_kernel_features() and "no VNNI" not in int8_kernel_features()
    assert here == ["onnx-u8s8" if vnni else "onnx-u8s7"], {k: r.get("judged_by") for k, r in records.items()}
    assert records["onnx"]["judged_by"].startswith("as quantized") and "this CPU runs" in records["onnx"]["judged_by"]


def test_segmentation_masks_are_judged_by_iou(models):
    result = package(models, "segtrained", "smooth.npz", "--output-kind", "segmentation", "--reduce-range")
    assert result.returncode == 0, result.stderr[-2000:]
    tasks = {fmt: manifest_of(models, "segtrained")["validation"]["artifacts"][fmt]["tasks"]["output_0"]
             for fmt in ("tflite", "onnx")}
    for task in tasks.values():
        assert task["task"] == "segmentation" and task["values"]["mean_iou"] >= 0.9 and task["passed"]
        assert task["values"]["classes"] == 4


def test_a_kind_that_does_not_fit_the_output_is_refused_before_building(models):
    result = package(models, "audio", "audio.npz", "--output-kind", "segmentation")
    assert_user_error(result, "rank 2", "use classes or values")
    assert "Calibrating" not in result.stdout + result.stderr
    result = package(models, "audio", "audio.npz", "--output-kind", "boxes")
    assert result.returncode == 2 and "unknown output kind 'boxes'" in result.stderr


def test_a_metric_function_lands_in_the_table_and_the_manifest(models, tmp_path):
    (tmp_path / "onset_metric.py").write_text(textwrap.dedent("""
        import numpy as np

        def onset_recall(float_outputs, int8_outputs, labels):
            ref, got = float_outputs["output_0"], int8_outputs["output_0"]
            hits = np.mean((ref > 0.05) == (got > 0.05))
            return {"onset_recall": float(hits), "samples": len(ref), "passed": bool(hits >= 0.5)}

        def strict(float_outputs, int8_outputs, labels):
            return {"onset_recall": 0.1, "passed": False}
    """))
    good = package(models, "audio", "audio.npz", "--metric", f"{tmp_path}/onset_metric.py:onset_recall",
                   formats=("tflite",))
    assert good.returncode == 0, good.stderr[-2000:]
    record = manifest_of(models, "audio")["validation"]["artifacts"]["tflite"]["metric"]
    assert record["task"].endswith("onset_metric.py:onset_recall") and record["passed"] is True
    assert 0.5 <= record["values"]["onset_recall"] <= 1 and record["values"]["samples"] == 60  # 120 clips: half held out (up to the 100 a 99% gate needs)
    assert "onset_recall" in good.stdout and "passes" in good.stdout
    bad = package(models, "audio", "audio.npz", "--metric", f"{tmp_path}/onset_metric.py:strict", formats=("tflite",))
    assert_user_error(bad, "onset_metric.py:strict: onset_recall 0.1 (passed: False)", "--allow-accuracy-drop")
    missing = package(models, "audio", "audio.npz", "--metric", f"{tmp_path}/onset_metric.py:nothing")
    assert_user_error(missing, "has no function 'nothing'", "")
