#!/usr/bin/env python
"""What the edgekit runtime adds on top of the raw runtimes: per-call overhead, cold start, memory.

    .venv/bin/python scripts/bench_runtime.py [--rounds 40] [--output out/bench/bench_runtime.json]

Packages digits and MobileNetV2 224 (INT8 TFLite + ONNX), then, in one run:
* per call: ``model.predict_tensor(x)`` (float in/out, quantization inside) vs a raw script that
  quantizes/dequantizes with numpy itself, and ``predict_tensor(x_int8, raw=True)`` vs a raw
  LiteRT ``set_tensor/invoke/get_tensor``; for ONNX (float IO QDQ models) both vs a raw
  ``session.run``; same artifact, interleaved round by round;
* cold start: ``python -m edgekit.run PKG --input x.npy`` vs a minimal raw-LiteRT script, wall
  time to first output and peak RSS of the process (wait4 in a small launcher), alternating runs;
* INT8 vs float: every artifact of the package (INT8 in each ONNX scheme, float fallbacks) x
  every runtime that runs it here (LiteRT, ONNX Runtime, OpenVINO) x threads (1 and --threads),
  model-only latency interleaved by the benchmark harness, with this CPU's int8 features, each
  against the fastest float of any runtime; for the dense MLP, MobileNetV2 and a ResNet-18-style
  CNN (``models/resnet_style``), summarised in ``int8_speed_summary``; MobileNetV2 and the
  ResNet-style CNN are also packaged for ExecuTorch where ``edgekit[executorch]`` is installed
  (``.pte`` INT8 and its float program beside TFLite and ONNX Runtime, interleaved);
* tuning: ``edgekit tune`` on digits (where float is faster here) and on a dense model
  (``models/dense_mlp``, where INT8 is), then the tuned ``load`` against the other precision,
  interleaved: what the decision is and the speed it buys.
Prints and saves JSON; compare ratios within one run (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchio import print_and_save, require_signal  # noqa: E402

import edgekit  # noqa: E402
from edgekit.formats import FORMATS, missing_converter  # noqa: E402
from edgekit.formats.tflite.backend import open_interpreter  # noqa: E402

# the CNNs' speed rows: ExecuTorch beside TFLite and ONNX where its converter is installed
CNN_FORMATS = ["tflite", "onnx"] + (["executorch"] if missing_converter(FORMATS["executorch"]) is None else [])

RAW_LITERT = textwrap.dedent("""
    import sys
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=sys.argv[1], num_threads=int(sys.argv[3]))
    interpreter.allocate_tensors()
    inp = interpreter.get_input_details()[0]
    out = interpreter.get_output_details()[0]
    x = np.load(sys.argv[2]).astype(np.float32)[None] / 255.0
    scale, zero = inp["quantization"]
    interpreter.set_tensor(inp["index"], np.clip(np.round(x / scale) + zero, -128, 127).astype(np.int8))
    interpreter.invoke()
    q = interpreter.get_tensor(out["index"]).astype(np.float32)
    print(((q - out["quantization"][1]) * out["quantization"][0]).argmax())
