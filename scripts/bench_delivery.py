#!/usr/bin/env python
"""What INT8 delivers, per reference model (also ``scripts/bench_package.py --delivery``).

    .venv/bin/python scripts/bench_delivery.py [--models dw_cnn tone_cnn] [--output out/bench/bench_delivery.json]

Each model is packaged twice with ``--format all``: plain INT8 (``--no-auto-fix``, failing gates
kept) and with default flags (what a user ships). Then every artifact of both packages is timed
side by side in one process (batch 1, one thread, interleaved rounds: load affects them alike),
each on the backend the runtime picks for it here, and the table says per model and format:

- the ceiling: plain INT8's speed-up over the package's fastest float artifact;
- what shipped: the format's passing INT8 artifact's speed-up, and the share of the ceiling's
  gain it keeps ((shipped - 1) / (ceiling - 1));
- the predicted gate margin (the simulation's) against the real artifact's;
- the runtime's default pick here, its speed-up, and its latency against the fastest passing
  artifact's; and whether the delivery rule holds: where the ceiling is at least 1.3x, a passing
  INT8 default at least 1.2x float keeping half the ceiling's gain; elsewhere a default within 10%
  of the fastest passing artifact.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# name: (models/verdict/build.py builder, model file, calibration, held-out)
DELIVERY_MODELS = {
    "dw_cnn (depthwise CNN, outlier channels)": ("dw_cnn", "dw_cnn/dw_cnn.pt2", "dw_cnn/calibration.npz",
                                                 "dw_cnn/eval.npz"),
    "tone_cnn (1-D audio CNN, outlier channels)": ("tone_cnn", "tone_cnn/tone_cnn.pt2", "tone_cnn/calibration.npz",
                                                   "tone_cnn/eval.npz"),
    "yolo (detector head, score rows collapse)": ("yolo", "yolo/yolo.onnx", "yolo/images.npz", None),
    "outlier_cnn (Keras CNN, outlier channels)": ("outlier_cnn", "outlier_cnn/outlier_cnn.keras",
                                                  "outlier_cnn/calibration.npz", "outlier_cnn/eval.npz"),
}
CEILING_RULE, SHIPPED_FLOOR, WITHIN = 1.3, 1.2, 1.10


def _package(python: str, model: Path, calibration: Path, held_out: Path | None, out: Path, name: str,
             *flags: str) -> dict[str, Any] | None:
    args = [python, "-m", "edgekit.cli", "package", str(model), "-c", str(calibration), "-o", str(out),
            "--format", "all", "--force", "--allow-partial", "--name", name, *flags]
    if held_out is not None:
        args += ["--eval", str(held_out)]
    done = subprocess.run(args, capture_output=True, text=True)
    path = out / f"{name}.edgekit" / "manifest.json"
    if not path.exists():
        print(f"{name}: edgekit package exited {done.returncode}: {done.stderr[-800:]}", file=sys.stderr)
        return None
    return json.loads(path.read_text())


def _passing(manifest: dict[str, Any]) -> set[str]:
    return {key for key, record in manifest["validation"]["artifacts"].items() if record.get("verdict") == "passed"}


def _key(artifact: dict[str, Any]) -> str:
    """The package's key of an artifact as the manifest writes it (``manifest.Artifact.key``)."""
    if _is_float(artifact):
        return f"{artifact['format']}-{artifact['precision']}"
    return artifact["format"] + (f"-{artifact['variant']}" if artifact.get("variant") else "")


def _is_float(artifact: dict[str, Any]) -> bool:
    return bool(artifact.get("converter", {}).get("float_fallback_for"))


def _timed(packages: dict[str, Path], sample: dict[str, Any]) -> dict[str, float]:
    """Every artifact of the packages, ``"LABEL:KEY"`` -> median ms here, in one interleaved run."""
    from edgekit.device.devices import detect
    from edgekit.device.package_io import open_package
    from edgekit.device.runtime import runnable
    from edgekit.packaging.speed import median_ms_each

    pairs = {}
    for label, path in packages.items():
        root, manifest = open_package(path)
        for entry, backend in runnable(manifest, detect()):
            pairs.setdefault(f"{label}:{entry.key}", (backend, root / entry.path))
    return median_ms_each(pairs, sample, f"timing {len(pairs)} artifacts side by side", rounds=9) or {}


