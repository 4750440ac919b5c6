#!/usr/bin/env python
"""Benchmark packaging MobileNetV2 224 for every target: conversion time, sizes, float vs INT8 latency.

    .venv/bin/python scripts/bench_package.py [--threads 2] [--rounds 30] [--output out/bench/bench_package.json]
    .venv/bin/python scripts/bench_package.py --delivery [--models dw_cnn tone_cnn]   # what INT8 delivers

With --delivery (scripts/bench_delivery.py): per reference model (a depthwise CNN, a 1-D audio CNN and
a detector where plain INT8 misses its gate), plain INT8's speed-up over the package's fastest
float (the ceiling), the shipped plan's speed-up and the share of the ceiling it keeps, the
predicted against the real gate margin, and the runtime's default pick against the fastest
passing artifact, every artifact timed side by side in one run.

Also packages the digits reference as a Keras and as a PyTorch model (models/digits,
models/digits_torch) for every target: packaging time, converter seconds, size and accuracy per
target for each source ("sources" in the JSON); with --all-formats, only each reference model's
`--format all` with default flags ("all_formats"): time, peak memory, and per artifact the
simulated and real tries, plan, tightest margin and speed against float; and the search ("search" in the JSON; alone with
--search-only): each reference model packaged with plain PTQ (--no-auto-fix) and with default
flags, in a child process each: wall time and peak resident memory of the whole process tree
for both, their ratios (the goals: a search within 3x the plain build's time and 1.5x its
memory), the tries, the plan kept, the route, the margins and the speed against float.

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
from edgekit.conversion import worker  # noqa: E402
from edgekit.formats.tflite.backend import LiteRTBackend, open_interpreter  # noqa: E402
from edgekit.formats.onnx.backend import OnnxRuntimeBackend  # noqa: E402
from edgekit.device.devices import DeviceFacts  # noqa: E402
from edgekit.formats import FORMATS  # noqa: E402
from edgekit.formats.tflite.convert import TFLiteRequest, convert as tflite_convert  # noqa: E402
from edgekit.sources.tensorflow import prepare  # noqa: E402


def cpu_description() -> dict[str, object]:
    """CPU model and the SIMD features that decide INT8 vs float speed on x86 (VNNI above all)."""
    info: dict[str, object] = {"machine": platform.machine(), "cpus": os.cpu_count()}
    facts = DeviceFacts.read()
    info["model"] = facts.cpu_model
    info["simd"] = sorted(facts.cpu_flags & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "fma"})
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
    parser.add_argument("--all-formats", action="store_true",
                        help="only each reference model's `--format all` with default flags: the whole command's time "
                             "and peak memory, then per format the simulated and real tries, the plan kept, the "
                             "tightest margin and the speed against float")
    parser.add_argument("--delivery", action="store_true",
                        help="only what INT8 delivers (scripts/bench_delivery.py): per reference model and format, plain "
                             "INT8's speed-up over the fastest float (the ceiling), the shipped plan's and the share "
                             "of the ceiling it keeps, the predicted against the real gate margin, and the default "
                             "pick against the fastest passing artifact, all timed side by side in one run")
    parser.add_argument("--models", nargs="*", default=None, metavar="NAME",
                        help="only the reference models whose name starts with one of these (the search's figures)")
    args = parser.parse_args()
    from bench_delivery import compare_delivery, print_delivery_table

    for wanted, key, measure, table in ((args.all_formats, "all_formats", compare_all_formats, print_all_formats_table),
                                        (args.search_only, "search", compare_search, print_search_table),
                                        (args.delivery, "delivery", compare_delivery, print_delivery_table)):
        if wanted:  # one comparison alone: its JSON and its table
            found = measure(args.models)
            print_and_save({"benchmark": "bench_package", "machine": {"platform": platform.platform(),
                                                                      **cpu_description()}, key: found}, args.output)
            table(found)
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
        float_info = worker.convert(tflite_convert, TFLiteRequest(
            saved_model=source["saved_model"], calibration_npy="", output=str(float_tflite), quantize=False),
            what="float conversion")
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
            "float_tflite_conversion": float_info.seconds,
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
        "search": compare_search(args.models),
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
                                   ROOT / "models/digits/data/eval.npz", ["tflite", "onnx", "coreml"]),
    "outlier_cnn (Keras CNN, 97.7% plain top-1 agreement)": ("outlier_cnn", "outlier_cnn/outlier_cnn.keras",
                                                             "outlier_cnn/calibration.npz", "outlier_cnn/eval.npz",
                                                             ["tflite", "onnx", "coreml"]),
    "yolo (detector head, score rows collapse)": ("yolo", "yolo/yolo.onnx", "yolo/images.npz", None,
                                                  ["tflite", "onnx"]),
    "lstm_encoder (PyTorch LSTM, TFLite by the fallback route)": ("lstm_encoder", "lstm_encoder/lstm_encoder.pt2",
                                                                  "lstm_encoder/calibration.npz",
                                                                  "lstm_encoder/eval.npz", ["tflite", "onnx"]),
    "vad_stream (streaming state joined to an accumulator)": ("vad_stream", "vad_stream/vad_stream.pt2",
                                                              "vad_stream/calibration.npz", "vad_stream/eval.npz",
                                                              ["tflite", "onnx"]),
    "state_stream (next state packed with an accumulator)": ("state_stream", "state_stream/state_stream.pt2",
                                                             "state_stream/calibration.npz", "state_stream/eval.npz",
                                                             ["tflite", "onnx"]),
    "conv1d_asr (tf2onnx Conv1D export, three outputs)": ("conv1d_asr", "conv1d_asr/conv1d_asr.onnx",
                                                          "conv1d_asr/calibration.npz", "conv1d_asr/eval.npz",
                                                          ["tflite", "onnx"]),
    "bytes_classifier (int32 -> OneHot histogram)": ("bytes_classifier", "bytes_classifier/bytes_classifier.onnx",
                                                     "bytes_classifier/calibration.npz",
                                                     "bytes_classifier/eval.npz", ["tflite", "onnx"]),
    "prelu_landmarks (PReLU CNN, coordinates)": ("prelu_landmarks", "prelu_landmarks/prelu_landmarks.pt2",
                                                 "prelu_landmarks/calibration.npz", "prelu_landmarks/eval.npz",
                                                 ["tflite", "onnx"]),
}


def _tree_rss(root: int) -> int:
    """Resident bytes of a process and all its descendants now (Linux /proc; 0 elsewhere)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_measured(args: list[str]) -> tuple[float, int, int]:
    """``edgekit ARGS`` in a child: wall seconds, peak resident bytes of its whole process tree
    (the packager with its converter and runtime children, sampled every 0.1 s), exit code."""
    import threading

    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "edgekit.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.1)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    code = proc.wait()
    watcher.join()
    return time.perf_counter() - started, peak[0], code