""")


def percentile_us(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e6


def per_call(package: Path, x_float: np.ndarray, rounds: int, per_round: int, threads: int) -> dict:
    """Interleaved per-call timings: edgekit vs raw runtime, for each artifact in the package."""
    results = {}
    for artifact in ("tflite", "onnx"):
        model = edgekit.load(package, artifact=artifact, threads=threads)
        path = str(package / model.artifact.path)
        info = model.backend.inputs[0]
        if artifact == "tflite":
            interpreter = open_interpreter(path, threads=threads)
            detail_in = interpreter.get_input_details()[0]
            detail_out = interpreter.get_output_details()[0]
            scale, zero = detail_in["quantization"]
            x_native = np.clip(np.round(x_float / scale) + zero, -128, 127).astype(np.int8)

            out_scale, out_zero = detail_out["quantization"]

            def raw_call(x=x_native):
                interpreter.set_tensor(detail_in["index"], x)
                interpreter.invoke()
                return interpreter.get_tensor(detail_out["index"])

            def raw_float_call():  # what a hand-written float-in/float-out LiteRT script does
                q = np.clip(np.round(x_float / scale) + zero, -128, 127).astype(np.int8)
                interpreter.set_tensor(detail_in["index"], q)
                interpreter.invoke()
                return (interpreter.get_tensor(detail_out["index"]).astype(np.float32) - out_zero) * out_scale
        else:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
            input_name = session.get_inputs()[0].name
            x_native = x_float

            def raw_call(x=x_native):
                return session.run(None, {input_name: x})

            raw_float_call = raw_call  # QDQ models take and return float32 themselves

        calls = {
            "raw": raw_call,
            "raw_float_io": raw_float_call,
            "edgekit_float_io": lambda: model.predict_tensor(x_float),
            "edgekit_native_io": lambda: model.predict_tensor(x_native, raw=True),
        }
        samples: dict[str, list[float]] = {k: [] for k in calls}
        for call in calls.values():
            for _ in range(20):
                call()
        names = list(calls)
        for r in range(rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                call = calls[name]
                for _ in range(per_round):
                    start = time.perf_counter()
                    call()
                    samples[name].append(time.perf_counter() - start)
        raw_p50 = percentile_us(samples["raw"], 50)
        results[artifact] = {
            "input_dtype": str(info.dtype),
            **{f"{k}_p50_us": round(percentile_us(v, 50), 2) for k, v in samples.items()},
            **{f"{k}_p90_us": round(percentile_us(v, 90), 2) for k, v in samples.items()},
            "overhead_float_io_us": round(
                percentile_us(samples["edgekit_float_io"], 50) - percentile_us(samples["raw_float_io"], 50), 2),
            "overhead_native_io_us": round(percentile_us(samples["edgekit_native_io"], 50) - raw_p50, 2),
            "overhead_float_io_pct": round(
                100 * (percentile_us(samples["edgekit_float_io"], 50) / percentile_us(samples["raw_float_io"], 50) - 1), 2),
            "overhead_native_io_pct": round(100 * (percentile_us(samples["edgekit_native_io"], 50) / raw_p50 - 1), 2),
            "calls_each": len(samples["raw"]),
        }
        model.close()
    return results


LAUNCHER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    start = time.perf_counter()
    child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    print(json.dumps({"seconds": time.perf_counter() - start, "maxrss_kib": usage.ru_maxrss,
                      "code": os.waitstatus_to_exitcode(status)}))
""")


