#!/usr/bin/env python
"""The verdict matrix: is edgekit's pass/fail right, model by model and format by format?

    .venv/bin/python scripts/bench_quality.py [--output out/bench/bench_quality.json] [--only NAME ...]

Models, built locally in seconds (``models/verdict/build.py`` and below): classifiers with labels
(digits, shapes from an image folder whose order is not the model's), a detector head as Keras
and as a SavedModel and a YOLOv8-style ONNX head (boxes joined to scores: collapsed by default;
with ``--auto-fix`` repaired), a YOLOv5-style export (levels joined on the anchor axis), 360 sigmoid pitch bins, an
L2 embedding with dead units, a sigmoid probability map, a trained segmentation head, an
audio model whose calibration holds one click (its INT8 ranges are wasted on it), and two small
sigmoid heads (3 regressed values in 0..1, 6 multi-label outputs) and a CTC text-line recognizer
with attention blocks (``models/attention/build.py``; truth: lines read right), each calibrated
on its range and on data 20x too narrow. Every quantized artifact is judged, the ONNX scheme builds too, and
its truth is computed in the arithmetic its verdict used (``judged_by``: this CPU's fused kernels,
or the QDQ graph as quantized for builds meant for other devices).

Each is packaged with default flags (``--allow-accuracy-drop`` so that failed artifacts are kept
to be measured), giving edgekit's verdict per format. The truth comes from this script alone: a
task metric on a separate test set, computed from the float source (Keras, ONNX Runtime) and
from the INT8 artifact run through ``edgekit.load``, with each task's own rule (accuracy drop,
raw pitch accuracy within 50 cents, speaker identification, mask IoU against the true masks,
detection class agreement and score error, relative error of regressed values). It prints verdict
vs truth for every model x format and saves the JSON; the run fails (exit 1) if any verdict is wrong.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "models" / "verdict"))

from benchio import print_and_save  # noqa: E402

import build as verdict_models  # noqa: E402

sys.path.insert(0, str(ROOT / "models" / "attention"))
sys.modules.pop("build")
import build as attention_models  # noqa: E402
import edgekit  # noqa: E402
from edgekit.formats.onnx.kernels import int8_kernel_features  # noqa: E402

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}

EXTRA_KERAS = """
import keras, numpy as np
keras.utils.set_random_seed(0)
root = {root!r}
image = keras.Input((16, 16, 3), name="image")
d = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, activation="relu")(image))
boxes = keras.layers.Rescaling(300.0)(keras.layers.Dense(4, activation="sigmoid")(d))
scores = keras.layers.Dense(3, activation="softmax")(d)
detector = keras.Model(image, keras.layers.Concatenate(name="detections")([boxes, scores]))
detector.save(root + "/detector.keras")
import tensorflow as tf
tf.saved_model.save(detector, root + "/detector_savedmodel")  # a SavedModel: its graph, not Keras layers
rng = np.random.default_rng(1)
fields = rng.uniform(0, 1, (400, 4, 4, 3)).astype(np.float32).repeat(4, axis=1).repeat(4, axis=2)
masks = np.where(fields.max(axis=-1) < 0.3, 3, fields.argmax(axis=-1))
img = keras.Input((16, 16, 3), name="image")
s = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(img)
segmenter = keras.Model(img, keras.layers.Conv2D(4, 1, name="mask")(s))
segmenter.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
segmenter.fit(fields, masks, epochs=30, batch_size=32, verbose=0)
segmenter.save(root + "/segmentation.keras")
long = keras.Input((4096,), name="audio")
a = keras.layers.Reshape((4096, 1))(long)
a = keras.layers.GlobalAveragePooling1D()(keras.layers.Conv1D(8, 9, strides=4, activation="relu")(a))
keras.Model(long, keras.layers.Dense(4, name="onsets")(a)).save(root + "/onsets.keras")
# two small sigmoid heads trained for seconds: a regression squashed into 0..1 (3 values) and a
# multi-label classifier (6 independent yes/no labels)
rng = np.random.default_rng(2)
x = rng.normal(size=(2000, 16)).astype(np.float32)
w = rng.normal(size=(16, 6)).astype(np.float32)
for name, units, targets in (("sigmoid3", 3, 1 / (1 + np.exp(-0.5 * (x @ w[:, :3])))),
                             ("multilabel6", 6, (x @ w > 0).astype(np.float32))):
    inp = keras.Input((16,), name="features")
    hidden = keras.layers.Dense(32, activation="relu")(inp)
    head = keras.Model(inp, keras.layers.Dense(units, activation="sigmoid", name="head")(hidden))
    head.compile("adam", "binary_crossentropy")
    head.fit(x, targets, epochs=40, batch_size=64, verbose=0)
    head.save(root + "/" + name + ".keras")
