"""Packaging models with several inputs and outputs, integer (token) inputs and 1-D audio inputs.

Models are built here in seconds (Keras, in a child process). Each is packaged for TFLite and
ONNX, loaded with ``edgekit.load``, run through ``python -m edgekit.run``, the server's dataplane
and ``--bench``; every output must match the raw runtime on the same artifact.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

import edgekit
from tests.conftest import assert_user_error, device_cli, edgekit_cli, run_tf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("named")
    run_tf(f"""
        import keras, numpy as np
        keras.utils.set_random_seed(0)
        root = {str(root)!r}
        # two inputs (an image and a metadata vector), three heads
        image = keras.Input((8, 8, 1), name="image")
        meta = keras.Input((4,), name="meta")
        x = keras.layers.Conv2D(8, 3, activation="relu")(image)
        x = keras.layers.GlobalAveragePooling2D()(x)
        x = keras.layers.Concatenate()([x, keras.layers.Dense(8, activation="relu")(meta)])
        heads = {{"boxes": keras.layers.Dense(4, name="boxes")(x),
                  "scores": keras.layers.Dense(10, activation="softmax", name="scores")(x),
                  "presence": keras.layers.Dense(1, activation="sigmoid", name="presence")(x)}}
        keras.Model({{"image": image, "meta": meta}}, heads).save(root + "/multi.keras")
        # token ids in, class scores out
        tokens = keras.Input((12,), dtype="int32", name="tokens")
        t = keras.layers.Embedding(50, 8)(tokens)
        t = keras.layers.GlobalAveragePooling1D()(t)
        keras.Model(tokens, keras.layers.Dense(3, activation="softmax")(t)).save(root + "/tokens.keras")
        # 1-D audio in
        audio = keras.Input((256,), name="audio")
        a = keras.layers.Reshape((256, 1))(audio)
        a = keras.layers.Conv1D(8, 9, strides=4, activation="relu")(a)
        a = keras.layers.GlobalAveragePooling1D()(a)
        keras.Model(audio, keras.layers.Dense(4)(a)).save(root + "/audio.keras")
        # a detector head: box coordinates (0..300) and class scores concatenated into one output
        image = keras.Input((16, 16, 3), name="image")
        d = keras.layers.Conv2D(8, 3, activation="relu")(image)
        d = keras.layers.GlobalAveragePooling2D()(d)
        boxes = keras.layers.Rescaling(300.0)(keras.layers.Dense(4, activation="sigmoid")(d))
        scores = keras.layers.Dense(3, activation="softmax")(d)
        detections = keras.layers.Concatenate(name="detections")([boxes, scores])
        keras.Model(image, detections).save(root + "/detector.keras")
        # one input, two heads of different kinds (a class and a regression value)
        photo = keras.Input((16, 16, 3), name="photo")
        h = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, activation="relu")(photo))
        keras.Model(photo, {{"kind": keras.layers.Dense(5, activation="softmax", name="kind")(h),
                             "age": keras.layers.Dense(1, name="age")(h)}}).save(root + "/heads.keras")
    """)
    rng = np.random.default_rng(0)
    np.savez(root / "multi.npz", image=rng.uniform(0, 1, (120, 8, 8, 1)).astype(np.float32),
             meta=rng.normal(size=(120, 4)).astype(np.float32))
    np.savez(root / "tokens.npz", tokens=rng.integers(0, 50, (120, 12)).astype(np.int32))
    t = np.linspace(0, 1, 256, dtype=np.float32)
    audio = np.stack([np.sin(2 * np.pi * rng.uniform(5, 40) * t) * rng.uniform(0.1, 1) for _ in range(120)])
    np.savez(root / "audio.npz", audio=audio.astype(np.float32))
    np.savez(root / "detector.npz", image=rng.uniform(0, 1, (120, 16, 16, 3)).astype(np.float32))
    np.savez(root / "heads.npz", photo=rng.uniform(0, 1, (200, 16, 16, 3)).astype(np.float32))  # 100 held out
    return root


def package(models, name, *extra, formats=("tflite", "onnx")):
    """These untrained models test how tensors travel, not INT8 accuracy (tests/build/test_gates.py
    does): the gates still run and record their verdict, and the package is kept either way."""
    flags = [f for fmt in formats for f in ("--format", fmt)]
    result = edgekit_cli("package", models / f"{name}.keras", "-c", models / f"{name}.npz", *flags,
                         "-o", models / "out", "--force", "--allow-accuracy-drop", "--no-also-float", *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return models / "out" / f"{name}.edgekit"


def raw_outputs(artifact, feeds):
    """The raw runtime on the artifact: LiteRT's signature runner per sample, or an ORT session."""
    if str(artifact).endswith(".tflite"):
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=str(artifact))
        runner = interpreter.get_signature_runner()
        details = runner.get_input_details()
        out: dict[str, list] = {}
        n = len(next(iter(feeds.values())))
        for i in range(n):
            sample = {}
            for k, v in feeds.items():
                d = details[k]
                x = v[i : i + 1]
                if d["dtype"] in (np.int8, np.uint8) and x.dtype.kind == "f":
                    scale, zero = d["quantization"]
                    x = np.clip(np.rint(x / scale) + zero, *{np.int8: (-128, 127), np.uint8: (0, 255)}[d["dtype"]])
                sample[k] = x.astype(d["dtype"])
            for name, value in runner(**sample).items():
                out.setdefault(name, []).append(value)
        return {k: np.concatenate(v) for k, v in out.items()}
    import onnxruntime as ort

    session = ort.InferenceSession(str(artifact), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def test_two_inputs_three_outputs(models, tmp_path):
    pkg = package(models, "multi")
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["image", "meta"]
    assert [i["role"] for i in manifest["inputs"]] == ["image", "values"]
    assert "color_order" not in manifest["inputs"][1].get("preprocessing", {})
    assert sorted(o["name"] for o in manifest["outputs"]) == ["boxes", "presence", "scores"]
    for fmt in ("tflite", "onnx"):
        per_output = manifest["validation"]["artifacts"][fmt]["outputs"]
        assert sorted(per_output) == ["boxes", "presence", "scores"]
        assert all(v["cosine"] > 0.9 for v in per_output.values()), per_output
    with np.load(models / "multi.npz") as data:
        feeds = {"image": data["image"][:5], "meta": data["meta"][:5]}
    for fmt in ("tflite", "onnx"):
        with edgekit.load(pkg, artifact=fmt) as model:
            got = model.predict(feeds)
            raw = raw_outputs(pkg / model.artifact.path, feeds)
        assert sorted(got) == sorted(raw) == ["boxes", "presence", "scores"]
        for name in raw:
            if fmt == "tflite":  # int8 outputs dequantized by edgekit: compare in the raw domain's float
                np.testing.assert_allclose(got[name], _dequantized(pkg, manifest, name, raw[name]), atol=1e-6)
            else:
                np.testing.assert_array_equal(got[name], raw[name])
    np.save(tmp_path / "image.npy", feeds["image"])
    np.save(tmp_path / "meta.npy", feeds["meta"])
    run = device_cli(pkg, "-i", f"image={tmp_path / 'image.npy'}", "-i", f"meta={tmp_path / 'meta.npy'}",
                     "--artifact", "onnx", "--output", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == ["boxes", "presence", "scores"] and out["scores"].shape == (5, 10)
    _bench_runs(pkg, tmp_path)
    _served(pkg, feeds, "multi", ["boxes", "presence", "scores"])


def _bench_runs(pkg, tmp_path):
    """--bench feeds every input of the package (synthetic values in each input's range)."""
    bench = device_cli(pkg, "--bench", "--runs", "5", "--warmup", "1", "--min-seconds", "0",
                       "--report", tmp_path / "r.json")
    assert bench.returncode == 0, bench.stderr


def _dequantized(pkg, manifest, name, raw):
    """LiteRT's signature runner returns int8 outputs; the artifact's own scale/zero point convert them."""
    from edgekit.formats.tflite.backend import LiteRTBackend

    backend = LiteRTBackend(str(pkg / "tflite" / "model.int8.tflite"))
    info = next(t for t in backend.outputs if t.name == name)
    return ((raw.astype(np.float32) - info.zero_point) * info.scale) if info.quantized else raw


def _served(pkg, feeds, name, outputs, datatype="FP32"):
    from edgekit.server.dataplane import DataPlane, ServerOptions

    plane = DataPlane([edgekit.load(pkg, artifact="onnx")], ServerOptions())
    body = json.dumps({"inputs": [
        {"name": key, "shape": list(x.shape), "datatype": datatype, "data": x.ravel().tolist()}
        for key, x in feeds.items()]}).encode()

    async def scenario():
        plane.start()
        content, _ = await plane.infer(name, None, body, None)
        await plane.stop()
        return json.loads(content)

    answer = asyncio.run(scenario())
    assert sorted(o["name"] for o in answer["outputs"]) == outputs


def _matches_raw(pkg, manifest, artifact, feeds, got):
    """edgekit's outputs on an artifact equal the raw runtime's on the same artifact (the one loaded)."""
    raw = raw_outputs(pkg / artifact.path, feeds)
    got = got if isinstance(got, dict) else {manifest["outputs"][0]["name"]: got}
    assert sorted(got) == sorted(raw)
    for name in raw:
        expected = _dequantized(pkg, manifest, name, raw[name]) if artifact.target == "tflite" else raw[name]
        np.testing.assert_allclose(got[name], expected, atol=1e-6)


def test_token_ids_pass_through_unquantized_and_unscaled(models, tmp_path):
    # the three formats that take Keras directly or in one step: ExecuTorch's two-step route for token ids
    # is tests/formats/test_executorch.py's (ids kept integers through its quantizer)
    pkg = package(models, "tokens", formats=("tflite", "onnx", "coreml"))
    manifest = json.loads((pkg / "manifest.json").read_text())
    spec = manifest["inputs"][0]
    assert spec["role"] == "integer" and spec["dtype"] == "int32" and "preprocessing" not in spec
    assert sorted({a["format"] for a in manifest["artifacts"]}) == ["coreml", "onnx", "tflite"]
    ids = np.random.default_rng(5).integers(0, 50, (4, 12)).astype(np.int32)
    for fmt in ("tflite", "onnx"):
        with edgekit.load(pkg, artifact=fmt) as model:
            got = model.predict(ids)
            assert got.shape == (4, 3)
            _matches_raw(pkg, manifest, model.artifact, {"tokens": ids}, got)
            with pytest.raises(edgekit.errors.InputError, match="fractional"):
                model.predict(ids.astype(np.float32) + 0.5)
    np.save(tmp_path / "ids.npy", ids)
    run = device_cli(pkg, "-i", tmp_path / "ids.npy", "--artifact", "tflite")
    assert run.returncode == 0 and run.stdout.count("ids.npy[") == 4, run.stderr
    _bench_runs(pkg, tmp_path)
    _served(pkg, {"tokens": ids}, "tokens", [manifest["outputs"][0]["name"]], datatype="INT32")


def test_audio_tensor_gets_no_image_fields(models, tmp_path):
    pkg = package(models, "audio")  # how the tensor travels: the formats that run here (every format: heads below)
    manifest = json.loads((pkg / "manifest.json").read_text())
    spec = manifest["inputs"][0]
    assert spec["role"] == "values" and "layout" not in spec
    assert not {"color_order", "resize", "layout"} & set(spec.get("preprocessing", {}))
    assert sorted({a["format"] for a in manifest["artifacts"]}) == ["onnx", "tflite"]
    with np.load(models / "audio.npz") as data:
        x = data["audio"][:3]
    for fmt in ("tflite", "onnx"):
        with edgekit.load(pkg, artifact=fmt) as model:
            got = model.predict(x)
            assert got.shape == (3, 4)
            _matches_raw(pkg, manifest, model.artifact, {"audio": x}, got)
    np.save(tmp_path / "clips.npy", x)
    run = device_cli(pkg, "-i", tmp_path / "clips.npy", "--output", tmp_path / "out.npy")
    assert run.returncode == 0 and np.load(tmp_path / "out.npy").shape == (3, 4), run.stderr
    _bench_runs(pkg, tmp_path)


def test_detector_head_concatenating_boxes_and_scores(models, tmp_path):
    pkg = package(models, "detector")  # the joined head measured per quantity on the formats that run here
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert len(manifest["outputs"]) == 1 and manifest["outputs"][0]["shape"] == [-1, 7]  # named by the signature
    assert sorted({a["format"] for a in manifest["artifacts"]}) == ["onnx", "tflite"]
    for fmt in ("tflite", "onnx"):  # boxes (0..300) and scores (0..1): the score block is measured on its own
        worst = manifest["validation"]["artifacts"][fmt]["worst_slice"]
        assert worst["groups"] == 2 and worst["channels"] in ([0, 4], [4, 7]), worst
    with np.load(models / "detector.npz") as data:
        x = data["image"][:4]
    for fmt in ("tflite", "onnx"):
        with edgekit.load(pkg, artifact=fmt) as model:
            got = model.predict(x)
            assert got.shape == (4, 7)
            _matches_raw(pkg, manifest, model.artifact, {"image": x}, got)
    np.save(tmp_path / "imgs.npy", x)
    run = device_cli(pkg, "-i", tmp_path / "imgs.npy", "--artifact", "tflite")
    assert run.returncode == 0 and run.stdout.count("imgs.npy[") == 4, run.stderr
    _served(pkg, {"image": x}, "detector", [manifest["outputs"][0]["name"]])


def test_a_missing_input_array_is_named(models, tmp_path):
    np.savez(tmp_path / "half.npz", image=np.zeros((20, 8, 8, 1), np.float32))
    result = edgekit_cli("package", models / "multi.keras", "-c", tmp_path / "half.npz", "-o", tmp_path / "o")
    assert_user_error(result, "has no array for ['meta']", "np.savez(path, image=..., meta=...)")


def test_one_input_two_heads_for_every_format(models):
    """coremltools' Keras routes take one output: CoreML says so and builds on its last route, through
    tf2onnx and the ONNX -> PyTorch rebuild, which keeps both heads; the table says n/a where top-1
    means nothing."""
    result = edgekit_cli("package", models / "heads.keras", "-c", models / "heads.npz", "--format", "all",
                         "-o", models / "out", "--force", "--allow-partial", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "nan%" not in result.stdout
    manifest = json.loads((models / "out" / "heads.edgekit" / "manifest.json").read_text())
    assert sorted({a["format"] for a in manifest["artifacts"]}) == ["coreml", "executorch", "onnx", "tflite"]
    assert not manifest.get("failed")
    assert "several outputs (2)" in result.stderr and "keras -> tf2onnx -> onnx-graph -> onnx-to-torch" in result.stderr


def test_an_input_whose_first_axis_is_fixed_above_one_beside_a_free_axis_is_refused_as_a_layout():
    """A state ``[2, ?, 128]`` the source could not make batch-first (no ONNX graph to rewrite):
    stacking samples on axis 0 would feed each sample's values as the wrong rows, and ONNX
    Runtime's refusal blamed a converter; the input and its layout are named, with a fix that
    runs. A batch-1 model (axis 0 fixed at 1) and a plain batch-first input are fed as before."""
    import pytest

    from edgekit.errors import ModelSourceError
    from edgekit.packaging.data import _refuse_unbatched
    from edgekit.sources.description import TensorDescription

    frames = TensorDescription("frames", (-1, 512), "float32")
    state = TensorDescription("state", (2, -1, 128), "float32")
    with pytest.raises(ModelSourceError, match=r"'state' has shape \[2, '\?', 128\].* batch is on axis 1") as caught:
        _refuse_unbatched([frames, state])
    assert "--input state=0 --input-shape state=2x1x128" in caught.value.hint
    _refuse_unbatched([frames, TensorDescription("image", (1, 3, -1, -1), "float32")])
