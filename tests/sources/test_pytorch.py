"""PyTorch sources: a factory file, a torch.export program and a TorchScript file become TFLite,
ONNX and CoreML artifacts validated against the PyTorch model itself, and run on the device path;
ONNX files exported from the same models reach TFLite and CoreML too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import ROOT, assert_user_error, built_once, device_matches, edgekit_cli

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

COLOURS = [[0.9, 0.1, 0.1], [0.1, 0.8, 0.2], [0.2, 0.2, 0.9], [0.9, 0.9, 0.1], [0.5, 0.5, 0.5]]

MODELS = '''
from pathlib import Path

import torch
from torch import nn


class ResidualCNN(nn.Module):
    """Conv + BatchNorm + a residual block, class probabilities out."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 5)

    def forward(self, image):
        x = self.stem(image)
        x = x + self.block(x)
        return torch.softmax(self.head(x.mean(dim=(2, 3))), dim=1)


class TwoHeads(nn.Module):
    """One input, two outputs: class scores and a regression value."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.kind = nn.Linear(8, 4)
        self.age = nn.Linear(8, 1)

    def forward(self, photo):
        f = self.features(photo)
        return torch.softmax(self.kind(f), dim=1), self.age(f)


class ViewNet(nn.Module):
    """Flattens with x.view(x.shape[0], -1): shape arithmetic in the TorchScript trace."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=4, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, image):
        x = torch.relu(self.conv(image))
        return torch.softmax(self.fc(x.view(x.shape[0], -1)), dim=1)


class GainNet(nn.Module):
    """A classifier with a second, scalar input (a temperature-like gain), as audio models take a sample rate."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=4, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, image, gain):
        x = torch.relu(self.conv(image)).flatten(1)
        return torch.softmax(self.fc(x) * gain, dim=1)


class ScaledNet(nn.Module):
    """A TorchScript signature with a Python int argument beside the image."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=4, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, image, scale: int):
        return self.fc(torch.relu(self.conv(image)).flatten(1)) * float(scale)


class KeywordSpotter(nn.Module):
    """An audio front end: reflect padding (MirrorPad), 1-D convolutions over time, a softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 8, 9, stride=4)
        self.conv2 = nn.Conv1d(8, 16, 5, stride=2)
        self.fc = nn.Linear(16, 4)

    def forward(self, audio):
        x = nn.functional.pad(audio, (4, 4), mode="reflect")
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return torch.softmax(self.fc(x.mean(dim=2)), dim=1)


class Sine(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)


def sine_net():
    """A sine activation: outside the MIL evaluator's ops, so CoreML activations stay float16 on Linux."""
    torch.manual_seed(0)
    return _trained("sine_net", nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), Sine(), nn.AdaptiveAvgPool2d(1),
                                              nn.Flatten(), nn.Linear(8, 5), nn.Softmax(dim=1)).eval(), lambda out: out)


def keyword_spotter():
    torch.manual_seed(0)
    return KeywordSpotter().eval()


# photos are one of five colours plus texture; the class is the colour
COLOURS = torch.tensor(__COLOURS__)


def photos(n, seed):
    g = torch.Generator().manual_seed(seed)
    classes = torch.randint(0, 5, (n,), generator=g)
    x = COLOURS[classes][:, :, None, None] + 0.1 * torch.randn(n, 3, 16, 16, generator=g)
    return x, classes


def _trained(name, model, scores, classes=5, forward=None):
    """A few seconds of Adam on the colour task: a trained model's class margins, not the near-ties of
    random weights (whose decisions INT8 rightly changes). Trained once, when the nets are built;
    later calls load the weights saved then, as a user's factory loads its checkpoint."""
    stored = Path(__file__).with_name("weights") / f"{name}.pt"
    if stored.is_file():
        model.load_state_dict(torch.load(stored, weights_only=True))
        return model.eval()
    forward = forward or model
    x, y = photos(256, 0)
    y = y % classes
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    with torch.enable_grad():  # callers may build the model under no_grad
        for _ in range(120):
            optimizer.zero_grad()
            loss = nn.functional.nll_loss(torch.log(scores(forward(x)) + 1e-9), y)
            loss.backward()
            optimizer.step()
    stored.parent.mkdir(exist_ok=True)
    torch.save(model.state_dict(), stored)
    return model.eval()