"""


@dataclass
class Case:
    """One model: how to package it, its test inputs (model-ready) and the truth rule."""

    model: Path
    calibration: Path
    formats: list[str]
    test_x: np.ndarray
    truth: Callable[[np.ndarray, np.ndarray], tuple[bool, str]]  # (float outputs, INT8 outputs) -> good?, why
    options: dict[str, Any] = field(default_factory=dict)


def _smooth(n: int, seed: int) -> np.ndarray:
    fields = np.random.default_rng(seed).uniform(0, 1, (n, 4, 4, 3)).astype(np.float32)
    return fields.repeat(4, axis=1).repeat(4, axis=2)


def build_cases(work: Path) -> dict[str, Case]:
    subprocess.run([sys.executable, str(ROOT / "models/verdict/build.py"), *verdict_models.BUILDERS,
                    "--output", str(work)], check=True, env=ENV, capture_output=True)
    subprocess.run([sys.executable, "-c", textwrap.dedent(EXTRA_KERAS.format(root=str(work)))], check=True, env=ENV)
    np.savez(work / "smooth.npz", image=_smooth(200, 0))
    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, 4096, dtype=np.float32)
    clips = np.stack([np.sin(2 * np.pi * rng.uniform(50, 400) * t) * rng.uniform(0.1, 1) for _ in range(260)])
    clips = clips.astype(np.float32)
    click = clips[:200].copy()
    click[7, 1000] = 200  # one click at 200x the clips' level: min/max spends the INT8 range on it
    np.savez(work / "click.npz", audio=click)
    np.savez(work / "clean.npz", audio=clips[200:230])  # the user's evaluation clips: no click
    digits = np.load(ROOT / "models/digits/data/eval.npz")
    pitch_x, pitch_bins = verdict_models.pitch_frames(300, 7, with_bins=True)
    mel_x, speakers = verdict_models.mel_frames(300, 7)
    scenes_x, scenes_masks = verdict_models.disc_scenes(150, 7)
    shapes, shape_classes = verdict_models.shape_images(150, 7)
    yolo_fields = np.random.default_rng(7).uniform(0, 1, (100, 3, 8, 8)).astype(np.float32)
    test_fields = _smooth(150, 7)
    features = np.random.default_rng(9).normal(size=(600, 16)).astype(np.float32)
    np.savez(work / "features.npz", features=features[:300])  # the range the heads will see
    np.savez(work / "features_narrow.npz", features=features[:300] * 0.05)  # 20x too narrow
    np.savez(work / "features_eval.npz", features=features[300:400])
    features_test = features[400:]
    subprocess.run([sys.executable, str(ROOT / "models/attention/build.py"), "recognizer", "--output", str(work)],
                   check=True, env=ENV, capture_output=True)
    lines = np.load(work / "recognizer/lines.npz")["line"]
    np.savez(work / "lines_narrow.npz", line=lines * 0.05)
    np.savez(work / "lines_eval.npz", line=np.load(work / "recognizer/heldout.npz")["line"][:100])
    test_lines, test_texts = attention_models.text_lines(200, 7)
    recognizer = {
        f"CTC text-line recognizer (attention, opset 11), calibrated {how}": Case(
            work / "recognizer/recognizer.onnx", work / calibration, ["tflite", "onnx"], test_lines,
            lambda f, q: _lines_truth(f, q, test_texts), {"eval": str(work / "lines_eval.npz")})
        for how, calibration in (("on its range", "recognizer/lines.npz"), ("on data 20x too narrow",
                                                                            "lines_narrow.npz"))}
    sigmoid_heads = {
        f"{title}, calibrated {how}": Case(
            work / f"{model}.keras", work / f"features{suffix}.npz", ["tflite", "onnx"], features_test, truth,
            {"eval": str(work / "features_eval.npz")})
        for title, model, truth in (("3 sigmoid outputs (regression in 0..1)", "sigmoid3", _unit_values_truth),
                                    ("multi-label head, 6 sigmoid labels", "multilabel6", _labels_truth))
        for how, suffix in (("on its range", ""), ("on data 20x too narrow", "_narrow"))}
    return {
        "digits classifier (labelled .npz)": Case(
            ROOT / "models/digits/digits.keras", ROOT / "models/digits/data/calibration.npz", ["tflite", "onnx"],
            digits["x"].reshape(-1, 8, 8, 1).astype(np.float32) / 255.0,
            lambda f, q: _accuracy_drop(f, q, digits["y"]),
            {"eval": str(ROOT / "models/digits/data/eval.npz")}),
        "shapes classifier (image folder, --labels)": Case(
            work / "shapes/shapes.keras", work / "shapes/images", ["tflite", "onnx"],
            np.stack(shapes)[..., None].astype(np.float32) / 255.0,
            lambda f, q: _accuracy_drop(f, q, np.asarray(shape_classes)),
            {"labels_file": str(work / "shapes/labels.txt")}),
        "detector head, Keras (boxes + softmax, concat)": Case(
            work / "detector.keras", work / "smooth.npz", ["tflite", "onnx"], test_fields, _detector_truth),
        "detector head, Keras, --auto-fix": Case(
            work / "detector.keras", work / "smooth.npz", ["tflite", "onnx"], test_fields, _detector_truth,
            {"auto_fix": True}),
        "detector head, SavedModel (tf.saved_model.save)": Case(
            work / "detector_savedmodel", work / "smooth.npz", ["tflite", "onnx"], test_fields, _detector_truth),
        "YOLOv8-style head, ONNX [N, 22, A]": Case(
            work / "yolo/yolo.onnx", work / "yolo/images.npz", ["onnx"],
            yolo_fields.repeat(8, axis=2).repeat(8, axis=3), _detector_truth),
        "YOLOv8-style head, ONNX, --auto-fix": Case(
            work / "yolo/yolo.onnx", work / "yolo/images.npz", ["onnx"],
            yolo_fields.repeat(8, axis=2).repeat(8, axis=3), _detector_truth, {"auto_fix": True}),
        "YOLOv5-style head, ONNX [N, A, 5+C], 2 levels": Case(
            work / "yolov5/yolov5.onnx", work / "yolov5/images.npz", ["onnx"],
            yolo_fields.repeat(8, axis=2).repeat(8, axis=3), _yolov5_truth),
        "pitch, 360 sigmoid bins": Case(
            work / "pitch/pitch.keras", work / "pitch/frames.npz", ["tflite", "onnx"], pitch_x,
            lambda f, q: _pitch_truth(f, q, pitch_bins)),
        "speaker embedding, L2 + dead units": Case(
            work / "embedding/embedding.keras", work / "embedding/mel.npz", ["onnx"], mel_x,
            lambda f, q: _speaker_truth(f, q, speakers)),
        "probability map [N, 1, H, W]": Case(
            work / "probmap/probmap.onnx", work / "probmap/scenes.npz", ["onnx"], scenes_x,
            lambda f, q: _mask_truth(f, q, scenes_masks)),
        "segmentation, trained (logits)": Case(
            work / "segmentation.keras", work / "smooth.npz", ["tflite", "onnx"], test_fields, _segmentation_truth,
            {"output_kinds": {"": "segmentation"}}),
        "onset strengths, one click in calibration": Case(
            work / "onsets.keras", work / "click.npz", ["tflite", "onnx"], clips[230:], _values_truth,
            {"eval": str(work / "clean.npz")}),
        **sigmoid_heads,
        **recognizer,
    }


# --- the truth: task metrics computed here, from outputs only ---------------------------------


def _accuracy_drop(f: np.ndarray, q: np.ndarray, y: np.ndarray) -> tuple[bool, str]:
    drop = 100 * (np.mean(f.argmax(1) == y) - np.mean(q.argmax(1) == y))
    return drop <= 1.0, f"accuracy {100 * np.mean(f.argmax(1) == y):.1f}% -> {100 * np.mean(q.argmax(1) == y):.1f}%"


def _detector_truth(f: np.ndarray, q: np.ndarray) -> tuple[bool, str]:
    """Scores are what a detector ranks and thresholds by: on the anchors float is confident about
    (best score >= 0.25), the INT8 class must be float's and the score within 0.05."""
    if f.ndim == 3:  # [N, 4+C, A] -> one row per anchor
        f, q = f.transpose(0, 2, 1).reshape(-1, f.shape[1]), q.transpose(0, 2, 1).reshape(-1, q.shape[1])
    confident = f[:, 4:].max(axis=1) >= 0.25
    if not confident.any():
        return True, "no confident anchors"
    same = np.mean(f[confident, 4:].argmax(1) == q[confident, 4:].argmax(1))
    error = float(np.mean(np.abs(f[confident, 4:].max(1) - q[confident, 4:].max(1))))
    return bool(same >= 0.95 and error <= 0.05), f"class agreement {100 * same:.1f}%, score error {error:.3f}"