def one_sample(data: Path, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """One sample of ``data`` by input name (or the one array of a one-input model), in each
    input's own dtype (``inputs``: the manifest's name and dtype of each)."""
    import numpy as np

    names = [spec["name"] for spec in inputs]
    dtypes = {spec["name"]: spec["dtype"] for spec in inputs}
    with np.load(data) as stored:
        named = [k for k in stored.files if k in names]
        keys = named or [next(k for k in stored.files if k not in ("y", "labels"))]
        return {(k if named else names[0]): stored[k][:1].astype(dtypes.get(k if named else names[0], "float32"))
                for k in keys}


def _gap(artifact: dict[str, Any]) -> float | None:
    """The largest gap between a gate's simulated figure and the real build's (the plan the
    simulation predicted, or plain INT8 where it predicted that passes): points of a task metric,
    dB of SQNR (``details.simulation.gap``); older packages: the worst SQNR's."""
    simulation = artifact["details"].get("simulation") or {}
    if simulation.get("gap") is not None:
        return float(simulation["gap"])
    simulated, real = simulation.get("simulated") or {}, simulation.get("real") or {}
    gaps = [abs(float(simulated[k]) - float(real[k])) for k in simulated
            if isinstance(simulated.get(k), (int, float)) and isinstance(real.get(k), (int, float))]
    return round(max(gaps), 3) if gaps else None


def measure_model(name: str, spec: tuple[str, str, str, str | None], work: Path) -> dict[str, Any]:
    import edgekit

    builder, model, calibration, held_out = spec
    subprocess.run([sys.executable, str(ROOT / "models/verdict/build.py"), builder, "--output", str(work)],
                   check=True, capture_output=True)
    data = work / held_out if held_out else None
    plain = _package(sys.executable, work / model, work / calibration, data, work / "plain", builder,
                     "--no-auto-fix", "--allow-accuracy-drop")
    shipped = _package(sys.executable, work / model, work / calibration, data, work / "default", builder)
    if plain is None or shipped is None:
        return {"error": "a package was not written (see stderr)"}
    packages = {"plain": work / "plain" / f"{builder}.edgekit", "default": work / "default" / f"{builder}.edgekit"}
    ms = _timed(packages, one_sample(data or work / calibration, shipped["inputs"]))
    floats = [v for k, v in ms.items() if k.startswith("default:") and any(
        _key(a) == k.split(":", 1)[1] and _is_float(a) for a in shipped["artifacts"])]
    fastest_float = min(floats, default=None)
    passing = _passing(shipped)
    rows: dict[str, Any] = {}
    shipped_by_key = {_key(a): a for a in shipped["artifacts"]}
    for artifact in plain["artifacts"]:  # every format's plain INT8 build, and what shipped of it
        key = _key(artifact)
        if _is_float(artifact) or artifact.get("variant"):
            continue
        artifact = shipped_by_key.get(key, artifact)
        plain_ms = ms.get(f"plain:{key}")
        shipped_ms = ms.get(f"default:{key}") if key in passing else None
        ceiling = fastest_float / plain_ms if fastest_float and plain_ms else None
        speedup = fastest_float / shipped_ms if fastest_float and shipped_ms else None
        rows[key] = {
            "plain_verdict": plain["validation"]["artifacts"].get(key, {}).get("verdict"),
            "ceiling": round(ceiling, 2) if ceiling else None,
            "shipped_verdict": shipped["validation"]["artifacts"].get(key, {}).get("verdict", "not shipped"),
            "shipped_precision": artifact["precision"] if key in passing else None,
            "shipped_speedup": round(speedup, 2) if speedup else None,
            "share_of_ceiling": round((speedup - 1) / (ceiling - 1), 2) if speedup and ceiling and ceiling > 1.0
            else None,
            "predicted_vs_real_gap": _gap(artifact) if key in passing else None,
            # where the converter kept more layers float than the plan: the simulation of exactly those
            "predicted_vs_real_gap_built": (artifact["details"].get("simulation") or {}).get("gap_built")
            if key in passing else None,
        }
    with edgekit.load(packages["default"]) as loaded:
        pick, backend = loaded.artifact.key, loaded.backend.name
    pick_ms = ms.get(f"default:{pick}")
    fastest_passing = min((v for k, v in ms.items() if k.startswith("default:") and k.split(":", 1)[1] in passing),
                          default=None)
    ceiling = max((r["ceiling"] for r in rows.values() if r["ceiling"]), default=None)
    pick_float = any(_key(a) == pick and _is_float(a) for a in shipped["artifacts"])
    pick_speedup = fastest_float / pick_ms if fastest_float and pick_ms else None
    if ceiling and ceiling >= CEILING_RULE:
        holds = bool(pick_speedup and not pick_float and pick_speedup >= max(SHIPPED_FLOOR, 1 + (ceiling - 1) / 2))
        rule = f"ceiling {ceiling:.2f}x >= {CEILING_RULE}: a passing INT8 default >= max(1.2, 1 + gain/2)"
    else:
        holds = bool(pick_ms and fastest_passing and pick_ms <= WITHIN * fastest_passing)
        rule = "no INT8 ceiling of 1.3x here: the default within 10% of the fastest passing artifact"
    return {"formats": rows, "fastest_float_ms": round(fastest_float, 4) if fastest_float else None,
            "default": {"artifact": pick, "backend": backend, "float": pick_float,
                        "speedup": round(pick_speedup, 2) if pick_speedup else None,
                        "vs_fastest_passing": round(pick_ms / fastest_passing, 2) if pick_ms and fastest_passing
                        else None},
            "ceiling": ceiling, "rule": rule, "holds": holds, "timed_ms": {k: round(v, 4) for k, v in ms.items()}}


def compare_delivery(models: list[str] | None = None) -> dict[str, dict[str, Any]]:
    found = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-delivery-") as tmp:
        for name, spec in DELIVERY_MODELS.items():
            if models and not any(name.startswith(prefix) for prefix in models):
                continue
            folder = Path(tmp) / spec[0]
            folder.mkdir()
            found[name] = measure_model(name, spec, folder)
            print(f"{name}: {json.dumps(found[name].get('default'))}", file=sys.stderr)
    return found


def print_delivery_table(found: dict[str, dict[str, Any]]) -> None:
    print(f"{'model':<12} {'artifact':<12} {'plain':<10} {'ceiling':>7} {'shipped':<14} {'speed':>6} {'kept':>5} "
          f"{'gap':>6} {'built':>6}")
    for name, row in found.items():
        short = name.split(" ")[0]
        if "error" in row:
            print(f"{short:<12} {row['error']}")
            continue
        for key, fmt in row["formats"].items():
            def show(value: Any, suffix: str = "") -> str:
                return "-" if value is None else f"{value}{suffix}"

            print(f"{short:<12} {key:<12} {str(fmt['plain_verdict']):<10} {show(fmt['ceiling'], 'x'):>7} "
                  f"{str(fmt['shipped_precision'] or fmt['shipped_verdict'])[:14]:<14} "
                  f"{show(fmt['shipped_speedup'], 'x'):>6} {show(fmt['share_of_ceiling']):>5} "
                  f"{show(fmt['predicted_vs_real_gap']):>6} {show(fmt.get('predicted_vs_real_gap_built')):>6}")
        pick = row["default"]
        print(f"{'':<12} default here: {pick['artifact']} on {pick['backend']}, {show_x(pick['speedup'])} the fastest "
              f"float, {show_x(pick['vs_fastest_passing'])} the fastest passing's latency; {row['rule']}: "
              f"{'holds' if row['holds'] else 'DOES NOT HOLD'}")


def show_x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def main() -> None:
    import argparse
    import platform

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=None, metavar="NAME",
                        help="only the reference models whose name starts with one of these")
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "bench_delivery.json")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "scripts"))
    from benchio import print_and_save

    from edgekit.machine.facts import DeviceFacts

    found = compare_delivery(args.models)
    facts = DeviceFacts.read()
    print_and_save({"benchmark": "bench_delivery", "machine": {"platform": platform.platform(),
                                                               "cpu_kind": facts.cpu_kind()}, "delivery": found},
                   args.output)
    print_delivery_table(found)


if __name__ == "__main__":
    main()
