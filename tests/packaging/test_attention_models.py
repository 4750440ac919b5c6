"""Attention, sequence and streaming reference models (``models/attention/build.py``) packaged for
every format with default flags, run through ``python -m edgekit.run`` and compared with their
sources: a CTC recognizer judged by its decoded lines, a ViT and a BERT-style encoder (PyTorch
program and ONNX), a streaming VAD carried frame by frame, and a JAX-style OneHot classifier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, built_once, edgekit_cli

pytestmark = pytest.mark.slow

ort = pytest.importorskip("onnxruntime")

sys.path.insert(0, str(ROOT / "models" / "attention"))
import build as attention  # noqa: E402


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def make(folder: Path) -> Path:
        subprocess.run([sys.executable, str(ROOT / "models" / "attention" / "build.py"), "vit", "text_encoder",
                        "recognizer", "stream", "onehot", "--output", str(folder)], check=True,
                       capture_output=True)
        return folder

    return built_once(tmp_path_factory, "attention_models", make)


def manifest_of(package: Path) -> dict:
    return json.loads((package / "manifest.json").read_text())


def run_device(package: Path, artifact: str, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "edgekit.run", str(package), "--artifact", artifact, *args],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_a_ctc_recognizer_ships_every_format_and_decodes_like_float(models, tmp_path):
    """Conv stem + attention blocks (opset 11: LayerNorm as ReduceMean/Pow/Sqrt/Div, GELU as Erf),
    CTC output [N, 24, 11]: named a sequence, judged by decoded lines, ships on the two routes the
    device runs here (the ONNX graph quantized, and rebuilt in PyTorch for TFLite), and the device
    decodes unseen lines as the source does. (Attention from ONNX to every format: the encoder below.)"""
    folder = models / "recognizer"
    held = np.load(folder / "heldout.npz")
    np.savez(tmp_path / "eval.npz", line=held["line"][:100])
    result = edgekit_cli("package", folder / "recognizer.onnx", "--format", "tflite", "--format", "onnx",
                         "-c", folder / "lines.npz", "--eval", tmp_path / "eval.npz", "--no-also-float",
                         "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "recognizer.edgekit"
    manifest = manifest_of(package)
    assert {a["format"] for a in manifest["artifacts"]} == {"tflite", "onnx"}
    assert "output logprobs: sequence" in result.stdout and "CTC blank" in result.stdout
    for key, measured in manifest["validation"]["artifacts"].items():
        assert measured["passed"], key
        assert measured["tasks"]["logprobs"]["task"] == "sequence", key
        assert measured["tasks"]["logprobs"]["values"]["sequence_agreement"] >= 0.99, key
    lines = held["line"][100:200]  # lines no build or check saw
    np.save(tmp_path / "unseen.npy", lines)
    source = ort.InferenceSession(str(folder / "recognizer.onnx")).run(None, {"line": lines})[0]
    expected = attention.greedy_ctc(source)
    for artifact in ("tflite", "onnx"):
        run_device(package, artifact, "-i", str(tmp_path / "unseen.npy"), "-o", str(tmp_path / f"{artifact}.npy"))
        decoded = attention.greedy_ctc(np.load(tmp_path / f"{artifact}.npy"))
        assert np.mean([d == e for d, e in zip(decoded, expected)]) >= 0.99, artifact


def test_a_recognizer_calibrated_on_the_wrong_range_is_refused_by_its_decoded_lines(models, tmp_path):
    folder = models / "recognizer"
    np.savez(tmp_path / "narrow.npz", line=np.load(folder / "lines.npz")["line"] * 0.05)
    np.savez(tmp_path / "eval.npz", line=np.load(folder / "heldout.npz")["line"][:60])
    result = edgekit_cli("package", folder / "recognizer.onnx", "--format", "onnx", "-c", tmp_path / "narrow.npz",
                         "--eval", tmp_path / "eval.npz", "--no-auto-fix", "--no-also-float", "-o", tmp_path / "out")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "(sequence): sequence_agreement" in result.stderr and "decoded greedy CTC, blank 0" in result.stderr
    assert not (tmp_path / "out" / "recognizer.edgekit").exists()


# the ViT from PyTorch and the encoder from ONNX (the recognizer covers attention in ONNX opset 11)
@pytest.mark.parametrize("name, source", [("vit", "vit.pt2"), ("text_encoder", "text_encoder.onnx")])
def test_attention_classifiers_ship_every_format_and_match_their_source(models, tmp_path, name, source):
    """MatMul of two activations, LayerNorm, GELU, Softmax and multi-head reshapes through TFLite,
    ONNX and CoreML (validated by the MIL evaluator); the encoder's int64 ids and attention mask
    included (its additive mask stays float in ONNX)."""
    folder = models / name
    data = {"vit": "images.npz", "text_encoder": "texts.npz"}[name]
    result = edgekit_cli("package", folder / source, "--format", "all", "-c", folder / data, "--no-also-float",
                         "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / f"{name}.edgekit"
    manifest = manifest_of(package)
    # ExecuTorch too: the encoder's additive attention mask and its softmax unquantized, as in ONNX
    assert {a["format"] for a in manifest["artifacts"]} >= {"tflite", "onnx", "coreml", "executorch"}
    for key, measured in manifest["validation"]["artifacts"].items():
        assert measured["passed"] and measured["measured"], key
    held = np.load(folder / "heldout.npz")
    feeds = {k: held[k][:40] for k in held.files if k != "labels"}
    if len(feeds) == 1:  # one input: a .npy of samples (an .npz would be read as an image file)
        np.save(tmp_path / "held.npy", next(iter(feeds.values())))
        given = tmp_path / "held.npy"
    else:
        np.savez(tmp_path / "held.npz", **feeds)
        given = tmp_path / "held.npz"
    session = ort.InferenceSession(str(folder / f"{name}.onnx"))
    expected = session.run(None, feeds)[0].argmax(-1)
    for artifact in ("tflite", "onnx", "executorch"):
        run_device(package, artifact, "-i", str(given), "-o", str(tmp_path / f"{artifact}.npy"))
        produced = np.load(tmp_path / f"{artifact}.npy").argmax(-1)
        assert np.mean(produced == expected) >= 0.97, artifact


def _source_stream(model: Path, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The source model run frame by frame, its state (in its own [2, 1, 32] layout) fed back."""
    session = ort.InferenceSession(str(model))
    state, speech, states = np.zeros((2, 1, attention.STATE), np.float32), [], []
    for frame in frames:
        p, state = session.run(None, {"input": frame[None], "sr": np.array(16000, np.int64), "state": state})
        speech.append(p[0])
        states.append(state[:, 0])
    return np.stack(speech), np.stack(states)


