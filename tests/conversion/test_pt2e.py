"""PT2E helpers shared by the PyTorch converters: torchao's QAT conv + BatchNorm search runs only
where its pattern can match."""

from __future__ import annotations

import pytest


def _graph(forward):
    """torch.export's graph of a small eval-mode module whose forward is ``forward(module, x)``."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)
            self.linear, self.bn1d = torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)

        def forward(self, x):
            return forward(self, x)

    return torch.export.export(Net().eval(), (torch.rand(2, 3, 8, 8),)).graph_module


def _is_batch_norm(node) -> bool:
    return "batch_norm" in str(getattr(node, "target", ""))


def _is_conv(node) -> bool:
    return "conv2d" in str(getattr(node, "target", ""))


def test_the_qat_conv_batchnorm_search_runs_only_where_its_pattern_can_match():
    """torchao's convert_pt2e spends ~35 s looking for QAT conv + BatchNorm patterns whenever a
    BatchNorm is left; it is skipped only where no conv reaches a BatchNorm (directly, or through
    the pattern's division and bias addition). The skip left litert-torch's artifact byte for byte
    the same on a BatchNorm-after-ReLU model (models/verdict audio_bn: PT2E step 46 s -> 16 s)."""
    torch = pytest.importorskip("torch")
    from edgekit.conversion.pt2e import conv_reaches_batch_norm

    def reaches(forward) -> bool:
        return conv_reaches_batch_norm(_graph(forward), _is_batch_norm, _is_conv)

    assert not reaches(lambda m, x: m.bn(torch.relu(m.conv(x))))  # BatchNorm after a ReLU
    assert not reaches(lambda m, x: m.bn1d(m.linear(m.conv(x).mean((2, 3)))))  # after a Linear layer
    assert not reaches(lambda m, x: m.conv(x))  # no BatchNorm at all
    assert reaches(lambda m, x: m.bn(m.conv(x)))  # a conv feeding it directly
    scale = torch.full((1, 4, 1, 1), 2.0)
    assert reaches(lambda m, x: m.bn(m.conv(x) / scale + 1.0))  # the QAT pattern's division and bias
