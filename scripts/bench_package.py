#!/usr/bin/env python
"""Benchmark packaging MobileNetV2 224 for every target: conversion time, sizes, float vs INT8 latency.

    .venv/bin/python scripts/bench_package.py [--threads 2] [--rounds 30] [--output out/bench/bench_package.json]

Also packages the digits reference as a Keras and as a PyTorch model (models/digits,
models/digits_torch) for every target: packaging time, converter seconds, size and accuracy per
target for each source ("sources" in the JSON); and the search ("search" in the JSON; alone with
--search-only): each reference model packaged with plain PTQ (--no-auto-fix) and with default
flags, the plain time, the search's time (its tries and the final build), the configurations
tried, the configuration kept and its final gate margins.

Builds the model from models/mobilenet_v2/build.py, packages it with `edgekit.package
--target all` (100 synthetic calibration images), converts the same SavedModel to float
TFLite and float ONNX, and times float vs INT8 with the LiteRT interpreter and with ONNX
Runtime (CPU) in one run, interleaving rounds so machine drift affects every model alike.
Prints and saves JSON; compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchio import print_and_save, require_signal  # noqa: E402

import edgekit  # noqa: E402
from edgekit import worker  # noqa: E402
from edgekit.formats.tflite.litert import LiteRTBackend, open_interpreter  # noqa: E402
from edgekit.formats.onnx.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from edgekit.formats import FORMATS  # noqa: E402
from edgekit.formats.tflite.build import convert as tflite_convert  # noqa: E402
from edgekit.sources.tensorflow import prepare  # noqa: E402


def cpu_description() -> dict[str, object]:
    """CPU model and the SIMD features that decide INT8 vs float speed on x86 (VNNI above all)."""
    info: dict[str, object] = {"machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if line.startswith("model name"):
            info["model"] = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            info["simd"] = sorted(flags & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "fma"})
            break
    return info


def median_invoke_ms(runners: dict[str, object], rounds: int, per_round: int) -> dict[str, dict[str, float]]:
    """Interleaved timing: each round times every model ``per_round`` times, in rotating order."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for run in runners.values():  # warm-up
        for _ in range(10):
            run()
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            run = runners[name]
            for _ in range(per_round):
                start = time.perf_counter_ns()
                run()
                samples[name].append((time.perf_counter_ns() - start) / 1e6)
    return {
        name: {
            "median_ms": statistics.median(values),
            "p90_ms": float(np.percentile(values, 90)),
            "mean_ms": statistics.fmean(values),
            "runs": len(values),
        }
        for name, values in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--samples", type=int, default=100, help="calibration samples")
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "bench_package.json")
    parser.add_argument("--search-only", action="store_true", help="only the search's figures")
    args = parser.parse_args()
    if args.search_only:
        print_and_save({"benchmark": "bench_package", "machine": {"platform": platform.platform(),
                                                                  **cpu_description()},
                        "search": compare_search()}, args.output)
        return

    with tempfile.TemporaryDirectory(prefix="edgekit-bench-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        started = time.perf_counter()
        # the colour task (as bench_runtime.py): decisions with wide margins, so the INT8 artifacts
        # carry the float model's answers and pass their gates; the default task's did not (SQNR ~4 dB)
        subprocess.run([sys.executable, str(ROOT / "models/mobilenet_v2/build.py"), "--output", str(work),
                        "--samples", str(args.samples), "--eval-samples", "100", "--task", "colour"], check=True,
                       env=env, stdout=subprocess.DEVNULL)
        build_s = time.perf_counter() - started

        started = time.perf_counter()
        result = edgekit.package(
            str(work / "mobilenet_v2.keras"), str(work / "calibration.npz"), str(work / "out"),
            eval=str(work / "eval.npz"), formats=list(FORMATS), samples=args.samples,
            preprocessing={"scale": 1 / 255, "mean": [0.5], "std": [0.5]},
            allow_accuracy_drop=True,  # a speed/size reference: its gates' verdict is recorded, not required
        )
        package_s = time.perf_counter() - started
        manifest = result.manifest
        int8_agreement = require_signal(manifest)

        source = worker.call(prepare, what="export",
                             model_path=str(work / "mobilenet_v2.keras"), kind="keras",
                             export_dir=str(work / "saved_model"))
        float_tflite = work / "model.float32.tflite"
        float_info = worker.call(tflite_convert, what="float conversion",
                                 saved_model=source["saved_model"], calibration_npy="", output=str(float_tflite),
                                 quantize=False)
        float_onnx = work / "model.float32.onnx"
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", source["saved_model"],
                        "--signature_def", "serving_default", "--opset", "17", "--output", str(float_onnx)],
                       check=True, env=env, capture_output=True)
        float_onnx_s = time.perf_counter() - started

        runners = {}
        with edgekit.load(result.path, artifact="onnx") as chosen:  # the ONNX build this CPU runs (onnx-u8s7
            onnx_int8 = chosen.artifact  # without VNNI), not the S8S8 one built for ARM and GPUs
        models = {
            "tflite_float32": float_tflite, "tflite_int8": result.path / manifest.artifact("tflite").path,
            "onnx_float32": float_onnx, "onnx_int8": result.path / onnx_int8.path,
        }
        for name, path in models.items():
            if name.startswith("tflite"):
                interpreter = open_interpreter(str(path), threads=args.threads)
                detail = interpreter.get_input_details()[0]
                interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
                runners[name] = interpreter.invoke
            else:
                backend = OnnxRuntimeBackend(str(path), threads=args.threads)
                x = np.zeros((1, 224, 224, 3), np.float32)
                runners[name] = lambda backend=backend, x=x: backend.run(x)
        latency = median_invoke_ms(runners, args.rounds, args.per_round)
        sizes = {name: path.stat().st_size for name, path in models.items()}
        sizes["coreml_int8_weights"] = manifest.artifact("coreml").bytes

    def ratio(a: str, b: str) -> float:
        return round(latency[a]["median_ms"] / latency[b]["median_ms"], 3)

    report = {
        "benchmark": "bench_package",
        "model": "Keras MobileNetV2 224x224x3 (models/mobilenet_v2/build.py: BatchNorm statistics from data, "
                 "trained 10-class head)",
        "int8_top1_agreement_vs_float": int8_agreement,
        "machine": {"platform": platform.platform(), **cpu_description()},
        "versions": {**manifest.versions, "litert_backend": LiteRTBackend.available(),
                     "onnxruntime_backend": OnnxRuntimeBackend.available()},
        "settings": {"threads": args.threads, "rounds": args.rounds, "per_round": args.per_round,
                     "calibration_samples": args.samples, "onnx_int8_timed": onnx_int8.key},
        "seconds": {
            "build_model": round(build_s, 2),
            "edgekit_package_all_targets": round(package_s, 2),
            "converter_calls": {a.key: a.converter.get("seconds") for a in manifest.artifacts},
            "float_tflite_conversion": float_info["seconds"],
            "float_onnx_tf2onnx": round(float_onnx_s, 2),
        },
        "size_bytes": sizes,
        "ratios": {
            "tflite_int8_size_of_float": round(sizes["tflite_int8"] / sizes["tflite_float32"], 4),
            "onnx_int8_size_of_float": round(sizes["onnx_int8"] / sizes["onnx_float32"], 4),
            "tflite_int8_speedup_median": ratio("tflite_float32", "tflite_int8"),
            "onnx_int8_speedup_median": ratio("onnx_float32", "onnx_int8"),
        },
        "latency": latency,
        "validation_int8_vs_float": manifest.validation.to_dict()["artifacts"],
        "failed_targets": manifest.failed,
        "sources": compare_sources(),
        "search": compare_search(),
    }
    print_and_save(report, args.output)