def _yolov5_truth(f: np.ndarray, q: np.ndarray) -> tuple[bool, str]:
    """YOLOv5 rows [box, objectness, classes]: the score is objectness x class probability."""
    def scored(rows: np.ndarray) -> np.ndarray:
        rows = rows.reshape(-1, rows.shape[-1])
        return np.concatenate([rows[:, :4], rows[:, 4:5] * rows[:, 5:]], axis=1)

    return _detector_truth(scored(f), scored(q))


def _pitch_truth(f: np.ndarray, q: np.ndarray, bins: np.ndarray) -> tuple[bool, str]:
    """Raw pitch accuracy: the peak bin within 50 cents (2.5 bins) of the true pitch."""
    rpa_f = np.mean(np.abs(f.argmax(1) - bins) <= 2.5)
    rpa_q = np.mean(np.abs(q.argmax(1) - bins) <= 2.5)
    return bool(100 * (rpa_f - rpa_q) <= 1.0), f"raw pitch accuracy {100 * rpa_f:.1f}% -> {100 * rpa_q:.1f}%"


def _speaker_truth(f: np.ndarray, q: np.ndarray, speakers: np.ndarray) -> tuple[bool, str]:
    """Speaker identification by nearest neighbour among the other test samples."""
    def accuracy(e: np.ndarray) -> float:
        similarity = e @ e.T
        np.fill_diagonal(similarity, -np.inf)
        return float(np.mean(speakers[similarity.argmax(1)] == speakers))

    a_f, a_q = accuracy(f), accuracy(q)
    return bool(100 * (a_f - a_q) <= 1.0), f"speaker identification {100 * a_f:.1f}% -> {100 * a_q:.1f}%"


