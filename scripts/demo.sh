#!/usr/bin/env bash
# Create/reuse .venv, install edgekit, package the bundled digits model, run the package.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh package,tflite,onnx
out="${DEMO_OUT:-out/demo}"
mkdir -p "$out"

echo "== edgekit package: models/digits/digits.keras -> INT8 (calibrated on models/digits/data/calibration.npz)"
edgekit package models/digits/digits.keras --target tflite \
  --calibration models/digits/data/calibration.npz --eval models/digits/data/eval.npz \
  -o "$out" --force --archive

echo
echo "== python -m edgekit.run on three evaluation digits (the device path: numpy + LiteRT, no TensorFlow)"
python - "$out" <<'PY'
import sys
from pathlib import Path
import numpy as np
out = Path(sys.argv[1])
with np.load("models/digits/data/eval.npz") as data:
    for i in range(3):
        np.save(out / f"digit{i}_label{data['y'][i]}.npy", data["x"][i])
PY
python -m edgekit.run "$out/digits.ekpkg" --top-k 3 \
  --input "$out"/digit0_label*.npy --input "$out"/digit1_label*.npy --input "$out"/digit2_label*.npy
