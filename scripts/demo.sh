#!/usr/bin/env bash
# Create/reuse .venv, install edgekit, package the bundled digits models (Keras and PyTorch) for
# every format each can build, run each artifact this machine can run, benchmark them and print
# the comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh package,tflite,onnx,torch
out="${DEMO_OUT:-out/demo}"
mkdir -p "$out"

echo "== edgekit package: models/digits/digits.keras -> INT8 TFLite, ONNX, CoreML (one calibration set)"
edgekit package models/digits/digits.keras --format all \
  --calibration models/digits/data/calibration.npz --eval models/digits/data/eval.npz \
  -o "$out" --force --archive

echo
echo "== python -m edgekit.run on three evaluation digits (the device path: numpy + LiteRT or ONNX Runtime, no TensorFlow)"
python - "$out" <<'PY'
import sys
from pathlib import Path
import numpy as np
out = Path(sys.argv[1])
with np.load("models/digits/data/eval.npz") as data:
    for i in range(3):
        np.save(out / f"digit{i}_label{data['y'][i]}.npy", data["x"][i])
PY
for target in tflite onnx; do
  echo "-- $target"
  python -m edgekit.run "$out/digits.ekpkg" --artifact "$target" --top-k 3 \
    --input "$out"/digit0_label*.npy --input "$out"/digit1_label*.npy --input "$out"/digit2_label*.npy
done
echo "-- coreml: runs on macOS only (built and checked structurally here)"

echo
echo "== benchmark every artifact this machine runs (interleaved sweep, raw samples kept)"
python -m edgekit.run "$out/digits.edgekit" --bench --sweep --runs 200 --min-seconds 1 \
  --input "$out"/digit0_label*.npy --eval models/digits/data/eval.npz --report "$out/digits.bench.json"

echo
echo "== edgekit package: the PyTorch digits model (models/digits_torch/model.py:factory) -> TFLite, ONNX, CoreML"
echo "   (validated against the PyTorch model itself; TFLite via litert-torch in its own environment, created on"
echo "   first use; its final softmax stays float, hence --allow-float-ops)"
edgekit package models/digits_torch/model.py:factory --name digits_torch --format all --allow-float-ops \
  --calibration models/digits_torch/data/calibration.npz --eval models/digits_torch/data/eval.npz \
  -o "$out" --force
python - "$out" <<'PY'
import sys
from pathlib import Path
import numpy as np
with np.load("models/digits_torch/data/eval.npz") as data:
    np.save(Path(sys.argv[1]) / "digit0_nchw.npy", data["x"][0])
PY
python -m edgekit.run "$out/digits_torch.edgekit" --bench --sweep --runs 200 --min-seconds 1 \
  --input "$out/digit0_nchw.npy" --eval models/digits_torch/data/eval.npz --report "$out/digits_torch.bench.json"

echo
echo "== edgekit compare: both models' artifacts on this device (reports from several devices add speedups)"
edgekit compare "$out/digits.bench.json" "$out/digits_torch.bench.json" --allow-different-models \
  --html "$out/digits.bench.html"
echo "HTML report with charts: $out/digits.bench.html"