def _mask_truth(f: np.ndarray, q: np.ndarray, masks: np.ndarray) -> tuple[bool, str]:
    def iou(p: np.ndarray) -> float:
        pred, true = p >= 0.5, masks >= 0.5
        return float(np.sum(pred & true) / max(np.sum(pred | true), 1))

    return bool(100 * (iou(f) - iou(q)) <= 1.0), f"IoU with the true discs {100 * iou(f):.1f}% -> {100 * iou(q):.1f}%"


def _segmentation_truth(f: np.ndarray, q: np.ndarray) -> tuple[bool, str]:
    """Pixel accuracy against the task's own labels (dominant colour, or dark), from the inputs."""
    inputs = _smooth(150, 7)
    truth = np.where(inputs.max(axis=-1) < 0.3, 3, inputs.argmax(axis=-1))
    a_f, a_q = np.mean(f.argmax(-1) == truth), np.mean(q.argmax(-1) == truth)
    return bool(100 * (a_f - a_q) <= 1.0), f"pixel accuracy {100 * a_f:.1f}% -> {100 * a_q:.1f}%"


def _values_truth(f: np.ndarray, q: np.ndarray) -> tuple[bool, str]:
    """Regressed values: the RMS error within 10% of the values' RMS."""
    relative = float(np.sqrt(np.mean((q - f) ** 2)) / np.sqrt(np.mean(f**2)))
    return bool(relative <= 0.10), f"relative RMS error {100 * relative:.1f}%"


