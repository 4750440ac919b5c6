"""ExecuTorch: a PyTorch program lowered to XNNPACK with PT2E static INT8 in a converter child,
run by ExecuTorch's runtime (``ExecuTorchBackend``) and compared with PyTorch; a layer kept in
float is float in the lowered program. Then the format end to end: `edgekit package --format
executorch` from a PyTorch factory and from ONNX (validated, searched, placed), run on the device
side, tuned and served."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import json
from pathlib import Path

import numpy as np
import pytest

import edgekit
from edgekit.conversion import worker
from edgekit.errors import ConversionError, PackageError
from tests.conftest import ROOT, built_once, device_cli, device_matches, edgekit_cli, exec_here

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("executorch")

from edgekit.formats.executorch.backend import ExecuTorchBackend  # noqa: E402
from edgekit.conversion.forms import ModelForm  # noqa: E402
from edgekit.formats.plan import PrecisionPlan  # noqa: E402
from edgekit.formats.executorch.convert import ExecuTorchReport, ExecuTorchRequest, convert_executorch  # noqa: E402
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
        held = rng.random((120, 3, 16, 16), dtype=np.float32)
        with torch.no_grad():
            np.savez({str(folder / "held.npz")!r}, x=held, y=net(torch.from_numpy(held)).numpy())
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, capture_output=True)
    return folder


@pytest.fixture(scope="module")
def net(tmp_path_factory) -> Path:
    return built_once(tmp_path_factory, "executorch-net", _net)


def _program(path: Path) -> ModelForm:
    return ModelForm("torch-program", str(path), LOADER, {"kind": "torch_export", "fixed": None})


def _convert(net: Path, out: Path, **options) -> ExecuTorchReport:
    return worker.convert(convert_executorch, ExecuTorchRequest(
        model=_program(net / "net.pt2"), calibration_npy=str(net / "calibration.npy"),
        output=str(out / "model.int8.pte"), output_names=("scores",), **options), what="ExecuTorch conversion")


def test_a_pytorch_program_lowers_to_xnnpack_int8_and_runs_like_pytorch(net, tmp_path):
    """One conversion (each takes ~15 s): the head kept in float, the stem int8, and the float
    fallback program; all read back from the lowered programs and run by ExecuTorch."""
    info = _convert(net, tmp_path, float_output=str(tmp_path / "model.float32.pte"), plan=PrecisionPlan.of(floats=["head"]),
                    explain_npy=str(net / "calibration.npy"))
    placement = info.placement
    assert placement["delegated"]["convolution"] == 1 and placement["delegated"]["linear"] == 1
    assert placement["delegated"]["quantize_per_tensor"] >= 2  # int8 activations inside the delegate
    assert placement["layers"] == {"head": "float", "stem": "int8"}  # the plan, as lowered
    assert info.float_placement["layers"] == {"head": "float", "stem": "float"}
    assert info.weighted_layers == ("stem", "head")  # graph order: what the search raises from either end
    record = info.precision.record  # the head (kept) and the mean (a portable kernel) in float
    assert record["float_layers"] == ["head", "mean"] and record["ops"]["integer_weighted"] == 1
    assert info.precision.label == "int8+float (2 layers)" and record["float_tail_ops"] == ["_softmax"]
    report = {row["layer"]: row for row in info.explain}  # PT2E's quantized graph vs its float one
    assert report["stem"]["op"] == "conv2d" and 20 < report["stem"]["sqnr_db"] < 80
    held = np.load(net / "held.npz")
    backend = ExecuTorchBackend(str(tmp_path / "model.int8.pte"), threads=1)
    assert backend.fixed_batch == 1 and backend.inputs[0].shape == (1, 3, 16, 16)
    assert [t.name for t in backend.inputs] == ["x"] and [t.name for t in backend.outputs] == ["scores"]
    produced = backend.run(held["x"])[0]  # 120 samples, one program call each
    assert produced.shape == held["y"].shape and produced.dtype == np.float32
    assert np.abs(produced - held["y"]).max() < 0.05
    assert (produced.argmax(1) == held["y"].argmax(1)).mean() >= 0.9
    floated = ExecuTorchBackend(str(tmp_path / "model.float32.pte")).run(held["x"])[0]
    np.testing.assert_allclose(floated, held["y"], atol=1e-5)
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


def test_an_unknown_layer_is_refused_by_name(net, tmp_path):
    with pytest.raises(ConversionError, match="no module or traced op named nope"):
        _convert(net, tmp_path, plan=PrecisionPlan.of(floats=["nope"]))


def test_a_corrupt_program_is_a_package_error(tmp_path):
    bad = tmp_path / "model.int8.pte"
    bad.write_bytes(b"not a program" * 10)
    with pytest.raises(PackageError, match="ExecuTorch cannot load"):
        ExecuTorchBackend(str(bad))


def test_a_program_corrupted_where_its_loader_crashes_is_an_error_not_a_segfault(net, tmp_path):
    """Bytes rewritten inside a real program's header (a tampered, unsigned package whose digest was
    updated): ExecuTorch's loader segfaulted the process; its first load now happens in a child."""
    _convert(net, tmp_path)
    program = tmp_path / "model.int8.pte"
    data = bytearray(program.read_bytes())
    data[200:400] = np.random.default_rng(1).integers(0, 256, 200, dtype=np.uint8).tobytes()
    program.write_bytes(bytes(data))
    code = ("import sys\nfrom edgekit.errors import PackageError\n"
            "from edgekit.formats.executorch.backend import ExecuTorchBackend\n"
            "try:\n    ExecuTorchBackend(sys.argv[1])\nexcept PackageError as exc:\n    sys.exit(f'error: {exc}')")
    result = subprocess.run([sys.executable, "-c", code, str(program)], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "error: ExecuTorch cannot load" in result.stderr and "corrupt" in result.stderr


# --- the format end to end ---------------------------------------------------------------------

DIGITS_TORCH = ROOT / "models" / "digits_torch"


def test_a_pytorch_factory_ships_an_int8_program_with_its_plan_and_runs_tunes_and_serves(tmp_path):
    """digits_torch with its head kept in float and the per-layer report: the plan as lowered, the
    report, the float fallback, the device runner equal to the loaded model, placement naming the
    op XNNPACK leaves to the portable kernels (`--fail-on-fallback` fails on it), tune, the server."""
    result = edgekit_cli("package", f"{DIGITS_TORCH / 'model.py'}:factory", "-c", DIGITS_TORCH / "data/calibration.npz",
                         "--eval", DIGITS_TORCH / "data/eval.npz", "--format", "executorch", "--keep-float", "head",
                         "--explain", "-o", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "XNNPACK runs" in result.stdout and "portable kernels run 1 ops in float outside it (mean x1)" in result.stdout
    package = tmp_path / "model.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    record = manifest["validation"]["artifacts"]["executorch"]
    assert record["verdict"] == "passed" and record["accuracy_drop_pp"] <= 1.0
    artifact = next(a for a in manifest["artifacts"] if a["format"] == "executorch" and a["path"].endswith(".int8.pte"))
    details = artifact["details"]
    assert details["placement"]["layers"] == {"block.0": "int8", "down.0": "int8", "head": "float", "stem.0": "int8"}
    assert artifact["precision"] == "int8+float (2 layers)"  # the head kept, the mean on a portable kernel
    assert details["precision"]["float_layers"] == ["head", "mean"]
    assert details["precision_plan"]["read_back"] == {"landed": ["head"], "missed": []}  # read from the program
    assert {row["layer"] for row in details["explain"]} >= {"stem.0", "block.0", "down.0"}
    assert any(a["path"].endswith("float32.pte") for a in manifest["artifacts"])  # the float fallback
    x = np.load(DIGITS_TORCH / "data/eval.npz")["x"][:6]
    with edgekit.load(package, artifact="executorch") as loaded:
        expected = loaded.predict(x)
        assert loaded.output_names == ["output"] and loaded.backend.describe()["backend"] == "executorch"
    device_matches(package, x, expected, 1e-6, tmp_path, artifacts=("executorch",))
    temp = tmp_path / "tmp"  # importing ExecuTorch's runtime left an empty torchinductor_<user> here
    temp.mkdir()
    bench = device_cli(package, "--artifact", "executorch", "--bench", "--runs", "20", "--fail-on-fallback",
                       "--report", tmp_path / "bench.json", env={"TMPDIR": str(temp)})
    assert bench.returncode == 3 and "ran outside XNNPACK (mean x1)" in bench.stderr, bench.stderr[-2000:]
    assert not [p.name for p in temp.iterdir() if p.name != ".ses"]  # LiteRT's session id file aside
    chatter = ("cpuinfo_utils", "threadpool.cpp", "Failed to load", "_pytree")  # ExecuTorch's C++ and import noise
    assert not any(noise in bench.stdout + bench.stderr for noise in chatter), bench.stderr[-2000:]
    libraries = json.loads((tmp_path / "bench.json").read_text())["device"]["libraries"]
    assert libraries["executorch"] not in ("?", "unknown") and libraries["executorch"][0].isdigit()
    # two thread counts interleaved on ExecuTorch's one thread pool per process (resetting it under a
    # loaded program aborted the process)
    tuned = edgekit_cli("tune", package, "--tune-artifacts", "executorch,executorch-float32", "--tune-threads", "1,2",
                        "--tune-seconds", "1")
    assert tuned.returncode == 0 and "tuned: executorch" in tuned.stderr, tuned.stderr[-2000:]
    _served(package, x, expected)


def _served(package: Path, x: np.ndarray, expected: np.ndarray) -> None:
    """The KServe v2 dataplane answers with the program's outputs, by name."""
    from edgekit.server.dataplane import DataPlane, ServerOptions

    plane = DataPlane([edgekit.load(package, artifact="executorch")], ServerOptions())
    scaled = x.astype(np.float32) / 255  # the server takes the model's own input: the package's scaling done
    body = json.dumps({"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                                   "data": scaled.ravel().tolist()}]}).encode()

    async def scenario():
        plane.start()
        content, _ = await plane.infer("model", None, body, None)
        await plane.stop()
        return json.loads(content)

    (output,) = asyncio.run(scenario())["outputs"]
    assert output["name"] == "output"
    np.testing.assert_allclose(np.asarray(output["data"]).reshape(expected.shape), expected, atol=1e-4)


def test_an_onnx_model_reaches_executorch_through_the_pytorch_rebuild_with_its_names(net, tmp_path):
    """ONNX -> PyTorch module -> PT2E: the program keeps the ONNX graph's input and output names,
    and a layer is kept in float by its ONNX node name."""
    import subprocess
    import sys
    import textwrap

    onnx_path = tmp_path / "net.onnx"
    subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(net)!r})
        from net import Net
        torch.onnx.export(Net().eval(), (torch.rand(1, 3, 16, 16),), {str(onnx_path)!r}, dynamo=False,
                          input_names=["pixels"], output_names=["probs"], dynamic_axes={{"pixels": {{0: "n"}}}})
    """)], check=True, capture_output=True)
    import onnx

    head = next(n.name for n in onnx.load(str(onnx_path)).graph.node if n.op_type == "Gemm")
    held = np.load(net / "held.npz")
    np.savez(tmp_path / "eval.npz", x=held["x"])
    result = edgekit_cli("package", onnx_path, "-c", net / "calibration.npy", "--eval", tmp_path / "eval.npz",
                         "--format", "executorch", "--keep-float", head, "--no-also-float", "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "net.edgekit"
    manifest = json.loads((package / "manifest.json").read_text())
    record = manifest["validation"]["artifacts"]["executorch"]
    assert record["verdict"] == "passed"
    # no float fallback asked for: no float program lowered, the exported one (run by PyTorch) is the
    # conversion's float reference
    conversion = record["float_conversion"]
    assert "not lowered" in conversion["evaluated"] and conversion["sqnr_db"] > 60
    (artifact,) = manifest["artifacts"]
    assert "ONNX -> PyTorch" in artifact["converter"]["tool"]
    assert artifact["details"]["placement"]["layers"][head] == "float"  # by its ONNX name, as lowered
    with edgekit.load(package, artifact="executorch") as loaded:
        assert loaded.input_names == ["pixels"] and loaded.output_names == ["probs"]
        produced = loaded.predict(held["x"])
    assert (produced.argmax(1) == held["y"].argmax(1)).mean() >= 0.9


def test_token_ids_shifted_by_a_constant_stay_integers_through_the_quantizer(tmp_path):
    """ExecuTorch's XNNPACK quantizer turned the scalar of ``ids + 1`` into a float tensor constant:
    the ids reached the embedding as floats and calibration failed ("Expected tensor for argument
    #1 'indices' to have one of the following scalar types: Long, Int")."""

    code = f"""
        import numpy as np, torch
        class Tokens(torch.nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.embed = torch.nn.Embedding(40, 8)
                self.head = torch.nn.Linear(8, 3)
            def forward(self, ids):
                return self.head(self.embed(ids + 1).mean(1))
        ids = np.random.default_rng(0).integers(0, 39, (32, 6)).astype(np.int64)
        batch = torch.export.Dim("batch", min=1, max=1024)
        program = torch.export.export(Tokens().eval(), (torch.from_numpy(ids[:2]),), dynamic_shapes=({{0: batch}},))
        torch.export.save(program, {str(tmp_path / "tokens.pt2")!r})
        np.save({str(tmp_path / "ids.npy")!r}, ids)
        with torch.no_grad():
            np.save({str(tmp_path / "expected.npy")!r}, Tokens().eval()(torch.from_numpy(ids)).numpy())
    """
    exec_here(code, ROOT)  # the program built in this process: torch is imported here already
    worker.convert(convert_executorch, ExecuTorchRequest(
        model=_program(tmp_path / "tokens.pt2"), calibration_npy=str(tmp_path / "ids.npy"),
        output=str(tmp_path / "tokens.pte"), output_names=("scores",)), what="ExecuTorch conversion")
    backend = ExecuTorchBackend(str(tmp_path / "tokens.pte"))
    assert backend.inputs[0].dtype == np.int64
    produced = backend.run(np.load(tmp_path / "ids.npy"))[0]
    assert np.abs(produced - np.load(tmp_path / "expected.npy")).max() < 0.1


def test_data_movement_and_attention_operands_are_not_float_layers_or_weights(tmp_path):
    """An NHWC input transposed and padded before its first quantize (as a graph converted from
    TensorFlow starts) made the label "int8+float (2 layers)" for a fully int8 program, and an
    attention's ``q @ k`` counted its activation operand as float weight bytes. Data movement is
    neither int8 nor float (as on ONNX), and only the program's constants are weights."""

    code = f"""
        import numpy as np, torch
        class Layout(torch.nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.conv = torch.nn.Conv2d(3, 8, 3)
                self.q, self.k, self.head = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
            def forward(self, x):
                x = torch.nn.functional.pad(x.permute(0, 3, 1, 2), (0, 1, 0, 1))
                tokens = torch.relu(self.conv(x)).flatten(2).transpose(1, 2)
                scores = torch.softmax(self.q(tokens) @ self.k(tokens).transpose(1, 2), dim=-1)
                return torch.softmax(self.head((scores @ tokens).mean(1)), dim=-1)
        x = np.random.default_rng(0).random((32, 8, 8, 3), dtype=np.float32)
        program = torch.export.export(Layout().eval(), (torch.from_numpy(x[:1]),))
        torch.export.save(program, {str(tmp_path / "layout.pt2")!r})
        np.save({str(tmp_path / "x.npy")!r}, x)
    """
    exec_here(code, ROOT)  # the program built in this process: torch is imported here already
    info = worker.convert(convert_executorch, ExecuTorchRequest(
        model=_program(tmp_path / "layout.pt2"), calibration_npy=str(tmp_path / "x.npy"),
        output=str(tmp_path / "layout.pte"), output_names=("scores",)), what="ExecuTorch conversion")
    record = info.precision.record
    moved = {"permute", "permute_copy", "constant_pad_nd", "transpose", "view_copy", "clone"}
    assert not moved & set(record["float_layers"]), record
    weights = 8 * 3 * 3 * 3 + 8 * 8 * 2 + 4 * 8  # conv, q, k, head as int8 (their int32 biases are not counted)
    assert record["weight_bytes"] == {"integer": weights, "float": 0}, record


PATTERN_CHECK = '''
import torch
from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from edgekit.formats.executorch.lowering import pattern_passes_only_where_they_can_match


class Net(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.conv, self.how = torch.nn.Conv2d(4, 4, 3, padding=1), how

    def forward(self, x):
        y = self.conv(x)
        if self.how == "bilinear":
            return torch.nn.functional.interpolate(y, scale_factor=2, mode="bilinear")
        if self.how == "attention":
            q = y.flatten(2).transpose(1, 2)
            return torch.softmax(q @ q.transpose(1, 2), dim=-1) @ q
        return y


def lowered(how):
    program = torch.export.export(Net(how).eval(), (torch.rand(1, 4, 8, 8),))
    graph = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).exported_program().graph_module
    return [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]


def built():
    return bilinear_2d._get_bilinear_2d_graphs.cache_info().currsize, sdpa.get_graphs.cache_info().currsize


pattern_passes_only_where_they_can_match()
lowered("conv")
print("patterns built for a convolution:", built())
upsampled = lowered("bilinear")
print("patterns built with upsampling:", built())
print("left outside XNNPACK:", [t for t in upsampled if "delegate" not in t and "getitem" not in t])
lowered("attention")
print("patterns built with a matrix product of activations:", built())
'''


def test_xnnpacks_pattern_passes_build_their_patterns_only_for_a_graph_that_can_match_them():
    """The passes matching bilinear upsampling and attention export and lower pattern programs
    first (~2.7 s and ~1.8 s of every lowering process); a graph without the op every pattern holds
    skips them, one with it is matched and delegated as before (nothing left outside XNNPACK)."""
    done = subprocess.run([sys.executable, "-c", PATTERN_CHECK], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "patterns built for a convolution: (0, 0)" in done.stdout, done.stdout
    assert "patterns built with upsampling: (1, 0)" in done.stdout and "left outside XNNPACK: []" in done.stdout, \
        done.stdout
    assert "patterns built with a matrix product of activations: (1, 1)" in done.stdout, done.stdout