def compare_sources() -> dict[str, dict[str, object]]:
    """The digits reference as a Keras model, as a PyTorch model and as that model's ONNX export:
    packaging time, and per target the converter's seconds, the artifact's size, its accuracy and
    the float conversion's SQNR (PyTorch's and ONNX's TFLite keep litert-torch's float softmax,
    hence allow_float_ops)."""
    digits, torch_digits = ROOT / "models" / "digits", ROOT / "models" / "digits_torch"
    found = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-sources-") as tmp:
        onnx_file = _export_torch_digits_to_onnx(torch_digits, Path(tmp))
        for source, model, data in (("keras", digits / "digits.keras", digits / "data"),
                                    ("pytorch", f"{torch_digits / 'model.py'}:factory", torch_digits / "data"),
                                    ("onnx", onnx_file, torch_digits / "data")):
            started = time.perf_counter()
            result = edgekit.package(str(model), str(data / "calibration.npz"), str(Path(tmp) / source),
                                     eval=str(data / "eval.npz"), formats=list(FORMATS), allow_float_ops=True,
                                     name=f"digits_{source}")
            validation = result.manifest.validation.to_dict()["artifacts"]
            found[source] = {
                "package_all_targets_s": round(time.perf_counter() - started, 2),
                "targets": {a.key: {"converter_s": a.converter.get("seconds"), "size_bytes": a.bytes,
                                       "tool": a.converter.get("tool"), "float_ops": sorted({o["op"] for o in a.float_ops}),
                                       "accuracy": validation[a.key].get("accuracy"),
                                       "sqnr_db": validation[a.key].get("sqnr_db"),
                                       "float_conversion_sqnr_db": (validation[a.key].get("float_conversion")
                                                                    or {}).get("sqnr_db")}
                            for a in result.manifest.artifacts},
            }
    return found