def _reference_models(models: list[str] | None, work: Path):  # noqa: ANN202 - yields (name, spec)
    """``SEARCH_MODELS`` whose name starts with one of ``models`` (all without), each built into
    ``work`` (models/verdict/build.py) and its spec's paths resolved there."""
    for name, (builder, model, calibration, held_out, formats) in SEARCH_MODELS.items():
        if models and not any(name.startswith(prefix) for prefix in models):
            continue
        if builder is not None:
            subprocess.run([sys.executable, str(ROOT / "models/verdict/build.py"), builder, "--output", str(work)],
                           check=True, capture_output=True)
            model, calibration = work / model, work / calibration
            held_out = work / held_out if held_out else None
        yield name, (builder, model, calibration, held_out, formats)


def compare_search(models: list[str] | None = None) -> dict[str, dict[str, object]]:
    """Per reference model and format: plain PTQ's time and peak memory, the search's (default
    flags), the configurations it tried, the one it kept, its margins and its speed against the
    float fallback; the ratios the search must keep (time <= 3x, memory <= 1.5x the plain build)."""
    import json

    found: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-search-") as tmp:
        work = Path(tmp)
        for name, (builder, model, calibration, held_out, formats) in _reference_models(models, work):
            rows: dict[str, object] = {}
            for fmt in formats:
                measured, manifests = {}, {}
                for mode, flag in (("plain", "--no-auto-fix"), ("default", "--auto-fix")):
                    out = work / f"{mode}-{fmt}"
                    args = ["package", str(model), "-c", str(calibration), "-o", str(out), "--format", fmt, flag,
                            "--allow-accuracy-drop", "--force", "--profile", "x86-cpu", "--name", f"{builder}-{fmt}"]
                    if held_out:
                        args += ["--eval", str(held_out)]
                    measured[mode] = run_measured(args)
                    manifest_path = out / f"{builder}-{fmt}.edgekit" / "manifest.json"
                    manifests[mode] = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
                default = manifests["default"]
                if default is None:
                    rows[fmt] = {"error": f"edgekit package exited {measured['default'][2]}"}
                    continue
                record = default["validation"]["artifacts"][fmt]
                tries = record.get("auto_fix") or []
                artifact = next(a for a in default["artifacts"] if a["format"] == fmt and not a.get("variant"))
                speeds = [a["details"]["speed_vs_float"] for a in default["artifacts"]
                          if a["format"] == fmt and "speed_vs_float" in a.get("details", {})]
                (plain_s, plain_rss, _), (default_s, default_rss, _) = measured["plain"], measured["default"]
                rows[fmt] = {
                    "plain_s": round(plain_s, 2), "plain_peak_rss_mib": round(plain_rss / 2**20),
                    "plain_verdict": (manifests["plain"] or {}).get("validation", {}).get("artifacts", {})
                                     .get(fmt, {}).get("verdict"),
                    "default_flags_s": round(default_s, 2), "default_peak_rss_mib": round(default_rss / 2**20),
                    "searched": bool(tries),
                    "time_over_plain": round(default_s / plain_s, 2),
                    "memory_over_plain": round(default_rss / plain_rss, 2) if plain_rss else None,
                    "tries": sum(1 for t in tries if t.get("stage") not in ("confirmation", "speed")),
                    "budget": next((t["budget"] for t in reversed(tries) if "budget" in t), None),
                    "verdict": record.get("verdict"), "precision": artifact["precision"],
                    "plan_kept": (artifact["details"].get("precision_plan") or {}).get("layers", {}),
                    "route": (artifact["details"].get("route") or {}).get("used"),
                    "held_out_check": next((t.get("kept") for t in tries if t.get("stage") == "confirmation"), None),
                    "margins": _margins(record),
                    "speed_vs_float": speeds[0].get("speedup") if speeds else None,
                }
            found[name] = rows
    return found