def run_child(command: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one process.

    Measured by a small launcher process: Linux carries a process's pre-exec peak RSS across
    exec, so a child forked straight from this (large) benchmark process would report this
    process's peak, not its own.
    """
    result = subprocess.run([sys.executable, "-c", LAUNCHER, *command], capture_output=True, text=True, env=env,
                            check=True)
    report = json.loads(result.stdout)
    if report["code"] != 0:
        raise RuntimeError(f"{command} failed with {report['code']}")
    return report["seconds"], report["maxrss_kib"]


def cold_start(package: Path, sample: Path, runs: int, threads: int, work: Path) -> dict:
    # pip compiles installed packages to bytecode; a source checkout run with
    # PYTHONDONTWRITEBYTECODE would recompile edgekit on every start. Compare like with like.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "edgekit")], check=True)
    raw_script = work / "raw_litert.py"
    raw_script.write_text(RAW_LITERT)
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(work / "cache")}
    tflite = package / "tflite" / "model.int8.tflite"
    commands = {
        "raw_litert_script": [sys.executable, str(raw_script), str(tflite), str(sample), str(threads)],
        "edgekit_run": [sys.executable, "-m", "edgekit.run", str(package), "--input", str(sample),
                        "--artifact", "tflite", "--threads", str(threads), "--top-k", "1"],
    }
    timings: dict[str, list[float]] = {k: [] for k in commands}
    rss: dict[str, list[int]] = {k: [] for k in commands}
    for name, command in commands.items():  # one unmeasured run each: file cache warm for both
        run_child(command, env)
    for i in range(runs):
        for name in (list(commands) if i % 2 == 0 else list(commands)[::-1]):
            seconds, peak = run_child(commands[name], env)
            timings[name].append(seconds)
            rss[name].append(peak)
    instructions = {name: instruction_count(command, env) for name, command in commands.items()}
    raw_s = statistics.median(timings["raw_litert_script"])
    ours_s = statistics.median(timings["edgekit_run"])
    raw_rss = statistics.median(rss["raw_litert_script"]) / 1024
    ours_rss = statistics.median(rss["edgekit_run"]) / 1024
    return {
        "runs_each": runs,
        "raw_script_median_s": round(raw_s, 3),
        "edgekit_run_median_s": round(ours_s, 3),
        "wall_ratio": round(ours_s / raw_s, 3),
        "raw_script_peak_rss_mib_runs": [round(v / 1024, 1) for v in rss["raw_litert_script"]],
        "edgekit_run_peak_rss_mib_runs": [round(v / 1024, 1) for v in rss["edgekit_run"]],
        "raw_script_peak_rss_mib": round(raw_rss, 1),
        "edgekit_run_peak_rss_mib": round(ours_rss, 1),
        "rss_delta_mib": round(ours_rss - raw_rss, 1),
        # instructions executed (valgrind): the same on a busy machine as on a quiet one
        "instructions_millions": instructions,
        "instructions_ratio": (round(instructions["edgekit_run"] / instructions["raw_litert_script"], 3)
                               if all(instructions.values()) else None),
    }


def instruction_count(command: list[str], env: dict[str, str]) -> float | None:
    """Millions of instructions one run executes, counted by valgrind (None without it): wall time
    on a shared machine drifts by tens of percent, this count by well under one. Hash seed,
    address-space layout and BLAS threads are fixed so that two runs count the same."""
    if shutil.which("valgrind") is None:
        return None
    prefix = ["setarch", "-R"] if shutil.which("setarch") else []
    result = subprocess.run([*prefix, "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
                            capture_output=True, text=True,
                            env={**env, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"})
    found = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    return round(int(found.group(1).replace(",", "")) / 1e6, 1) if result.returncode == 0 and found else None


def int8_vs_float(package: Path, threads: int | list[int], runs: int) -> dict:
    """Median model-only latency of every artifact x runtime x thread count this machine runs,
    interleaved in one run; each pair's speed against the fastest float of any runtime at the
    same threads (>1: faster), per runtime its INT8 against its own float fallback, and the best
    INT8 (among artifacts that passed their gates) against the fastest float."""
    from edgekit.bench.harness import BenchOptions, bench
    from edgekit.device.devices import get_profile
    from edgekit.formats.onnx.kernels import int8_kernel_features
    from edgekit.device.runtime import runnable, verdict_holds_here
    from edgekit.bench.tune import resolve_package

    counts = [threads] if isinstance(threads, int) else list(threads)
    root, manifest = resolve_package(str(package))
    # the x86 profile lists every runtime that runs here (LiteRT, ONNX Runtime, OpenVINO)
    pairs = list(dict.fromkeys((a.key, b.name) for a, b in runnable(manifest, get_profile("x86-cpu"))))
    choices = [(key, backend, t) for key, backend in pairs for t in counts]
    report = bench(str(root), BenchOptions(runs=runs, warmup=10, min_seconds=2.0, launch=False, placement=False), choices=choices)
    p50 = {(r["config"]["artifact"], r["config"]["backend"], r["config"]["threads"]): r["latency"]["p50"]
           for r in report["results"]}
    floats = {a.key for a in manifest.artifacts if a.precision.startswith("float")}
    passed = {a.key for a in manifest.artifacts if manifest.failed_gates(a.key) is None}
    records = manifest.validation.to_dict().get("artifacts") or {}
    sqnr = {key: (records.get(key) or {}).get("sqnr_db") for key in present_keys(manifest)}
    s8s8 = sqnr.get("onnx")  # today's scheme: what the other INT8 artifacts are held to
    # passed its gates, and at least S8S8's SQNR (as validated) where both are known
    good = {key for key in passed if key not in floats
            and (s8s8 is None or sqnr.get(key) is None or sqnr[key] >= s8s8 - 0.05)}
    by_threads = {}
    for t in counts:
        here = {(k, b): v for (k, b, tt), v in p50.items() if tt == t}
        fastest_float = min(((v, k, b) for (k, b), v in here.items() if k in floats), default=None)
        # passed, in the arithmetic this CPU runs it with (an ONNX build judged as quantized for other
        # devices is fast here on saturating kernels: not what was validated)
        int8 = [(v, k, b) for (k, b), v in here.items() if k not in floats and k in passed
                and verdict_holds_here(manifest, k, b)]
        best = min(int8, default=None)
        best_good = min(((v, k, b) for (k, b), v in here.items() if k in good and verdict_holds_here(manifest, k, b)),
                        default=None)
        fastest_int8 = min(((v, k, b) for (k, b), v in here.items() if k not in floats), default=None)
        rows = {f"{k} ({b})": {"p50_ms": round(v, 4), "passed_gates": k in passed, "sqnr_db": sqnr.get(k),
                               **({"vs_fastest_float": round(fastest_float[0] / v, 3)} if fastest_float else {})}
                for (k, b), v in sorted(here.items(), key=lambda item: item[1])}
        by_runtime = {}
        for (key, backend), median in here.items():
            fallback = next((here[(f, backend)] for f in sorted(floats) if f.startswith(key.split("-")[0] + "-")
                             and (f, backend) in here), None)
            if key not in floats and fallback is not None:
                by_runtime[f"{key} ({backend})"] = round(fallback / median, 3)
        by_threads[str(t)] = {
            "artifacts": rows, "int8_vs_own_float": by_runtime,
            **({"fastest_float": f"{fastest_float[1]} ({fastest_float[2]})"} if fastest_float else {}),
            **({"best_int8": f"{best[1]} ({best[2]})", "best_int8_vs_fastest_float": round(fastest_float[0] / best[0], 3)}
               if best and fastest_float else {}),
            **({"best_int8_at_least_s8s8_sqnr": f"{best_good[1]} ({best_good[2]})",
                "best_int8_at_least_s8s8_sqnr_vs_fastest_float": round(fastest_float[0] / best_good[0], 3)}
               if best_good and fastest_float else {}),
            # the reference CNNs' random backbones give near-tie decisions: their gates may fail where speed is
            # the point, so the fastest INT8 regardless of gates is reported beside the best that passed
            **({"fastest_int8_any_gate": f"{fastest_int8[1]} ({fastest_int8[2]})",
                "fastest_int8_vs_fastest_float": round(fastest_float[0] / fastest_int8[0], 3)}
               if fastest_int8 and fastest_float else {}),
        }
    return {"cpu_int8": int8_kernel_features(), "by_threads": by_threads,
            "onnx_runtime_graph": {a.key: a.details.get("runtime_graph") for a in manifest.artifacts
                                   if a.target == "onnx" and a.key not in floats}}


def mixed_vs_float(work: Path) -> dict:
    """The search's mixed artifacts (models/verdict/build.py outlier_cnn: plain INT8 fails its gate,
    default flags raise layers to float) against their float fallbacks: what the packager measured
    and recorded (``details.speed_vs_float``), and the same pairs timed again here."""
    subprocess.run([sys.executable, str(ROOT / "models/verdict/build.py"), "outlier_cnn", "--output", str(work)],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    folder = work / "outlier_cnn"
    result = edgekit.package(str(folder / "outlier_cnn.keras"), str(folder / "calibration.npz"), str(work / "mixed"),
                             eval=str(folder / "eval.npz"), formats=["tflite", "onnx"], also_float=True,
                             profiles=["x86-cpu"])
    recorded = {a.key: {"precision": a.precision, **(a.details.get("speed_vs_float") or {})}
                for a in result.manifest.artifacts if a.details.get("speed_vs_float")}
    timed = int8_vs_float(result.path, 1, 300)["by_threads"]["1"]
    return {"recorded_at_packaging": recorded, "int8_vs_own_float_1_thread": timed["int8_vs_own_float"],
            "artifacts": timed["artifacts"]}


def present_keys(manifest) -> list[str]:  # noqa: ANN001 - an edgekit Manifest
    return [a.key for a in manifest.artifacts]


def tuned_vs(package: Path, against: str, threads: int, runs: int, artifacts: list[str] | None = None,
             include_failed: bool = False) -> dict:
    """``edgekit tune`` (among ``artifacts``, when given), then what ``load`` picks afterwards
    against the ``against`` artifact, interleaved (>1: the tuned choice is faster)."""
    from edgekit.bench.harness import BenchOptions, bench
    from edgekit.bench.tune import tune

    tuning = tune(str(package), threads=[threads], artifacts=artifacts, include_failed=include_failed,
                  min_seconds=2.0)["tuning"]
    backend = "litert" if against.startswith("tflite") else "onnxruntime"
    report = bench(str(package), BenchOptions(runs=runs, warmup=10, min_seconds=2.0, launch=False, placement=False),
                   choices=[(None, None, None), (against, backend, threads)])
    tuned, forced = (r["latency"]["p50"] for r in report["results"])
    return {"artifacts": artifacts or "all", "decision": tuning["decision"], "evidence": tuning["evidence"],
            "candidates": tuning["candidates"], "tuned_load": report["results"][0]["config"]["artifact"],
            "tuned_p50_ms": round(tuned, 4), "against": against, "against_p50_ms": round(forced, 4),
            "tuned_speed_vs_against": round(forced / tuned, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--per-round", type=int, default=25)
    parser.add_argument("--cold-runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-mobilenet", action="store_true")
    parser.add_argument("--skip-resnet", action="store_true")
    parser.add_argument("--skip-mixed", action="store_true", help="skip the mixed-precision artifacts' section")
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "bench_runtime.json")
    args = parser.parse_args()

    report: dict = {
        "benchmark": "bench_runtime",
        "machine": {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "settings": vars(args) | {"output": str(args.output)},
    }
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-runtime-") as tmp:
        work = Path(tmp)
        os.environ["EDGEKIT_CACHE_DIR"] = str(work / "cache")
        with np.load(ROOT / "models/digits/data/eval.npz") as data:
            digit = data["x"][0]
        np.save(work / "digit.npy", digit)
        digits = edgekit.package(
            str(ROOT / "models/digits/digits.keras"), str(ROOT / "models/digits/data/calibration.npz"),
            str(work / "digits"), eval=str(ROOT / "models/digits/data/eval.npz"), formats=["tflite", "onnx"],
        ).path
        report["digits"] = {
            "per_call": per_call(digits, digit[None].astype(np.float32) / 255, args.rounds, args.per_round * 4,
                                 args.threads),
            "cold_start": cold_start(digits, work / "digit.npy", args.cold_runs, args.threads, work),
            "int8_vs_float": int8_vs_float(digits, args.threads, 300),
            "tuned": tuned_vs(digits, "tflite", args.threads, 300),  # float is faster here: tune should see it
        }
        subprocess.run([sys.executable, str(ROOT / "models/dense_mlp/build.py"), "--output", str(work / "mlp")],
                       check=True, stdout=subprocess.DEVNULL, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        mlp = edgekit.package(str(work / "mlp" / "dense_mlp.keras"), str(work / "mlp" / "calibration.npz"),
                              str(work / "mlp"), formats=["tflite", "onnx"], also_float=True,
                              # seeded random weights: its class decisions are near-ties, so it is
                              # judged as values (SQNR), as a speed reference, not as a classifier
                              output_kinds={"": "values"}).path
        report["dense_mlp"] = {
            "int8_vs_float": int8_vs_float(mlp, [1, args.threads], 200),
            "tuned": tuned_vs(mlp, "onnx-float32", args.threads, 200),  # INT8 is faster here
        }
        if not args.skip_mobilenet:
            # the colour task: decisions with wide margins, so the INT8 artifacts pass their gates
            subprocess.run([sys.executable, str(ROOT / "models/mobilenet_v2/build.py"), "--output", str(work),
                            "--samples", "100", "--eval-samples", "100", "--task", "colour"], check=True,
                           stdout=subprocess.DEVNULL, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            mobilenet = edgekit.package(
                str(work / "mobilenet_v2.keras"), str(work / "calibration.npz"), str(work / "mobilenet"),
                eval=str(work / "eval.npz"), formats=CNN_FORMATS, samples=100, also_float=True,
                preprocessing={"scale": 1 / 255, "mean": [0.5], "std": [0.5]},
                allow_accuracy_drop=True,  # recorded either way; the summary says which artifacts passed
            )
            report["mobilenet_v2_int8_top1_agreement"] = require_signal(mobilenet.manifest)
            mobilenet = mobilenet.path
            x = np.random.default_rng(0).uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32)
            report["mobilenet_v2"] = {
                "per_call": per_call(mobilenet, x, args.rounds // 2, args.per_round, args.threads),
                "int8_vs_float": int8_vs_float(mobilenet, [1, args.threads], 60),
            }
        if not args.skip_resnet:
            subprocess.run([sys.executable, str(ROOT / "models/resnet_style/build.py"), "--output",
                            str(work / "resnet"), "--samples", "100", "--eval-samples", "100"], check=True,
                           stdout=subprocess.DEVNULL, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            resnet = edgekit.package(
                str(work / "resnet" / "resnet_style.keras"), str(work / "resnet" / "calibration.npz"),
                str(work / "resnet_pkg"), eval=str(work / "resnet" / "eval.npz"), formats=CNN_FORMATS,
                samples=100,
                preprocessing={"scale": 1 / 255, "mean": [0.5], "std": [0.5]}, also_float=True,
                allow_accuracy_drop=True,  # a speed reference: its gates' verdict is recorded, not required
            )
            report["resnet_style_int8_top1_agreement"] = require_signal(resnet.manifest)
            report["resnet_style"] = {"int8_vs_float": int8_vs_float(resnet.path, [1, args.threads], 40)}
        if not args.skip_mixed:
            report["mixed_precision"] = mixed_vs_float(work)
    report["int8_speed_summary"] = {  # best INT8 (that passed its gates / any) vs the fastest float of any runtime
        name: {threads: {"passed_gates": entry.get("best_int8_vs_fastest_float"),
                         "passed_gates_and_s8s8_sqnr": entry.get("best_int8_at_least_s8s8_sqnr_vs_fastest_float"),
                         "which": entry.get("best_int8_at_least_s8s8_sqnr"),
                         "any": entry.get("fastest_int8_vs_fastest_float"), "fastest_int8": entry.get("fastest_int8_any_gate")}
               for threads, entry in report[name]["int8_vs_float"]["by_threads"].items()}
        for name in ("dense_mlp", "mobilenet_v2", "resnet_style") if name in report}
    print_and_save(report, args.output)


if __name__ == "__main__":
    main()
