#!/usr/bin/env bash
# Run the edgekit device runtime on aarch64 (Debian bookworm arm64, as on Raspberry Pi OS) under
# qemu-user, and check its predictions against the x86-64 ones.
#
#   ./scripts/test-arm64.sh            (needs root for apt-get; CI runs it from .ci/run)
#
# 1. Debian's debootstrap --foreign builds a minimal arm64 root with python3 (its .debs are
#    extracted by hand: the foreign stage does not unpack them), run with qemu-aarch64-static -L
#    (no binfmt, no chroot).
# 2. aarch64 wheels come from the registry with pip download --platform: numpy, ai-edge-litert
#    1.4.0 (the newest with a cp311 aarch64 wheel) and onnxruntime 1.20.1 (1.31 crashes at import
#    under qemu-user 7.2), plus edgekit itself (pure Python) with its runtime dependencies as pyproject.toml lists them.
# 3. The digits package is built on x86-64, run there and under qemu, and the outputs compared.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh package,tflite,onnx

work="${ARM64_WORK:-$PWD/out/arm64}"
root="$work/root"
site="$work/site"   # outside the arm64 root: qemu -L maps only paths that exist inside it
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$work"

need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]} (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -x "$root/usr/bin/python3.11" ]; then
  echo "== debootstrap bookworm arm64 (minbase + python3) into $root"
  rm -rf "$root"
  debootstrap --foreign --arch=arm64 --variant=minbase --include=python3 bookworm "$root" "$mirror" >/dev/null
  for deb in "$root"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$root"; done
fi
qemu_python=(qemu-aarch64-static -L "$root" "$root/usr/bin/python3.11")
"${qemu_python[@]}" -c 'import platform, sys; print("arm64 python", sys.version.split()[0], platform.machine())'

if [ ! -f "$site/.complete" ]; then
  echo "== aarch64 wheels (pip download --platform manylinux aarch64, cp311)"
  rm -rf "$site" "$work/wheels"
  mkdir -p "$site" "$work/wheels"
  platform_args=(--only-binary=:all: --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64
                 --platform manylinux_2_28_aarch64 --python-version 3.11 --implementation cp)
  # edgekit's own runtime dependencies, read from pyproject.toml so a new one cannot be missed here;
  # numpy 2.2 is the release checked under qemu here
  mapfile -t runtime_deps < <(python - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    for requirement in tomllib.load(f)["project"]["dependencies"]:
        print(requirement)
PY
)
  python -m pip download -q "${platform_args[@]}" -d "$work/wheels" \
    "${runtime_deps[@]}" "numpy<2.3" "ai-edge-litert==1.4.0" "onnxruntime==1.20.1"
  python -m pip wheel -q --no-deps -w "$work/wheels" .
  for wheel in "$work"/wheels/*.whl; do python -m zipfile -e "$wheel" "$site"; done
  mkdir -p "$site/edgekit-profiles" && cp targets/*.toml "$site/edgekit-profiles/"
  touch "$site/.complete"
fi

echo "== digits package (tflite + onnx) and x86-64 reference outputs"
python - "$work" <<'PY'
import sys
from pathlib import Path
import numpy as np
import edgekit
work = Path(sys.argv[1])
if not (work / "pkg" / "digits.edgekit").is_dir():
    edgekit.package("models/digits/digits.keras", "models/digits/data/calibration.npz", str(work / "pkg"),
                    eval="models/digits/data/eval.npz", formats=["tflite", "onnx"], force=True)
with np.load("models/digits/data/eval.npz") as data:
    np.save(work / "inputs.npy", data["x"][:16])
for artifact in ("tflite", "onnx-s8s8"):  # the S8S8 build on both machines ("onnx": each CPU's best)
    with edgekit.load(work / "pkg" / "digits.edgekit", artifact=artifact) as model:
        np.save(work / f"x86_{artifact}.npy", model.predict(np.load(work / "inputs.npy")))
PY

arm_env=(env PYTHONPATH="$site" EDGEKIT_PROFILES="$site/edgekit-profiles" EDGEKIT_CACHE_DIR="$work/cache")
status=0
for artifact in tflite onnx-s8s8; do
  echo "== python -m edgekit.run --artifact $artifact on aarch64 (qemu)"
  rm -f "$work/arm64_$artifact.npy"
  if "${arm_env[@]}" "${qemu_python[@]}" -m edgekit.run "$work/pkg/digits.edgekit" --artifact "$artifact" -v \
       --input "$work/inputs.npy" --output "$work/arm64_$artifact.npy"; then
    python - "$work" "$artifact" <<'PY' || status=1
import sys
from pathlib import Path
import numpy as np
work, artifact = Path(sys.argv[1]), sys.argv[2]
x86, arm = np.load(work / f"x86_{artifact}.npy"), np.load(work / f"arm64_{artifact}.npy")
same_top1 = bool((x86.argmax(1) == arm.argmax(1)).all())
diff = float(np.abs(x86 - arm).max())
print(f"{artifact}: {len(x86)} inputs, top-1 identical: {same_top1}, max |x86 - arm64| = {diff:.6f}")
# int8 outputs are dequantized with scale 1/256: allow one quantization step between kernels
sys.exit(0 if same_top1 and diff <= 1 / 256 + 1e-6 else 1)
PY
  else
    echo "$artifact: edgekit.run failed under qemu" >&2
    status=1
  fi
done
"${qemu_python[@]}" -c 'import sys; sys.path.insert(0, sys.argv[1]); import edgekit.run; heavy = [m for m in ("tensorflow", "keras", "coremltools") if m in sys.modules]; print("arm64 imports of build-side libraries:", heavy or "none")' "$site"
[ "$status" -eq 0 ] && echo "arm64: predictions match x86-64" || echo "arm64: MISMATCH or failure" >&2
exit "$status"
