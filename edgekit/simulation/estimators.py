"""How a format's quantizer turns the calibration samples into an activation's range.

The simulation must place each activation on the grid the format's quantizer will: a range that
differs by a tenth of a step moves every grid point, and a detector's score threshold or a
classifier's close logits land on the other side of one. Two estimators cover the quantizers
edgekit drives:

* ``minmax``: the smallest and largest value over every sample (ONNX Runtime's MinMax, LiteRT
  Quantizer as edgekit calls it, TensorFlow's converter);
* ``histogram``: PyTorch's ``HistogramObserver``, which the PT2E quantizers (ExecuTorch's XNNPACK
  quantizer, litert-torch's) put on every activation: a 2048-bin histogram of every sample, then
  the sub-range whose int8 grid has the least L2 error, clipping the rare extremes.

The histogram estimator runs PyTorch's own observer (the same algorithm as torchao's, which the
PT2E flows import), fed the samples in the simulation's batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MINMAX, HISTOGRAM = "minmax", "histogram"
ESTIMATORS = (MINMAX, HISTOGRAM)
EPS = 2.0 ** -12  # the PT2E quantization configs' smallest scale


class MinMax:
    """The smallest and largest finite value seen per tensor."""

    def __init__(self) -> None:
        self.low: dict[str, float] = {}
        self.high: dict[str, float] = {}

    def update(self, name: str, finite: np.ndarray) -> None:
        self.low[name] = min(self.low.get(name, np.inf), float(finite.min()))
        self.high[name] = max(self.high.get(name, -np.inf), float(finite.max()))

    def ranges(self) -> dict[str, list[float]]:
        return {name: [self.low[name], self.high[name]] for name in self.low}


class Histogram:
    """PT2E's ``HistogramObserver`` per tensor (int8, per-tensor affine, [-128, 127]): the range of
    the scale and zero point it settles on. Only the tensors in ``only`` (those an op that
    computes writes, and the inputs: what a quantizer observes) get an observer, which costs a
    histogram per batch and a search per tensor; the others (shapes, data movement, constants)
    keep their min and max."""

    def __init__(self, only: set[str] | None = None) -> None:
        self.observers: dict[str, Any] = {}
        import torch  # once, not per tensor and batch

        self.torch = torch
        self.only = only
        self.others = MinMax()

    def update(self, name: str, finite: np.ndarray) -> None:
        if self.only is not None and name not in self.only:
            self.others.update(name, finite)
            return
        observer = self.observers.get(name)
        if observer is None:
            observer = self.observers[name] = _observer()
        observer(self.torch.from_numpy(np.ascontiguousarray(finite, dtype=np.float32)))

    def ranges(self) -> dict[str, list[float]]:
        found = self.others.ranges()
        for name, observer in self.observers.items():
            scale, zero = observer.calculate_qparams()
            scale, zero = float(scale.reshape(-1)[0]), int(zero.reshape(-1)[0])
            # the range whose asymmetric int8 grid is exactly the observer's (``graph._activation_grid``)
            found[name] = [(-128 - zero) * scale, (127 - zero) * scale]
        return found


def _observer() -> Any:
    import torch

    from ..conversion import histogram_search

    histogram_search.install()
    try:
        from torch.ao.quantization.observer import HistogramObserver
        dtype = torch.qint8
    except ImportError:  # later PyTorch keeps it in torchao only
        from torchao.quantization.pt2e.observer import HistogramObserver
        dtype = torch.int8
    return HistogramObserver(dtype=dtype, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_affine, eps=EPS)


def estimator(name: str, observed: set[str] | None = None) -> MinMax | Histogram:
    """A fresh estimator of that name; ``observed``: the tensors a quantizer observes (None: all)."""
    if name == HISTOGRAM:
        return Histogram(observed)
    if name == MINMAX:
        return MinMax()
    raise ValueError(f"unknown range estimator {name!r} (known: {', '.join(ESTIMATORS)})")
