"""Build Keras MobileNetV2 224x224 (weights=None: nothing is downloaded) and synthetic calibration data.

    python models/mobilenet_v2/build.py [--output DIR] [--samples N]

Writes DIR/mobilenet_v2.keras (random weights, 14 MB: not committed) and DIR/calibration.npz
(N seeded synthetic 224x224 RGB uint8 images: smooth gradients plus noise, so activations
cover realistic ranges). The model has real MobileNetV2 structure and cost, so conversion
time, size and latency figures are representative; its predictions are meaningless.
Preprocessing is MobileNetV2's: pixels / 127.5 - 1, i.e. --scale 0.00392157 --mean 0.5 --std 0.5.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent


def synthetic_images(count: int, size: int = 224, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, 1.0, size, dtype=np.float32)
    images = np.empty((count, size, size, 3), np.uint8)
    for i in range(count):
        angle = rng.uniform(0, np.pi)
        ramp = np.cos(angle) * grid[None, :] + np.sin(angle) * grid[:, None]
        base = ramp[..., None] * rng.uniform(60, 200, 3) + rng.uniform(0, 55, 3)
        noise = rng.normal(0, rng.uniform(5, 40), (size, size, 3))
        images[i] = np.clip(base + noise, 0, 255).astype(np.uint8)
    return images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=HERE)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)

    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(224, 224, 3), weights=None, classes=1000)
    model.save(args.output / "mobilenet_v2.keras")
    np.savez(args.output / "calibration.npz", x=synthetic_images(args.samples))
    print(f"wrote {args.output / 'mobilenet_v2.keras'} and {args.output / 'calibration.npz'}")


if __name__ == "__main__":
    main()
