#!/usr/bin/env python
"""Benchmark INT8 quality: per-output SQNR of every format, before and after ``--auto-fix``.

    .venv/bin/python scripts/bench_quality.py [--output out/bench/bench_quality.json]

Models, built locally in seconds: the bundled digits classifier (labelled), a detector head
concatenating boxes (0..300) and class scores, a segmentation head (per-pixel logits, trained
briefly on a colour task) and a 1-D audio model (four onset strengths). Each is packaged for every format twice, as is and with
``--auto-fix`` (both with ``--allow-accuracy-drop`` so the numbers are kept whatever the gates
say), and the validation record is reduced to: per output SQNR, the worst group of channels,
the ONNX quantization without fused kernels, task metrics, gate failures and fixes kept.
Prints a table and the JSON, saves the JSON.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchio import print_and_save  # noqa: E402

import edgekit  # noqa: E402
from edgekit.devices import int8_kernel_features  # noqa: E402
from edgekit.formats import FORMATS  # noqa: E402

BUILD = """
import keras
keras.utils.set_random_seed(0)
root = {root!r}
image = keras.Input((16, 16, 3), name="image")
d = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, activation="relu")(image))
boxes = keras.layers.Rescaling(300.0)(keras.layers.Dense(4, activation="sigmoid")(d))
scores = keras.layers.Dense(3, activation="softmax")(d)
keras.Model(image, keras.layers.Concatenate(name="detections")([boxes, scores])).save(root + "/detector.keras")
# segmentation: trained for a few seconds to label each pixel by its dominant colour (or dark),
# so its class margins are a trained model's, not a random one's near-ties
import numpy as np
rng = np.random.default_rng(1)
fields = rng.uniform(0, 1, (400, 4, 4, 3)).astype(np.float32).repeat(4, axis=1).repeat(4, axis=2)
masks = np.where(fields.max(axis=-1) < 0.3, 3, fields.argmax(axis=-1))
img = keras.Input((16, 16, 3), name="image")
s = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(img)
segmenter = keras.Model(img, keras.layers.Conv2D(4, 1, name="mask")(s))
segmenter.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
segmenter.fit(fields, masks, epochs=30, batch_size=32, verbose=0)
segmenter.save(root + "/segmentation.keras")
audio = keras.Input((256,), name="audio")
a = keras.layers.Reshape((256, 1))(audio)
a = keras.layers.GlobalAveragePooling1D()(keras.layers.Conv1D(8, 9, strides=4, activation="relu")(a))
keras.Model(audio, keras.layers.Dense(4, name="onsets")(a)).save(root + "/audio.keras")
"""


def build_models(work: Path) -> dict[str, dict[str, Any]]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run([sys.executable, "-c", textwrap.dedent(BUILD.format(root=str(work)))], check=True, env=env)
    rng = np.random.default_rng(0)
    fields = rng.uniform(0, 1, (150, 4, 4, 3)).astype(np.float32)
    np.savez(work / "images.npz", image=fields.repeat(4, axis=1).repeat(4, axis=2))
    t = np.linspace(0, 1, 256, dtype=np.float32)
    clips = np.stack([np.sin(2 * np.pi * rng.uniform(5, 40) * t) * rng.uniform(0.1, 1) for _ in range(150)])
    np.savez(work / "audio.npz", audio=clips.astype(np.float32))
    return {
        "classifier (digits, labelled)": {"model": ROOT / "models/digits/digits.keras",
                                          "calibration": ROOT / "models/digits/data/calibration.npz",
                                          "eval": ROOT / "models/digits/data/eval.npz"},
        "detector head (boxes 0..300 + scores)": {"model": work / "detector.keras",
                                                  "calibration": work / "images.npz",
                                                  "output_kinds": {"": "detections:yolo"}},
        "segmentation head (logits)": {"model": work / "segmentation.keras", "calibration": work / "images.npz",
                                       "output_kinds": {"": "segmentation"}},
        "audio (onset strengths)": {"model": work / "audio.keras", "calibration": work / "audio.npz"},
    }


def reduce(manifest: Any) -> dict[str, Any]:
    """Per format: every output's SQNR, its worst group of channels, the unfused ONNX numbers."""
    found = {}
    for fmt, record in manifest.validation["artifacts"].items():
        if not record.get("measured"):
            found[fmt] = {"measured": False, "reason": record.get("reason")}
            continue
        outputs = record.get("outputs") or {manifest.outputs[0].name: record}
        found[fmt] = {
            "outputs": {name: {"sqnr_db": _round(o["sqnr_db"]),
                               "worst_slice_sqnr_db": _round(o["worst_slice"]["sqnr_db"]) if o.get("worst_slice")
                               else None,
                               "distinct_values": o["distinct_values"]} for name, o in outputs.items()},
            "quantization_sqnr_db": _round(record["quantization"]["sqnr_db"]) if record.get("quantization") else None,
            "tasks": {name: {k: _round(v) for k, v in t["values"].items()} | {"passed": t["passed"]}
                      for name, t in (record.get("tasks") or {}).items()},
            "failed_gates": [g["what"] for g in record.get("gates", [])],
            "fixes_kept": [a["change"] for a in record.get("auto_fix", []) if a.get("kept")],
            "passed": record.get("passed"),
        }
    return found


def _round(value: Any) -> Any:
    return None if value is None else round(float(value), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "bench_quality.json")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "bench_quality",
        "machine": {"python": platform.python_version(), "machine": platform.machine(),
                    "int8_kernels": int8_kernel_features()},
        "min_sqnr_db": 20.0,
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-quality-") as tmp:
        work = Path(tmp)
        for title, spec in build_models(work).items():
            runs = {}
            for label, auto_fix in (("before", False), ("after_auto_fix", True)):
                result = edgekit.package(
                    str(spec["model"]), str(spec["calibration"]), str(work / label), eval=_str(spec.get("eval")),
                    formats=list(FORMATS), output_kinds=spec.get("output_kinds", {}), auto_fix=auto_fix,
                    allow_accuracy_drop=True, force=True,
                )
                runs[label] = reduce(result.manifest)
            report["models"][title] = runs
    print_table(report)
    print_and_save(report, args.output)


def _str(path: Any) -> str | None:
    return None if path is None else str(path)


def print_table(report: dict[str, Any]) -> None:
    print(f"{'model':40} {'format':7} {'output':10} {'SQNR before':>12} {'worst slice':>12} "
          f"{'SQNR after':>11} {'worst slice':>12}  fixes kept", file=sys.stderr)
    for title, runs in report["models"].items():
        for fmt, before in runs["before"].items():
            after = runs["after_auto_fix"].get(fmt, {})
            if not before.get("outputs"):
                print(f"{title:40} {fmt:7} {'':10} {'not measurable here':>12}", file=sys.stderr)
                continue
            for name, b in before["outputs"].items():
                a = after.get("outputs", {}).get(name, {})
                print(f"{title:40} {fmt:7} {name:10} {_db(b['sqnr_db']):>12} {_db(b['worst_slice_sqnr_db']):>12} "
                      f"{_db(a.get('sqnr_db')):>11} {_db(a.get('worst_slice_sqnr_db')):>12}  "
                      f"{', '.join(after.get('fixes_kept', [])) or '-'}", file=sys.stderr)


def _db(value: Any) -> str:
    return "-" if value is None else f"{value:.1f} dB"


if __name__ == "__main__":
    main()
