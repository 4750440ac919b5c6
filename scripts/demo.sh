#!/usr/bin/env bash
# Create/reuse .venv, install edgekit (packager, runtimes, server, signing), package the bundled
# digits model for every format, run each artifact this machine can run, benchmark them and print
# the comparison. A few minutes on a fresh machine, under a minute once installed
# (scripts/bench_demo.py times it). The PyTorch route and the rest: README "Tour" and docs/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh package,tflite,onnx,server,sign
out="${DEMO_OUT:-out/demo}"
mkdir -p "$out"
started=$SECONDS

echo "== 1/4 edgekit package: models/digits/digits.keras -> INT8 TFLite, ONNX (one build per INT8 scheme"
echo "       this machine's CPU runs fastest), CoreML; every artifact checked against the float model"
edgekit package models/digits/digits.keras --format all --profile auto --no-also-float --preprocessing 0..1 \
  --calibration models/digits/data/calibration.npz --eval models/digits/data/eval.npz \
  -o "$out" --force --archive

echo
echo "== 2/4 python -m edgekit.run on three evaluation digits (the device path: numpy + LiteRT or ONNX Runtime)"
python - "$out" <<'PY'
import sys
from pathlib import Path
import numpy as np
out = Path(sys.argv[1])
with np.load("models/digits/data/eval.npz") as data:
    for i in range(3):
        np.save(out / f"digit{i}_label{data['y'][i]}.npy", data["x"][i])
PY
for artifact in tflite onnx; do
  echo "-- $artifact"
  python -m edgekit.run "$out/digits.ekpkg" --artifact "$artifact" --top-k 3 \
    --input "$out"/digit0_label*.npy --input "$out"/digit1_label*.npy --input "$out"/digit2_label*.npy
done
echo "-- coreml: runs on macOS only (built and validated here by edgekit's MIL evaluator)"

echo
echo "== 3/4 benchmark every artifact x runtime this machine runs (interleaved, raw samples kept, accuracy on device)"
python -m edgekit.run "$out/digits.edgekit" --bench --sweep --sweep-threads 1 --runs 2000 --min-seconds 0.5 \
  --input "$out"/digit0_label*.npy --eval models/digits/data/eval.npz --report "$out/digits.bench.json"

echo
echo "== 4/4 edgekit compare: the table and charts (reports from several devices add a speedup column)"
edgekit compare "$out/digits.bench.json" --html "$out/digits.bench.html"
echo
echo "demo finished in $((SECONDS - started)) s after installing; HTML report: $out/digits.bench.html"
echo "next: the README's Tour (serving, signing, PyTorch and ONNX sources, tuning on a device)"