def compare_all_formats(models: list[str] | None = None) -> dict[str, dict[str, object]]:
    """Per reference model: ``edgekit package --format all`` with default flags in a child (wall
    time, peak memory of the process tree, exit status), then per artifact what shipped: verdict,
    precision, the shared simulated search's tries and the format's own real tries, the plan kept,
    the tightest margin and the speed against the float fallback measured here."""
    import json

    found: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-all-") as tmp:
        work = Path(tmp)
        for name, (builder, model, calibration, held_out, _) in _reference_models(models, work):
            label = builder or "digits"
            args = ["package", str(model), "-c", str(calibration), "-o", str(work / f"all-{label}"), "--format",
                    "all", "--force", "--name", label]
            if held_out:
                args += ["--eval", str(held_out)]
            seconds, rss, code = run_measured(args)
            path = work / f"all-{label}" / f"{label}.edgekit" / "manifest.json"
            manifest = json.loads(path.read_text()) if path.exists() else None
            row: dict[str, object] = {"seconds": round(seconds, 1), "peak_rss_mib": round(rss / 2**20), "exit": code,
                                      "formats": {}}
            plans = {a["format"]: (a["details"].get("precision_plan") or {}).get("layers", {})
                     for a in (manifest or {}).get("artifacts", [])
                     if not a.get("variant") and not a["converter"].get("float_fallback_for")}
            for artifact in (manifest or {}).get("artifacts", []):
                key = artifact["format"] + (f"-{artifact['variant']}" if artifact.get("variant") else "")
                if artifact["precision"].startswith("float") and artifact["converter"].get("float_fallback_for"):
                    continue
                record = manifest["validation"]["artifacts"].get(key, {})
                tries = record.get("auto_fix") or []
                simulation = artifact["details"].get("simulation") or {}
                speed = (artifact["details"].get("speed_vs_float") or {}).get("speedup")
                row["formats"][key] = {
                    "verdict": record.get("verdict"), "precision": artifact["precision"],
                    "simulated_tries": simulation.get("tries"),
                    "real_tries": sum(1 for t in tries if t.get("stage") not in ("confirmation", "speed")),
                    # a scheme variant is built with its format's plan
                    "plan_kept": (artifact["details"].get("precision_plan") or {}).get("layers")
                    or plans.get(artifact["format"], {}),
                    "tightest_margin": min((m for m in _margins(record).values() if isinstance(m, (int, float))),
                                           default=None),
                    "speed_vs_float": speed}
            for failed in (manifest or {}).get("failed", []):
                row["formats"][failed["target"]] = {"verdict": "not shipped", "error": failed["error"][:200]}
            if manifest is not None:
                row["default"] = default_pick(path.parent, held_out or calibration)
            found[name] = row
    return found


