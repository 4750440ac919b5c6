"""The PyTorch digits reference model: a small residual CNN (BatchNorm, ReLU) on 8x8 NCHW digits.

    edgekit package models/digits_torch/model.py:factory -c models/digits_torch/data/calibration.npz ...

``factory()`` returns the network in eval mode with the weights ``train.py`` wrote
(``digits_torch.pt``, a state_dict). Input: (N, 1, 8, 8) floats in [0, 1] (the packager infers
x/255 from the uint8 data); output: softmax over the 10 digits.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

WEIGHTS = Path(__file__).resolve().parent / "digits_torch.pt"


class DigitsNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.head = nn.Linear(32, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stem(image)
        x = x + self.block(x)  # residual
        x = self.down(x).mean(dim=(2, 3))
        return torch.softmax(self.head(x), dim=1)


def factory() -> nn.Module:
    model = DigitsNet()
    model.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))
    return model.eval()