def residual_cnn():
    torch.manual_seed(0)
    model = ResidualCNN()
    with torch.no_grad():  # BatchNorm statistics as after training, not the identity defaults
        for bn in (model.stem[1], model.block[1]):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 2.0)
    return _trained("residual_cnn", model.eval(), lambda out: out)


def view_net():
    torch.manual_seed(0)
    return _trained("view_net", ViewNet().eval(), lambda out: out)


def gain_net():
    torch.manual_seed(3)
    model = GainNet().eval()
    return _trained("gain_net", model, lambda out: out, forward=lambda x: model(x, torch.tensor(1.0)))


def scaled_net():
    torch.manual_seed(4)
    model = ScaledNet().eval()
    return _trained("scaled_net", model, lambda out: torch.softmax(out, 1), forward=lambda x: model(x, 1))


def two_heads():
    torch.manual_seed(1)
    return _trained("two_heads", TwoHeads().eval(), lambda out: out[0], classes=4)
'''.replace("__COLOURS__", repr(COLOURS))


# the outputs tests compare the artifacts with, computed by PyTorch once when the nets are built:
# (factory, the data file its inputs come from, the array in that file)
REFERENCE_OUTPUTS = (("residual_cnn", "images.npy", None), ("view_net", "images.npy", None),
                     ("two_heads", "photos.npz", "photo"), ("keyword_spotter", "waves.npy", None))


def build_nets(root):
    """The nets' sources, exports and data in ``root``, and PyTorch's outputs on that data."""
    (root / "nets.py").write_text(MODELS)
    rng = np.random.default_rng(0)

    def photos(n):  # one of the five colours per image plus texture, as the models were trained on
        colours = np.asarray(COLOURS, np.float32)[rng.integers(0, 5, n)]
        return (colours[:, :, None, None] + rng.normal(0, 0.1, (n, 3, 16, 16))).astype(np.float32)

    # 200 samples: 100 held out, as many as the default 99% gate needs to decide a pass
    np.save(root / "images.npy", photos(200))
    np.savez(root / "photos.npz", photo=photos(200))
    np.save(root / "waves.npy", rng.normal(0, 0.3, (200, 1, 400)).astype(np.float32))
    code = f"""
        import sys, numpy as np, torch
        sys.path.insert(0, {str(root)!r})
        import nets
        nets.sine_net()  # trained once here: every factory later loads the weights saved now
        model, x = nets.residual_cnn(), torch.rand(2, 3, 16, 16)
        batch = torch.export.Dim("batch", min=1, max=1024)
        program = torch.export.export(model, (x,), dynamic_shapes={{"image": {{0: batch}}}})
        torch.export.save(program, {str(root / "residual.pt2")!r})
        # the default export: no dynamic_shapes, so the batch is fixed at 1
        torch.export.save(torch.export.export(nets.view_net(), (torch.zeros(1, 3, 16, 16),)),
                          {str(root / "static.pt2")!r})
        torch.jit.save(torch.jit.trace(model, x), {str(root / "residual_ts.pt")!r})
        torch.jit.save(torch.jit.script(nets.scaled_net()), {str(root / "scaled_ts.pt")!r})
        torch.export.save(torch.export.export(nets.gain_net(), (torch.zeros(1, 3, 16, 16), torch.tensor(1.0))),
                          {str(root / "gain.pt2")!r})
        # ONNX files as a user exports them: the TorchScript exporter, and the dynamo exporter
        torch.onnx.export(model, (x,), {str(root / "residual.onnx")!r}, dynamo=False, opset_version=17,
                          input_names=["image"], output_names=["probs"], dynamic_axes={{"image": {{0: "n"}}}})
        torch.onnx.export(nets.two_heads(), (x,), {str(root / "heads.onnx")!r}, dynamo=True,
                          input_names=["photo"], output_names=["kind", "age"],
                          dynamic_shapes=({{0: batch}},))
        with torch.no_grad():
            for factory, data, key in {REFERENCE_OUTPUTS!r}:
                x = np.load({str(root)!r} + "/" + data)
                out = getattr(nets, factory)()(torch.from_numpy(x if key is None else x[key]))
                out = out if isinstance(out, tuple) else (out,)
                np.savez({str(root)!r} + f"/{{factory}}.outputs.npz", *[o.numpy() for o in out])
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, cwd=ROOT)
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The nets built once per test run (both workers), copied: the tests package into ``out/``."""
    root = tmp_path_factory.mktemp("pytorch")
    shutil.copytree(built_once(tmp_path_factory, "pytorch-nets", build_nets), root, dirs_exist_ok=True)
    return root


def torch_outputs(models, factory, x):
    """The PyTorch model's own outputs: from those computed when the nets were built when ``x``
    is the first rows of that data, else computed in a child (torch stays out of this process)."""
    for name, data, key in REFERENCE_OUTPUTS:
        if name != factory:
            continue
        if key is None:
            inputs = np.load(models / data)
        else:
            with np.load(models / data) as stored:
                inputs = stored[key]
        if np.array_equal(inputs[: len(x)], x):
            with np.load(models / f"{factory}.outputs.npz") as stored:
                return [stored[f"arr_{i}"][: len(x)] for i in range(len(stored.files))]
    np.save(models / "probe.npy", x)
    code = f"""
        import sys, numpy as np, torch
        sys.path.insert(0, {str(models)!r})
        import nets
        with torch.no_grad():
            out = nets.{factory}()(torch.from_numpy(np.load({str(models / "probe.npy")!r})))
        out = out if isinstance(out, tuple) else (out,)
        np.savez({str(models / "probe_out.npz")!r}, *[o.numpy() for o in out])
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)
    with np.load(models / "probe_out.npz") as stored:
        return [stored[f"arr_{i}"] for i in range(len(stored.files))]


def device_runs_like_pytorch(models, package_dir, factory="residual_cnn"):
    """``python -m edgekit.run`` on the TFLite and ONNX artifacts, NCHW arrays as the PyTorch model
    takes them, gives the PyTorch model's own outputs (the residual CNN's unless ``factory``)."""
    x = np.load(models / "images.npy")[:4]
    device_matches(package_dir, x, torch_outputs(models, factory, x)[0], 0.05, models)


def package(models, model, data, *extra, also_float=False):
    """Without float fallbacks unless asked (they cost a conversion per format; tests/bench/test_tune.py
    and the factory test below cover them)."""
    flag = "--also-float" if also_float else "--no-also-float"
    result = edgekit_cli("package", model, "-c", models / data, "-o", models / "out", "--force", flag, *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_a_factory_file_packages_onnx_and_coreml_validated_against_pytorch(models):
    result = package(models, f"{models / 'nets.py'}:residual_cnn", "images.npy", "--format", "tflite", "--format",
                     "onnx", "--format", "coreml", also_float=True)  # ExecuTorch from a factory: test_executorch.py
    # a source that runs code says so before it loads (a .pt2 does not: test_export_programs_...)
    assert "runs that file's Python code" in result.stderr and "Security model" in result.stderr
    manifest = json.loads((models / "out" / "nets.edgekit" / "manifest.json").read_text())
    assert manifest["source"]["format"] == "torch_factory"
    assert "torch.onnx.export" in manifest["source"]["onnx_exporter"]
    assert manifest["validation"]["passed"] is True
    tflite = next(a for a in manifest["artifacts"] if a["format"] == "tflite")
    assert "litert_torch" in tflite["converter"]["tool"] and tflite["io"]["inputs"][0]["dtype"] == "int8"
    # PT2E leaves ops in float (the residual adds, the softmax): LiteRT Quantizer's build, with fewer
    # float ops and within the floor, ships; whatever stays float is named and counted in the label
    assert "CONV_2D" not in {op["op"] for op in tflite["float_ops"]}
    assert (tflite["precision"] == "int8") == (not tflite["float_ops"])
    for fmt in ("tflite", "onnx", "coreml"):
        record = manifest["validation"]["artifacts"][fmt]
        assert record["measured"] and record["passed"] and record["sqnr_db"] >= 20, (fmt, record)
    assert manifest["inputs"][0]["name"] == "image" and manifest["inputs"][0]["shape"][1:] == [3, 16, 16]
    assert "│ coreml" in result.stdout and "│ onnx" in result.stdout and "│ tflite" in result.stdout
    for fallback in ("tflite-float32", "onnx-float32", "coreml-float16"):  # the ONNX export keeps its weights in
        assert manifest["validation"]["artifacts"][fallback]["passed"], fallback  # a .onnx.data file: embedded
    device_runs_like_pytorch(models, models / "out" / "nets.edgekit")


def test_keep_float_and_explain_work_on_the_onnx_route_and_are_refused_on_coremls(models):
    """A PyTorch source reaches ONNX through its own export, where --explain and --keep-float act
    on the graph (TFLite's litert-torch route honours --keep-float through LiteRT Quantizer:
    tests/formats/test_tflite_quantizer.py); CoreML has no per-layer control: the option is
    refused before the model loads, naming the routes that honour it."""
    model = f"{models / 'nets.py'}:residual_cnn"
    refused = edgekit_cli("package", model, "-c", models / "images.npy", "-o", models / "kf", "--format", "all",
                          "--keep-float", "anything")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "--keep-float is not honoured by the route torch_factory -> torch-module -> coreml" in refused.stderr
    assert "torch_factory -> onnx-graph -> onnx" in refused.stderr and "Loading" not in refused.stdout
    package(models, model, "images.npy", "--format", "onnx", "--explain", "--profile", "rpi5")  # S8S8 only
    explained = json.loads((models / "out" / "nets.edgekit" / "manifest.json").read_text())
    worst, op = next((row["layer"], row["op"]) for row in explained["artifacts"][0]["details"]["explain"]
                     if row["op"] in ("Conv", "Gemm", "MatMul"))  # worst first: the worst layer with weights
    package(models, model, "images.npy", "--format", "onnx", "--keep-float", worst, "--profile", "rpi5")
    onnx = json.loads((models / "out" / "nets.edgekit" / "manifest.json").read_text())["artifacts"][0]
    assert onnx["details"]["keep_float"] == [worst] and onnx["precision"].startswith("int8+float (")
    assert [(kept["layer"], kept["op"]) for kept in onnx["float_ops"]] == [(worst, op)]  # named as --explain names it
    # the user's plan by PyTorch module reaches the ONNX export's nodes of that module (it was refused:
    # "no ONNX nodes belong to layer(s) block")
    package(models, model, "images.npy", "--format", "onnx", "--keep-float", "block", "--profile", "rpi5")
    onnx = json.loads((models / "out" / "nets.edgekit" / "manifest.json").read_text())["artifacts"][0]
    assert onnx["details"]["keep_float"] == ["block"], onnx["details"]
    assert sorted(kept["op"] for kept in onnx["float_ops"]) == ["Conv", "Relu"]  # block's conv (its BN folded), relu


# the TorchScript file is the route matrix's torchscript row (tests/routing/route_matrix.py); a .pt2
# reaches every format in the ViT's row, so its dynamic batch is checked here on TFLite and ONNX
@pytest.mark.parametrize("file, formats", [("residual.pt2", ["tflite", "onnx"]), ("residual_ts.pt", ["all"])])
def test_export_programs_and_torchscript_files_package_with_a_dynamic_batch(models, file, formats):
    result = package(models, models / file, "images.npy", *[a for f in formats for a in ("--format", f)],
                     "--name", "residual", "--allow-float-ops")
    if file.endswith(".pt2"):  # a .pt2 loads tensors only (weights-only unpickling): no code-running notice
        assert "Security model" not in result.stderr
    manifest = json.loads((models / "out" / "residual.edgekit" / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"][0] == -1  # the batch stays dynamic
    built = list(dict.fromkeys(a["format"] for a in manifest["artifacts"]))  # ONNX: one artifact per INT8 scheme
    # TorchScript -> TFLite and ExecuTorch: once a SpecViolationError (torch.export cannot trace a
    # ScriptModule); now through the model's ONNX export and the rebuild
    assert built == (["tflite", "onnx", "coreml", "executorch"] if formats == ["all"] else formats)
    for fmt in built:
        assert manifest["validation"]["artifacts"][fmt]["passed"], fmt
    import edgekit

    x = np.load(models / "images.npy")[:7]
    expected = torch_outputs(models, "residual_cnn", x)[0]
    for fmt in (f for f in built if f != "coreml"):  # CoreML runs on macOS; the MIL evaluator measured it
        with edgekit.load(models / "out" / "residual.edgekit", artifact=fmt) as model:
            got = model.predict(x)
        assert got.shape == (7, 5) and np.abs(got - expected).max() < 0.05, fmt


def test_two_outputs_keep_their_names_and_order_in_every_format(models):
    package(models, f"{models / 'nets.py'}:two_heads", "photos.npz", "--format", "all", "--allow-float-ops")
    manifest = json.loads((models / "out" / "nets.edgekit" / "manifest.json").read_text())
    assert [o["name"] for o in manifest["outputs"]] == ["output_0", "output_1"]
    for fmt in ("tflite", "onnx", "coreml"):
        record = manifest["validation"]["artifacts"][fmt]
        assert record["passed"] and set(record["outputs"]) == {"output_0", "output_1"}, (fmt, record)
    coreml = next(a for a in manifest["artifacts"] if a["format"] == "coreml")
    assert [o["name"] for o in coreml["io"]["outputs"]] == ["output_0", "output_1"]
    import edgekit

    x = np.load(models / "photos.npz")["photo"][:5]
    kind, age = torch_outputs(models, "two_heads", x)
    for artifact in ("tflite", "onnx"):
        with edgekit.load(models / "out" / "nets.edgekit", artifact=artifact) as model:
            got = model.predict({"photo": x})
        assert got["output_0"].shape == (5, 4) and got["output_1"].shape == (5, 1)
        assert np.abs(got["output_0"] - kind).max() < 0.05 and np.abs(got["output_1"] - age).max() < 0.1


def test_a_torchscript_model_without_a_known_input_shape_asks_for_one(models, tmp_path):
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(np.full((16, 16, 3), i * 40, np.uint8)).save(folder / f"{i}.png")
    result = edgekit_cli("package", models / "residual_ts.pt", "-c", folder, "-o", tmp_path / "out")
    assert_user_error(result, "input 'image' has no known shape", "--input-shape image=")
    missing = edgekit_cli("package", f"{tmp_path}/absent.py:factory", "-c", models / "images.npy", "-o", tmp_path)
    assert_user_error(missing, "absent.py does not exist")


def test_an_onnx_export_packages_for_tflite_onnx_and_coreml(models):
    """An ONNX file from torch.onnx.export is a source for TFLite, ONNX and CoreML, validated
    against ONNX Runtime on that file, with the float conversion of each converted format measured
    on its own. (ExecuTorch from an ONNX file: the route matrix's ONNX row and the rebuild's tests.)"""
    result = package(models, models / "residual.onnx", "images.npy", "--format", "tflite", "--format", "onnx",
                     "--format", "coreml", "--allow-float-ops")
    manifest = json.loads((models / "out" / "residual.edgekit" / "manifest.json").read_text())
    assert manifest["source"]["format"] == "onnx"
    assert list(dict.fromkeys(a["format"] for a in manifest["artifacts"])) == ["tflite", "onnx", "coreml"]
    for fmt in ("tflite", "onnx", "coreml"):
        record = manifest["validation"]["artifacts"][fmt]
        assert record["measured"] and record["passed"] and record["sqnr_db"] >= 20, (fmt, record)
    for fmt in ("tflite", "coreml"):  # the ONNX artifact quantizes the source itself: nothing converted
        assert manifest["validation"]["artifacts"][fmt]["float_conversion"]["sqnr_db"] > 40
    assert "float conversion vs the source" in result.stdout
    device_runs_like_pytorch(models, models / "out" / "residual.edgekit")


def test_an_onnx_export_with_two_outputs_keeps_them_apart_in_tflite(models):
    package(models, models / "heads.onnx", "photos.npz", "--format", "tflite", "--allow-float-ops")
    manifest = json.loads((models / "out" / "heads.edgekit" / "manifest.json").read_text())
    assert [o["name"] for o in manifest["outputs"]] == ["kind", "age"]
    assert manifest["validation"]["artifacts"]["tflite"]["passed"]
    import edgekit

    x = np.load(models / "photos.npz")["photo"][:5]
    kind, age = torch_outputs(models, "two_heads", x)
    with edgekit.load(models / "out" / "heads.edgekit", artifact="tflite") as model:
        got = model.predict({"photo": x})
    assert np.abs(got["kind"] - kind).max() < 0.05 and np.abs(got["age"] - age).max() < 0.1


def test_a_pt2_with_a_pickled_payload_is_refused_without_running_it(models, tmp_path):
    """A .pt2 whose sample-inputs member was replaced by a pickle calling os.system once ran it
    during `edgekit package` (torch.export.load falls back to the full unpickler)."""
    import zipfile

    marker = tmp_path / "pwned"
    payload = tmp_path / "payload.pt"
    code = f"""
        import os, torch
        class Payload:
            def __reduce__(self):
                return (os.system, ({f"touch {marker}"!r},))
        torch.save(Payload(), {str(payload)!r})
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, cwd=ROOT)
    hostile = tmp_path / "hostile.pt2"
    with zipfile.ZipFile(models / "residual.pt2") as original, zipfile.ZipFile(hostile, "w") as out:
        for item in original.infolist():
            data = payload.read_bytes() if item.filename.endswith("sample_inputs/model.pt") else original.read(item)
            out.writestr(item, data)
    result = edgekit_cli("package", hostile, "-c", models / "images.npy", "-o", tmp_path / "out")
    assert_user_error(result, "pickled Python objects", "could run code")
    assert not marker.exists()


def test_a_default_static_batch_pt2_packages_for_every_format_without_flags(models):
    """`torch.export.export(model, (torch.zeros(1, ...),))` fixes the batch at 1; it once failed
    with `AssertionError: Guard failed: x.size()[0] == 1`, and its trailing softmax (left in float
    by litert-torch) cost the TFLite artifact unless --allow-float-ops was given."""
    result = package(models, models / "static.pt2", "images.npy", "--format", "all", "--name", "static")
    manifest = json.loads((models / "out" / "static.edgekit" / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, 3, 16, 16]  # the program's batch, kept
    by_format = {a["format"]: a for a in manifest["artifacts"]}
    assert set(by_format) == {"tflite", "onnx", "coreml", "executorch"}
    for fmt in by_format:
        assert manifest["validation"]["artifacts"][fmt]["passed"], fmt
    tflite = by_format["tflite"]
    assert tflite["precision"] == "int8+float tail" and [op["op"] for op in tflite["float_ops"]] == ["SOFTMAX"]
    counts = tflite["details"]["precision"]
    assert counts["ops"]["float"] == counts["ops"]["float_tail"] == 1 and counts["integer_weight_fraction"] == 1.0
    assert "output tail in float after the last INT8 op: SOFTMAX" in result.stdout
    device_runs_like_pytorch(models, models / "out" / "static.edgekit", "view_net")  # 4 samples in slices of 1


def test_shape_arithmetic_in_forward_reaches_coreml(models):
    """`x.view(x.shape[0], -1)` once failed the CoreML route (`TypeError: only 0-dimensional arrays
    can be converted to Python scalars` from the TorchScript trace); torch.export at batch 1 folds it."""
    package(models, f"{models / 'nets.py'}:view_net", "images.npy", "--format", "coreml", "--name", "viewnet")
    manifest = json.loads((models / "out" / "viewnet.edgekit" / "manifest.json").read_text())
    assert manifest["validation"]["artifacts"]["coreml"]["passed"]
    assert [o["name"] for o in manifest["outputs"]] == ["output"] and manifest["inputs"][0]["name"] == "image"


def test_an_audio_front_end_reaches_every_format_and_runs_like_pytorch(models):
    """Reflect padding (MirrorPad) and 1-D convolutions: every format builds, CoreML's numbers are
    measured on Linux (the MIL evaluator once knew only 2-D convolutions: "not measurable"), and the
    device runs the TFLite and ONNX artifacts like the PyTorch model."""
    package(models, f"{models / 'nets.py'}:keyword_spotter", "waves.npy", "--format", "all", "--name", "kws",
            "--allow-accuracy-drop")  # random weights: the verdict is not the point here, the route is
    manifest = json.loads((models / "out" / "kws.edgekit" / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"]} == {"tflite", "onnx", "coreml", "executorch"}
    coreml = manifest["validation"]["artifacts"]["coreml"]
    assert coreml["measured"] and "MIL evaluator" in coreml["measured_by"]
    x = np.load(models / "waves.npy")[:6]
    device_matches(models / "out" / "kws.edgekit", x, torch_outputs(models, "keyword_spotter", x)[0], 0.05, models)


def test_coreml_weights_only_int8_is_said_with_its_reason(models):
    """When activations cannot be calibrated on Linux the artifact is weights-only INT8: the reason
    was only in the manifest."""
    result = edgekit_cli("package", f"{models / 'nets.py'}:sine_net", "-c", models / "images.npy", "--format",
                         "coreml", "--name", "sine", "-o", models / "out", "--force", "--no-also-float")
    assert result.returncode == 5, result.stderr[-3000:]  # its only INT8 artifact is built, unverified
    assert "coreml: built, unverified" in result.stderr
    manifest = json.loads((models / "out" / "sine.edgekit" / "manifest.json").read_text())
    details = manifest["artifacts"][0]["details"]
    assert details["activations"] == "float16"
    assert f"note: coreml: {details['activations_reason']}" in result.stdout


def outputs_with(models, call, x):
    """``call`` (Python code using ``nets``, ``torch`` and the tensor ``x``) run in a child on ``x``."""
    np.save(models / "probe.npy", x)
    code = f"""
        import sys, numpy as np, torch
        sys.path.insert(0, {str(models)!r})
        import nets
        x = torch.from_numpy(np.load({str(models / "probe.npy")!r}))
        with torch.no_grad():
            np.save({str(models / "probe_out.npy")!r}, ({call}).numpy())
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)
    return np.load(models / "probe_out.npy")


# the factory to every format; the program (a pt2 reaches every format in the tests above) to ExecuTorch,
# whose direct route once failed on it, and ONNX, run on the device
@pytest.mark.parametrize("source, formats", [("factory", ("tflite", "onnx", "coreml", "executorch")),
                                             ("pt2", ("onnx", "executorch"))])
def test_a_scalar_tensor_input_fixed_with_input_name_value_reaches_every_format(models, source, formats):
    """forward(image, gain) with a 0-d gain, as a factory and as a default (batch 1) export program:
    ``--input gain=0.5`` folds it into every artifact (the float reference is the PyTorch model
    called with it), and each artifact runs on the device like ``model(x, torch.tensor(0.5))``."""
    model = f"{models / 'nets.py'}:gain_net" if source == "factory" else models / "gain.pt2"
    result = package(models, model, "images.npy", *[a for f in formats for a in ("--format", f)], "--name", "gain",
                     "--force", "--input", "gain=0.5")
    manifest = json.loads((models / "out" / "gain.edgekit" / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["image"]
    assert manifest["source"]["fixed_inputs"] == {"gain": {"value": 0.5}}
    assert {a["format"] for a in manifest["artifacts"]} == set(formats), result.stderr
    # the fixed value is a constant in the program: ExecuTorch's direct route lowers it (a 0-d ``full``
    # op failed XNNPACK's layout pass and sent the build through the ONNX rebuild)
    assert "the route" not in result.stderr, result.stderr[-2000:]
    x = np.load(models / "images.npy")[:4]
    expected = outputs_with(models, "nets.gain_net()(x, torch.tensor(0.5))", x)
    assert not np.allclose(expected, outputs_with(models, "nets.gain_net()(x, torch.tensor(1.0))", x), atol=1e-3)
    device_matches(models / "out" / "gain.edgekit", x, expected, 0.05, models,
                   artifacts=tuple(f for f in ("tflite", "onnx") if f in formats))


def test_a_torchscript_int_argument_fixed_with_input_name_value(models):
    """A scripted forward(image, scale: int): the value is passed as a Python int, as its schema says."""
    package(models, models / "scaled_ts.pt", "images.npy", "--format", "onnx", "--format", "tflite",
            "--name", "scaled", "--input", "scale=3", "--input-shape", "image=2x3x16x16")
    manifest = json.loads((models / "out" / "scaled.edgekit" / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["image"]
    x = np.load(models / "images.npy")[:4]
    expected = outputs_with(models, "nets.scaled_net()(x, 3)", x)
    device_matches(models / "out" / "scaled.edgekit", x, expected, 0.05 * np.abs(expected).max(), models)
