"""Train the PyTorch digits reference model and write its NCHW data files.

    python models/digits_torch/train.py     # writes digits_torch.pt and data/*.npz (~5 s on 2 cores)

Uses the same digits as the Keras reference (models/digits/data), laid out NCHW as PyTorch
models take them: calibration and evaluation files hold uint8 (N, 1, 8, 8) arrays, class
targets ``y`` and ``labels``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "digits" / "data"
sys.path.insert(0, str(HERE))

from model import WEIGHTS, DigitsNet  # noqa: E402


def nchw(split: str) -> dict[str, np.ndarray]:
    with np.load(SOURCE / f"{split}.npz") as data:
        return {"x": np.ascontiguousarray(data["x"].transpose(0, 3, 1, 2)), "y": data["y"], "labels": data["labels"]}


def main(epochs: int = 80) -> None:
    torch.manual_seed(0)
    train, evaluation = nchw("train"), nchw("eval")
    (HERE / "data").mkdir(exist_ok=True)
    for split in ("calibration", "eval"):
        np.savez_compressed(HERE / "data" / f"{split}.npz", **nchw(split))
    x = torch.from_numpy(train["x"].astype(np.float32) / 255)
    y = torch.from_numpy(train["y"])
    model = DigitsNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(x)).split(32):
            optimizer.zero_grad()
            probabilities = model(x[batch])
            loss = torch.nn.functional.nll_loss(torch.log(probabilities + 1e-9), y[batch])
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        predicted = model(torch.from_numpy(evaluation["x"].astype(np.float32) / 255)).argmax(1).numpy()
    torch.save(model.state_dict(), WEIGHTS)
    accuracy = float(np.mean(predicted == evaluation["y"]))
    print(f"eval accuracy {accuracy:.4f}; saved {WEIGHTS} ({WEIGHTS.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
