"""A PyTorch module given directly, trained with eager-mode QAT and PyTorch's default x86 QAT
config (fused observer-and-fake-quant modules, uint8 activations on a reduced [0, 127] range,
per-channel int8 weights): ``edgekit package models/quantized/eager_qat.py:model``. The training
is seeded and takes about a second, so the factory returns the same model every time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# the reference models' builder, loaded by path (a module named ``build`` may be installed too)
_spec = importlib.util.spec_from_file_location("edgekit_quantized_models", Path(__file__).with_name("build.py"))
assert _spec is not None and _spec.loader is not None
_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_build)
_net, _train, images = _build._net, _build._train, _build.images


def model() -> object:
    import torch

    torch.manual_seed(4)
    x, y = images(500, 4)
    net = _net()
    _train(net.train(), x, y, 40)
    net.qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
    torch.ao.quantization.fuse_modules_qat(net, [["conv1", "relu1"], ["conv2", "relu2"]], inplace=True)
    torch.ao.quantization.prepare_qat(net, inplace=True)
    _train(net, x, y, 20)
    return net.eval()


def data(folder: Path) -> None:
    """Calibration and evaluation arrays for it (input ``x``, labels ``y``)."""
    import numpy as np

    x, y = images(600, 5)
    np.savez(folder / "calibration.npz", x=x[:150], y=y[:150])
    np.savez(folder / "eval.npz", x=x[150:], y=y[150:])
