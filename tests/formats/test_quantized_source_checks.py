"""A quantized source is the reference its artifacts are judged against, so a broken one must be
said, never shipped with "gates pass" as if it had been judged: invalid scales refused by name, a
source near chance said plainly, a float reference unrelated to it or of another width named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import assert_user_error, edgekit_cli
from tests.formats.qdq_models import quadrant_images, trained_linear, write_data, write_float, write_qdq


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qdq")
    x, y = quadrant_images(300, 0)
    weights, bias = trained_linear(x, y)
    calibration, evaluation = write_data(folder)
    return folder, x, weights, bias, calibration, evaluation


def _package(model, calibration, evaluation, out, *extra):
    return edgekit_cli("package", model, "-c", calibration, "--eval", evaluation, "--format", "onnx", *extra,
                       "-o", out)


@pytest.mark.parametrize("scale", [0.0, float("nan"), -0.01])
def test_a_zero_nan_or_negative_scale_is_refused_by_name(linear, tmp_path, scale):
    folder, x, weights, bias, calibration, evaluation = linear
    model = write_qdq(tmp_path / "bad.onnx", weights, bias, x, input_scale=scale)
    result = _package(model, calibration, evaluation, tmp_path / "out")
    assert_user_error(result, "zero, negative or non-finite scale", "'flat_quantize'")
    assert not (tmp_path / "out" / "bad.edgekit").exists()


def test_a_good_quantized_source_without_its_float_model_is_said_unjudged(linear, tmp_path):
    folder, x, weights, bias, calibration, evaluation = linear
    model = write_qdq(tmp_path / "good.onnx", weights, bias, x)
    result = _package(model, calibration, evaluation, tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the source itself was NOT judged" in result.stdout and "--float-reference" in result.stdout
    assert "INT8 vs the quantized source" in result.stdout and "source acc" in result.stdout
    assert "looks broken" not in result.stderr


def test_a_broken_but_valid_quantized_source_is_said_near_chance(linear, tmp_path):
    folder, x, weights, bias, calibration, evaluation = linear
    # valid scales, wrong ones: the first class's weights 100x, the others' 1000x smaller, so it always wins
    model = write_qdq(tmp_path / "broken.onnx", weights, bias, x, weight_scale_factor=np.array([100, 1e-3, 1e-3, 1e-3]),
                      output_scale_factor=0.001)
    result = _package(model, calibration, evaluation, tmp_path / "out")
    said = [line for line in result.stderr.splitlines() if "the quantized source itself scores" in line]
    assert said and "its quantization looks broken" in said[0] and "tie on" in said[0], result.stderr[-3000:]
    assert "the source itself was NOT judged" in result.stdout


def test_an_unrelated_float_reference_is_refused_far_from_the_source(linear, tmp_path):
    """It was said in a warning, then every artifact was judged against it and the package shipped."""
    folder, x, weights, bias, calibration, evaluation = linear
    model = write_qdq(tmp_path / "good.onnx", weights, bias, x)
    rng = np.random.default_rng(5)
    other = write_float(tmp_path / "other.onnx", rng.normal(size=weights.shape).astype(np.float32),
                        rng.normal(size=bias.shape).astype(np.float32))
    result = _package(model, calibration, evaluation, tmp_path / "out", "--float-reference", other)
    assert result.returncode == 2, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "far from its float reference" in line]
    assert said and said[0].startswith("error:") and "other.onnx" in said[0], result.stderr[-3000:]
    assert "fix:" in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "out").glob("*.edgekit"))


def test_a_float_reference_of_another_output_width_is_a_usage_error(linear, tmp_path):
    folder, x, weights, bias, calibration, evaluation = linear
    model = write_qdq(tmp_path / "good.onnx", weights, bias, x)
    wider = write_float(tmp_path / "wider.onnx", np.zeros((5, 64), np.float32), np.zeros(5, np.float32))
    result = _package(model, calibration, evaluation, tmp_path / "out", "--float-reference", wider)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "output 'logits' has shape [200, 5]" in result.stderr and "[200, 4]" in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_a_missing_float_reference_names_the_option(linear, tmp_path):
    folder, x, weights, bias, calibration, evaluation = linear
    model = write_qdq(tmp_path / "good.onnx", weights, bias, x)
    result = _package(model, calibration, evaluation, tmp_path / "out", "--float-reference", tmp_path / "nosuch.onnx")
    assert result.returncode == 2 and "--float-reference" in result.stderr and "does not exist" in result.stderr, \
        result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_a_per_channel_activation_pair_is_described_so_and_refused_on_tflite(linear, tmp_path):
    folder, x, weights, bias, calibration, evaluation = linear
    model = write_qdq(tmp_path / "channels.onnx", weights, bias, x, per_channel_input=True)
    result = edgekit_cli("package", model, "-c", calibration, "--eval", evaluation, "--format", "tflite",
                         "-o", tmp_path / "out")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "activations int8 per-tensor, 1 per-channel symmetric (2)" in result.stdout
    assert "quantizes the activation 'flat' per channel (64 scales on axis 1)" in result.stderr
    assert "--format onnx" in result.stderr
    onnx_result = _package(model, calibration, evaluation, tmp_path / "onnx")
    assert onnx_result.returncode == 0, onnx_result.stderr[-3000:]
    scheme = json.loads((tmp_path / "onnx" / "channels.edgekit" / "manifest.json").read_text())["source"]["quantized"]
    assert scheme["activations"]["per_channel_tensors"] == 1
