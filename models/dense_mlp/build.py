"""Build a dense-layer model (1024 -> 2048 -> 2048 -> 10), the kind INT8 speeds up on CPUs.

    python models/dense_mlp/build.py [--output DIR]

Writes DIR/dense_mlp.keras (about 24 MB of float32 weights: not committed) and
DIR/calibration.npz (200 seeded standard-normal feature vectors). Seeded random weights; the
INT8 artifacts keep 27-38 dB SQNR against it; its random class decisions are near-ties, so it is
packaged with ``--output-kind values`` (SQNR) rather than judged by top-1 agreement. At batch 1 its matrix-vector
products are bound by memory bandwidth, and INT8 weights are a quarter of the bytes: the
counterpart of the convolutional reference models, where float is often as fast or faster on
CPUs without int8 dot-product instructions. A speed reference (scripts/bench_runtime.py), not
an accuracy one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "build")
    args = parser.parse_args()
    import keras
    import numpy as np

    args.output.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(0)
    features = keras.Input((1024,), name="features")
    hidden = keras.layers.Dense(2048, activation="relu")(features)
    hidden = keras.layers.Dense(2048, activation="relu")(hidden)
    model = keras.Model(features, keras.layers.Dense(10, activation="softmax", name="scores")(hidden))
    model.save(args.output / "dense_mlp.keras")
    np.savez(args.output / "calibration.npz",
             x=np.random.default_rng(0).normal(0, 1, (200, 1024)).astype(np.float32))
    print(args.output / "dense_mlp.keras")


if __name__ == "__main__":
    main()