SEARCH_MODELS = {  # name: (how to build it, model file, calibration, eval, formats)
    "digits (passes plain INT8)": (None, ROOT / "models/digits/digits.keras", ROOT / "models/digits/data/calibration.npz",
                                   ROOT / "models/digits/data/eval.npz", ["tflite", "onnx"]),
    "outlier_cnn (Keras CNN, 97.7% plain top-1 agreement)": ("outlier_cnn", "outlier_cnn/outlier_cnn.keras",
                                                             "outlier_cnn/calibration.npz", "outlier_cnn/eval.npz",
                                                             ["tflite", "onnx", "coreml"]),
    # ONNX only: its TFLite route (ONNX -> PyTorch -> litert-torch) cannot trace the head's grid (README Limits)
    "yolo (detector head, score rows collapse)": ("yolo", "yolo/yolo.onnx", "yolo/images.npz", None, ["onnx"]),
}


def compare_search() -> dict[str, dict[str, object]]:
    """Per reference model and format: plain PTQ's time and verdict, the search's time (default
    flags minus plain), the configurations it tried, the one it kept and the final margins."""
    found: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-search-") as tmp:
        work = Path(tmp)
        for name, (builder, model, calibration, held_out, formats) in SEARCH_MODELS.items():
            if builder is not None:
                subprocess.run([sys.executable, str(ROOT / "models/verdict/build.py"), builder, "--output", str(work)],
                               check=True, capture_output=True)
                model, calibration = work / model, work / calibration
                held_out = work / held_out if held_out else None
            rows: dict[str, object] = {}
            for fmt in formats:
                timings, results = {}, {}
                for mode, auto_fix in (("plain", False), ("default", True)):
                    started = time.perf_counter()
                    results[mode] = edgekit.package(str(model), str(calibration), str(work / f"{mode}-{fmt}"),
                                                    eval=str(held_out) if held_out else None, formats=[fmt],
                                                    auto_fix=auto_fix, allow_accuracy_drop=True, force=True,
                                                    also_float=False, profiles=["x86-cpu"], name=f"{builder}-{fmt}")
                    timings[mode] = time.perf_counter() - started
                record = results["default"].manifest.validation.artifact(fmt)
                plain = results["plain"].manifest.validation.artifact(fmt)
                tries = list(record.auto_fix)
                artifact = results["default"].manifest.artifact(fmt)
                rows[fmt] = {
                    "plain_ptq_s": round(timings["plain"], 2), "plain_passed": plain.passed,
                    "default_flags_s": round(timings["default"], 2),
                    "search_s": round(max(timings["default"] - timings["plain"], 0.0), 2) if tries else 0.0,
                    "search_over_plain": round(timings["default"] / timings["plain"], 2) if tries else 1.0,
                    "configurations_tried": sum(1 for t in tries if t.get("stage") != "confirmation"),
                    "passed": record.passed, "precision": artifact.precision,
                    "kept": {"keep_float": artifact.details.get("keep_float", []),
                             "int16_layers": artifact.details.get("int16_layers", [])},
                    "held_out_check": next((t.get("kept") for t in tries if t.get("stage") == "confirmation"), None),
                    "final_gates": [{"gate": g.get("what"), "margin": g.get("margin")} for g in record.gates],
                    "final_tasks": {k: {"values": v.get("values"), "margin": v.get("margin")}
                                    for k, v in (record.metrics.get("tasks") or {}).items()},
                }
            found[name] = rows
    return found


def _export_torch_digits_to_onnx(torch_digits: Path, folder: Path) -> Path:
    """The PyTorch digits model as a user would export it (torch.onnx.export, dynamic batch)."""
    output = folder / "digits_onnx.onnx"
    code = f"""
import sys, torch
sys.path.insert(0, {str(torch_digits)!r})
import model
torch.onnx.export(model.factory(), (torch.rand(2, 1, 8, 8),), {str(output)!r}, dynamo=False, opset_version=17,
                  input_names=["x"], output_names=["probs"], dynamic_axes={{"x": {{0: "n"}}}})
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=torch_digits, capture_output=True)
    return output


if __name__ == "__main__":
    main()