def _unit_values_truth(f: np.ndarray, q: np.ndarray) -> tuple[bool, str]:
    """Values squashed into 0..1 (normalised coordinates, scores): mean absolute error <= 0.02."""
    error = float(np.mean(np.abs(q - f)))
    return bool(error <= 0.02), f"mean |error| {error:.3f} on 0..1 outputs"


def _lines_truth(f: np.ndarray, q: np.ndarray, texts: list[list[int]]) -> tuple[bool, str]:
    """What a recognizer's user reads: lines decoded (greedy CTC) exactly right, against the true
    texts; at most 1 pp of lines lost."""
    right_f = np.mean([d == t for d, t in zip(attention_models.greedy_ctc(f), texts)])
    right_q = np.mean([d == t for d, t in zip(attention_models.greedy_ctc(q), texts)])
    return bool(100 * (right_f - right_q) <= 1.0), f"lines read right {100 * right_f:.1f}% -> {100 * right_q:.1f}%"


def _labels_truth(f: np.ndarray, q: np.ndarray) -> tuple[bool, str]:
    """Independent yes/no labels at 0.5: at most 1% of the (sample, label) decisions flip."""
    flips = float(np.mean((f >= 0.5) != (q >= 0.5)))
    return bool(flips <= 0.01), f"label flips {100 * flips:.2f}%"


# --- running ----------------------------------------------------------------------------------


def float_outputs(model: Path, x: np.ndarray, work: Path) -> np.ndarray:
    """The float source on the test inputs: ONNX Runtime for .onnx, Keras (in a child) otherwise."""
    if model.is_dir():  # a SavedModel: its serving signature
        np.save(work / "x.npy", x)
        subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import numpy as np, tensorflow as tf
            serve = tf.saved_model.load({str(model)!r}).signatures["serving_default"]
            out = serve(tf.constant(np.load({str(work / 'x.npy')!r})))
            np.save({str(work / 'y.npy')!r}, next(iter(out.values())).numpy())
        """)], check=True, env=ENV)
        return np.load(work / "y.npy")
    if model.suffix == ".onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        return session.run(None, {session.get_inputs()[0].name: x})[0]
    np.save(work / "x.npy", x)
    subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import keras, numpy as np
        model = keras.models.load_model({str(model)!r}, compile=False)
        np.save({str(work / 'y.npy')!r}, np.asarray(model.predict(np.load({str(work / 'x.npy')!r}), verbose=0)))
    """)], check=True, env=ENV)
    return np.load(work / "y.npy")


