"""ExecuTorch: a PyTorch program lowered to XNNPACK with PT2E static INT8 in a converter child,
run by ExecuTorch's runtime (``ExecuTorchBackend``) and compared with PyTorch; a layer kept in
float is float in the lowered program. (The format is registered once its builder joins these to
the packaging run.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgekit.conversion import worker
from edgekit.errors import ConversionError, PackageError
from tests.conftest import built_once

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("executorch")

from edgekit.formats.executorch.backend import ExecuTorchBackend  # noqa: E402
from edgekit.formats.executorch.convert import convert_executorch  # noqa: E402
from edgekit.sources.pytorch import LOADER  # noqa: E402

NET = '''
import torch


class Net(torch.nn.Module):
    """A conv stem, a global average and a linear head: XNNPACK takes the conv and the head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.softmax(self.head(torch.relu(self.stem(x)).mean((2, 3))) * 4, dim=-1)
'''


def _net(folder: Path) -> Path:
    """``net.pt2`` (dynamic batch), its calibration samples and held-out samples with the
    PyTorch outputs, written in a child (torch.export.save)."""
    import subprocess
    import sys
    import textwrap

    (folder / "net.py").write_text(NET)
    code = f"""
        import sys, numpy as np, torch
        sys.path.insert(0, {str(folder)!r})
        from net import Net
        net = Net().eval()
        rng = np.random.default_rng(0)
        batch = torch.export.Dim("batch", min=1, max=1024)
        program = torch.export.export(net, (torch.rand(2, 3, 16, 16),), dynamic_shapes=({{0: batch}},))
        torch.export.save(program, {str(folder / "net.pt2")!r})
        np.save({str(folder / "calibration.npy")!r}, rng.random((64, 3, 16, 16), dtype=np.float32))
        held = rng.random((32, 3, 16, 16), dtype=np.float32)
        with torch.no_grad():
            np.savez({str(folder / "held.npz")!r}, x=held, y=net(torch.from_numpy(held)).numpy())
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, capture_output=True)
    return folder


@pytest.fixture(scope="module")
def net(tmp_path_factory) -> Path:
    return built_once(tmp_path_factory, "executorch-net", _net)


def _convert(net: Path, out: Path, **options) -> dict:
    model = {"form": "torch-program", "path": str(net / "net.pt2"), "loader": LOADER,
             "arguments": {"kind": "torch_export", "fixed": None}, "via": ""}
    return worker.call(convert_executorch, what="ExecuTorch conversion", model=model,
                       calibration_npy=str(net / "calibration.npy"), output=str(out / "model.int8.pte"),
                       output_names=["scores"], **options)


def test_a_pytorch_program_lowers_to_xnnpack_int8_and_runs_like_pytorch(net, tmp_path):
    """One conversion (each takes ~15 s): the head kept in float, the stem int8, and the float
    fallback program; all read back from the lowered programs and run by ExecuTorch."""
    info = _convert(net, tmp_path, float_output=str(tmp_path / "model.float32.pte"), keep_float=["head"])
    placement = info["placement"]
    assert placement["delegated"]["convolution"] == 1 and placement["delegated"]["linear"] == 1
    assert placement["delegated"]["quantize_per_tensor"] >= 2  # int8 activations inside the delegate
    assert placement["layers"] == {"head": "float", "stem": "int8"}  # the plan, as lowered
    assert info["float_placement"]["layers"] == {"head": "float", "stem": "float"}
    held = np.load(net / "held.npz")
    backend = ExecuTorchBackend(str(tmp_path / "model.int8.pte"), threads=1)
    assert backend.fixed_batch == 1 and backend.inputs[0].shape == (1, 3, 16, 16)
    produced = backend.run(held["x"])[0]  # 32 samples, one program call each
    assert produced.shape == held["y"].shape and produced.dtype == np.float32
    assert np.abs(produced - held["y"]).max() < 0.05
    assert (produced.argmax(1) == held["y"].argmax(1)).mean() >= 0.9
    floated = ExecuTorchBackend(str(tmp_path / "model.float32.pte")).run(held["x"])[0]
    np.testing.assert_allclose(floated, held["y"], atol=1e-5)
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


def test_an_unknown_layer_is_refused_by_name(net, tmp_path):
    with pytest.raises(ConversionError, match="no module named nope"):
        _convert(net, tmp_path, keep_float=["nope"])


def test_a_corrupt_program_is_a_package_error(tmp_path):
    bad = tmp_path / "model.int8.pte"
    bad.write_bytes(b"not a program" * 10)
    with pytest.raises(PackageError, match="ExecuTorch cannot load"):
        ExecuTorchBackend(str(bad))
