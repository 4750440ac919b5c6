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


def test_conv_batch_norm_pattern_programs_are_exported_once_and_annotate_the_same():
    """The XNNPACK quantizer exports its conv + batch-norm pattern programs on every quantization
    (2-3.5 s each): exported once per process, every quantization gets the same annotation and
    the same quantized program, and the exports run only for the first."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("executorch")
    import types

    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer_utils
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.utils import _get_aten_graph_module_for_pattern as pytorchs

    from edgekit.conversion.pt2e import pattern_programs_exported_once

    exports = []

    def counted(*args, **kwargs):
        exports.append(1)
        return pytorchs(*args, **kwargs)

    utils = types.SimpleNamespace(_get_aten_graph_module_for_pattern=counted)
    example = (torch.rand(1, 3, 8, 8),)

    def quantized_code(export_pattern) -> str:
        xnnpack_quantizer_utils._get_aten_graph_module_for_pattern = export_pattern
        program = torch.export.export(_ConvBn().eval(), example)
        prepared = prepare_pt2e(program.module(), XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(is_per_channel=True)))
        prepared(*example)
        return convert_pt2e(prepared).code

    installed = xnnpack_quantizer_utils._get_aten_graph_module_for_pattern
    try:
        plain = quantized_code(counted)
        assert exports, "the quantizer exported no pattern: nothing was compared"
        pattern_programs_exported_once(utils)
        once = utils._get_aten_graph_module_for_pattern
        exports.clear()
        first = quantized_code(once)
        made = len(exports)
        second = quantized_code(once)
    finally:
        xnnpack_quantizer_utils._get_aten_graph_module_for_pattern = installed
    assert made > 0 and len(exports) == made  # the second quantization exported nothing
    assert plain == first == second


class _ConvBn:  # built lazily: torch is optional for this module's other tests
    def __new__(cls):
        import torch

        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