@pytest.fixture(scope="session")
def stream_package(models: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The VAD packaged once for the formats its streaming checks read (TFLite and ONNX, run frame by
    frame) and CoreML (its If folded and its state made batch-first before the rebuild), with its
    command's output. ExecuTorch's build of a streaming state is the shared-plan tests' subject
    (``vad_stream``), every ONNX route the route matrix's (``tests/routing/route_matrix.py``)."""
    out = tmp_path_factory.mktemp("stream")
    result = edgekit_cli("package", models / "stream" / "stream.onnx", "--format", "tflite", "--format", "onnx",
                         "--format", "coreml", "--input", "sr=16000", "-c", models / "stream" / "frames.npz",
                         "--no-also-float", "-o", out)
    assert result.returncode == 0, result.stderr[-3000:]
    return out / "stream.edgekit", result.stdout


def test_a_stateful_vad_streams_100_frames_with_its_state_carried_over(models, stream_package, tmp_path):
    """A VAD's structure: an If on a scalar sample rate (fixed with --input sr=16000, then folded),
    a GRU state [2, batch, 32] (made batch-first) read and written each call. TFLite, ONNX and CoreML build;
    `python -m edgekit.run --stream` carries stateN into state for 100 frames and matches the
    source frame by frame."""
    folder = models / "stream"
    package, _ = stream_package
    manifest = manifest_of(package)
    assert {a["format"] for a in manifest["artifacts"]} == {"tflite", "onnx", "coreml"}
    rewrites = manifest["source"]["rewrites"]
    assert rewrites["folded_ifs"][0]["taken"] is True and rewrites["batch_axes"] == {"state": 1, "stateN": 1}
    frames = np.load(folder / "stream.npz")["input"]
    assert len(frames) == 100
    speech, states = _source_stream(folder / "stream.onnx", frames)
    for artifact in ("tflite", "onnx"):
        run_device(package, artifact, "--stream", "-i", str(folder / "stream.npz"), "-o",
                   str(tmp_path / f"{artifact}.npz"))
        produced = np.load(tmp_path / f"{artifact}.npz")
        assert produced["speech"].shape == (100, 1) and produced["stateN"].shape == (100, 2, attention.STATE)
        assert np.array_equal(produced["speech"] > 0.5, speech > 0.5), artifact
        assert np.abs(produced["speech"] - speech).max() < 0.05, artifact
        assert np.abs(produced["stateN"] - states).max() < 0.1, artifact


def test_streaming_from_python_carries_state_and_a_model_without_state_is_told(models, stream_package,
                                                                              digits_package, tmp_path):
    import edgekit

    package, _ = stream_package
    frames = np.load(models / "stream" / "stream.npz")["input"][:20]
    speech, _ = _source_stream(models / "stream" / "stream.onnx", frames)
    with edgekit.load(package, artifact="onnx") as model:
        stream = model.stream()
        assert stream.pairs == {"state": "stateN"} and stream.frame_inputs == ["input"]
        produced = np.concatenate([stream.step(frame[None])["speech"] for frame in frames])
        np.testing.assert_allclose(produced, speech, atol=0.05)
        stream.reset()
        assert not stream.state["state"].any()
    np.save(tmp_path / "images.npy", np.zeros((3, 8, 8, 1), np.uint8))
    refused = subprocess.run([sys.executable, "-m", "edgekit.run", str(digits_package), "--stream",
                              "-i", str(tmp_path / "images.npy")], capture_output=True, text=True)
    assert refused.returncode != 0 and "no state to carry" in refused.stderr and "--state INPUT=OUTPUT" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_an_int32_one_hot_classifier_with_a_2d_gemm_bias_quantizes(models, tmp_path):
    """A JAX/TF export's MatMul + Add([1, N]) becomes a Gemm with a 2-D bias in quant_pre_process,
    which quantize_static failed on ('The truth value of an array ... is ambiguous')."""
    folder = models / "onehot"
    result = edgekit_cli("package", folder / "onehot.onnx", "--format", "onnx", "--format", "tflite",
                         "-c", folder / "tokens.npz", "--no-also-float", "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    package = tmp_path / "out" / "onehot.edgekit"
    manifest = manifest_of(package)
    assert {a["format"] for a in manifest["artifacts"]} == {"onnx", "tflite"}
    assert all(m["passed"] for m in manifest["validation"]["artifacts"].values())
    import onnx

    path = next(a["path"] for a in manifest["artifacts"] if a["format"] == "onnx" and a["precision"] != "float32")
    built = onnx.load(str(package / path))
    gemm = next(n for n in built.graph.node if n.op_type == "Gemm")
    producers = {o: n.op_type for n in built.graph.node for o in n.output}
    assert producers[gemm.input[1]] == "DequantizeLinear"  # int8 weights
