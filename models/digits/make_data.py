"""Rebuild data/*.npz from the 8x8 handwritten digits that scikit-learn bundles (no download).

The .npz files are committed, so this only matters to change the split:
    pip install scikit-learn && python models/digits/make_data.py

Pixels are scaled from sklearn's 0..16 to uint8 0..255 so the data looks like real 8-bit
grayscale images. Split: 60% train, 20% calibration, 20% evaluation, stratified, seed 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent


def main() -> None:
    digits = load_digits()
    x = np.clip(np.round(digits.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)[..., None]
    y = digits.target.astype(np.int64)
    x_train, x_rest, y_train, y_rest = train_test_split(x, y, test_size=0.4, stratify=y, random_state=0)
    x_cal, x_eval, y_cal, y_eval = train_test_split(x_rest, y_rest, test_size=0.5, stratify=y_rest, random_state=0)
    labels = np.array([str(i) for i in range(10)])
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for name, xs, ys in (("train", x_train, y_train), ("calibration", x_cal, y_cal), ("eval", x_eval, y_eval)):
        np.savez_compressed(out / f"{name}.npz", x=xs, y=ys, labels=labels)
        print(f"{name}: {len(xs)} samples")


if __name__ == "__main__":
    main()