def default_pick(package: Path, data: Path) -> dict[str, object]:
    """What ``edgekit.load`` runs here by default, and that artifact timed against its format's
    float fallback here (interleaved in one child, batch 1, one thread), so the table says whether
    the package delivers INT8 faster than float on this CPU."""
    from edgekit.formats import FORMATS as ALL
    from edgekit.packaging.speed import median_ms

    with edgekit.load(package) as model:
        chosen, backend = model.artifact, model.backend.name
        manifest = model.manifest
    picked: dict[str, object] = {"artifact": chosen.key, "precision": chosen.precision, "backend": backend}
    fallback = next((a for a in manifest.artifacts if a.converter.get("float_fallback_for") == chosen.format), None)
    if chosen.is_float or fallback is None:
        return picked
    from bench_delivery import one_sample

    sample = one_sample(data, [{"name": s.name, "dtype": s.dtype} for s in manifest.inputs])
    timed = median_ms(ALL[chosen.format].builder(), {"int8": package / chosen.path, "float": package / fallback.path},
                      sample, f"timing {chosen.key} against {fallback.key}")
    if timed:
        picked["speed_vs_float"] = round(timed["float"] / timed["int8"], 2)
    return picked


def print_all_formats_table(found: dict[str, dict[str, object]]) -> None:
    print(f"{'model':<18} {'total s':>7} {'MiB':>5} {'artifact':<14} {'verdict':<13} {'sim':>4} {'real':>4} "
          f"{'speed':>6}  precision / plan kept / tightest margin")
    for name, row in found.items():
        first = True
        for key, fmt in (row["formats"] or {"-": {"verdict": f"exit {row['exit']}"}}).items():
            head = (f"{name.split(' ')[0]:<18} {row['seconds']:>7} {row['peak_rss_mib']:>5}" if first
                    else f"{'':<18} {'':>7} {'':>5}")
            first = False
            if "error" in fmt or "precision" not in fmt:
                print(f"{head} {key:<14} {fmt['verdict']:<13} {fmt.get('error', '')}")
                continue
            speed = fmt["speed_vs_float"]
            plan = ", ".join(f"{layer}={p}" for layer, p in fmt["plan_kept"].items()) or "plain int8"
            margin = fmt["tightest_margin"]
            print(f"{head} {key:<14} {str(fmt['verdict']):<13} {str(fmt['simulated_tries'] or '-'):>4} "
                  f"{fmt['real_tries']:>4} {'n/a' if speed is None else f'{speed:.2f}x':>6}  {fmt['precision']} / "
                  f"{plan[:50]} / {'n/a' if margin is None else f'{margin:+.3g}'}")
        picked = row.get("default")
        if picked:
            speed = picked.get("speed_vs_float")
            print(f"{'':<18} {'':>7} {'':>5} runtime default here: {picked['artifact']} ({picked['precision']}, "
                  f"{picked['backend']})" + (f", {speed:.2f}x its float fallback" if speed else ""))


def _margins(record: dict[str, object]) -> dict[str, float | None]:
    """Each gated output's margin above its floor (a task's worst gated number; negative: failing),
    then each failed gate's (what the search compared between tries)."""
    found: dict[str, float | None] = {f"{output} {task.get('task')}": task.get("margin")
                                      for output, task in (record.get("tasks") or {}).items()
                                      if task.get("margin") is not None}
    found.update({str(g.get("what")): g.get("margin") for g in record.get("gates") or []})
    return found


def print_search_table(found: dict[str, dict[str, object]]) -> None:
    """One line per reference model and format: the figures the search is held to."""
    print(f"{'model':<28} {'fmt':<6} {'plain s':>7} {'MiB':>5} {'search s':>8} {'MiB':>5} {'time':>5} {'mem':>5} "
          f"{'tries':>5} {'verdict':<8} {'speed':>5}  plan kept / tightest margin")
    for name, rows in found.items():
        for fmt, row in rows.items():
            if "error" in row:
                print(f"{name.split(' ')[0]:<28} {fmt:<6} {row['error']}")
                continue
            margins = [m for m in row["margins"].values() if isinstance(m, (int, float))]
            plan = ", ".join(f"{layer}={p}" for layer, p in row["plan_kept"].items()) or "plain int8"
            speed = row["speed_vs_float"]
            print(f"{name.split(' ')[0]:<28} {fmt:<6} {row['plain_s']:>7} {row['plain_peak_rss_mib']:>5} "
                  f"{row['default_flags_s']:>8} {row['default_peak_rss_mib']:>5} {row['time_over_plain']:>4}x "
                  f"{row['memory_over_plain']:>4}x {row['tries']:>5} {str(row['verdict']):<8} "
                  f"{'n/a' if speed is None else f'{speed:.2f}x':>5}  {plan[:60]} / "
                  f"{f'{min(margins):+.3g}' if margins else 'n/a'}")


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