def int8_outputs(package: Path, artifact: Any, record: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """The artifact on the test inputs, in the arithmetic its verdict was on: an ONNX build for
    other devices (judged as quantized) runs its QDQ graph without fusion, as those devices compute
    it; everything else runs as this machine's runtime runs it."""
    if str(record.get("judged_by", "")).startswith("as quantized"):
        from edgekit.formats.onnx.backend import OnnxRuntimeBackend

        backend = OnnxRuntimeBackend(str(package / artifact.path), threads=2, graph_optimizations=False)
        try:
            return np.concatenate([backend.run(x[i : i + 32])[0] for i in range(0, len(x), 32)])
        finally:
            backend.close()
    exact = "onnx-s8s8" if artifact.key == "onnx" else artifact.key  # this build, not this CPU's best ONNX one
    with edgekit.load(package, artifact=exact) as model:
        return np.concatenate([model.predict_tensor(x[i : i + 32]) for i in range(0, len(x), 32)])


def run_case(title: str, case: Case, work: Path) -> dict[str, Any]:
    options = dict(case.options)
    result = edgekit.package(str(case.model), str(case.calibration), str(work / "out"), formats=case.formats,
                             allow_accuracy_drop=True, force=True, also_float=False, **options)
    validation = result.manifest.validation.to_dict()
    reference = float_outputs(case.model, case.test_x, work)
    rows = {}
    artifacts = {a.key: a for a in result.manifest.artifacts if not a.is_float}
    for fmt in case.formats:
        if fmt not in artifacts:
            rows[fmt] = {"verdict": None, "note": "not built"}
    for key, artifact in artifacts.items():
        record = validation["artifacts"].get(key)
        if artifact.target not in case.formats or record is None or not record.get("measured"):
            rows[key] = {"verdict": None, "note": "not built or not measurable here"}
            continue
        good, why = case.truth(reference, int8_outputs(result.path, artifact, record, case.test_x))
        verdict = bool(record["passed"])
        rows[key] = {"verdict": "pass" if verdict else "fail", "truth": "good" if good else "broken",
                     "right": bool(verdict == good), "truth_metric": why,
                     "judged_by": record.get("judged_by", ""),
                     "failed_gates": [g["what"] for g in record.get("gates", [])]}
        rows[key]["fixes_kept"] = [a["change"] for a in record.get("auto_fix", []) if a.get("kept")
                                   and a.get("stage") != "confirmation"]
    kinds = {name: f"{k['kind']}: {k['evidence']}" for name, k in (validation.get("kinds") or {}).items()}
    return {"kinds": kinds, "formats": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "bench_quality.json")
    parser.add_argument("--only", nargs="*", default=None, help="titles (substrings) of the models to run")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "bench_quality",
        "machine": {"python": platform.python_version(), "machine": platform.machine(),
                    "int8_kernels": int8_kernel_features()},
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-quality-") as tmp:
        work = Path(tmp)
        for title, case in build_cases(work).items():
            if args.only and not any(o in title for o in args.only):
                continue
            print(f"packaging {title} ...", file=sys.stderr)
            report["models"][title] = run_case(title, case, work)
    rows = [(t, f, r) for t, m in report["models"].items() for f, r in m["formats"].items() if r.get("verdict")]
    report["verdicts"] = len(rows)
    report["right"] = sum(1 for _, _, r in rows if r["right"])
    print_table(report)
    print_and_save(report, args.output)
    sys.exit(0 if report["right"] == report["verdicts"] else 1)


def print_table(report: dict[str, Any]) -> None:
    print(f"{'model':50} {'format':9} {'verdict':8} {'truth':7} {'right':6} truth metric", file=sys.stderr)
    for title, model in report["models"].items():
        for fmt, row in model["formats"].items():
            if not row.get("verdict"):
                print(f"{title:50} {fmt:9} {row.get('note')}", file=sys.stderr)
                continue
            fixes = f" (kept {', '.join(row['fixes_kept'])})" if row.get("fixes_kept") else ""
            print(f"{title:50} {fmt:9} {row['verdict']:8} {row['truth']:7} {'yes' if row['right'] else 'NO':6} "
                  f"{row['truth_metric']}{fixes}", file=sys.stderr)
    print(f"verdicts right: {report['right']} of {report['verdicts']}", file=sys.stderr)


if __name__ == "__main__":
    main()
