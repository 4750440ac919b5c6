"""PT2E's HistogramObserver range search, ported without a tensor per comparison: the same range
as torchao's own method, bit for bit, on ordinary, heavy-tailed, outlier and degenerate data."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
observer_module = pytest.importorskip("torchao.quantization.pt2e.observer")

from edgekit.conversion import histogram_search  # noqa: E402


def _original(cls):
    method = cls._non_linear_param_search
    return getattr(method, "original", method)


@pytest.mark.parametrize("kind", ["normal", "outliers", "cauchy", "constant", "few_values", "tiny", "relu"])
def test_the_port_finds_the_same_range_as_the_original(kind):
    rng = np.random.default_rng(abs(hash(kind)) % 1000)
    n = 5000
    x = {"normal": lambda: rng.normal(0, 1, n),
         "outliers": lambda: np.concatenate([rng.normal(0, 1, n), rng.normal(0, 100, 5)]),
         "cauchy": lambda: rng.standard_cauchy(n),
         "constant": lambda: np.full(n, 3.0),
         "few_values": lambda: rng.integers(0, 3, n).astype(float),
         "tiny": lambda: rng.exponential(1, n) * 1e-4,
         "relu": lambda: np.maximum(rng.normal(0.2, 1, n), 0)}[kind]()
    cls = observer_module.HistogramObserver
    observer = cls()
    for scale in (1.0, 1.7, 0.4):  # ranges widened and rebinned as calibration goes on
        observer(torch.tensor(x * scale, dtype=torch.float32))
    want = _original(cls)(observer)
    got = histogram_search.search(observer)
    assert (float(got[0]), float(got[1])) == (float(want[0]), float(want[1]))


def test_install_patches_only_the_method_it_follows():
    patched = histogram_search.install()
    cls = observer_module.HistogramObserver
    assert getattr(cls._non_linear_param_search, "edgekit_port", False)
    assert "torchao.quantization.pt2e.observer.HistogramObserver" in patched or \
        getattr(cls._non_linear_param_search, "edgekit_port", False)
    assert histogram_search.install() == []  # once is enough
