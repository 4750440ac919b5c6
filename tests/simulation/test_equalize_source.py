"""The equalization of the simulated ONNX graph, carried to the source's own PyTorch or Keras
model: the same scales on the source's parameters (a folded BatchNorm's affine where there is
one), the float function unchanged, and a model that cannot take them exactly refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.conversion import worker
from edgekit.conversion.forms import KERAS_MODEL, TF_GRAPH, TORCH_PROGRAM, ModelForm, load_module
from edgekit.simulation.equalize import equalize
from edgekit.simulation.equalize_source import SourceEqualizeRequest, equalize_source_model, torch_edits
from edgekit.conversion.layer_names import onnx_module_paths

FACTORY = '''
import torch
from torch import nn


def factory():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
    with torch.no_grad():
        model[1].running_var.uniform_(0.5, 2.0)
        model[1].running_mean.uniform_(-0.2, 0.2)
        model[1].weight[:2] *= 40.0  # two outlier channels; the reader takes the factor back
        model[1].bias[:2] *= 40.0
        model[3].weight[:, :2] /= 40.0
    return model.eval()
'''


def _torch_source(tmp_path):
    import onnx
    import torch

    (tmp_path / "net.py").write_text(FACTORY)
    form = ModelForm(TORCH_PROGRAM, f"{tmp_path / 'net.py'}:factory", loader="edgekit.sources.pytorch:load_module",
                     arguments={"kind": "torch_factory", "fixed": None})
    module, _ = load_module(form)
    x = np.random.default_rng(0).normal(size=(16, 3, 8, 8)).astype(np.float32)
    torch.onnx.export(module, (torch.from_numpy(x[:2]),), str(tmp_path / "net.onnx"), dynamo=True,
                      input_names=["x"], output_names=["y"])
    np.save(tmp_path / "samples.npy", x)
    found = equalize(str(tmp_path / "net.onnx"), str(tmp_path / "eq.onnx"))
    (tmp_path / "scales.json").write_text(json.dumps(found["scales"]))
    return form, x, onnx_module_paths(onnx.load(str(tmp_path / "net.onnx")))


def test_a_pytorch_program_takes_the_scales_on_its_folded_batchnorm_with_its_function_unchanged(tmp_path):
    import torch

    form, x, paths = _torch_source(tmp_path)
    report = equalize_source_model(SourceEqualizeRequest(form.to_dict(), str(tmp_path / "scales.json"),
                                                   str(tmp_path / "samples.npy"), str(tmp_path), paths, ()))
    assert not report.why_not and report.largest_difference < 1e-4
    equalized = ModelForm.from_dict(report.forms[TORCH_PROGRAM])
    module, _ = load_module(equalized)
    original, _ = load_module(form)
    with torch.no_grad():
        assert np.allclose(module(torch.from_numpy(x)).numpy(), original(torch.from_numpy(x)).numpy(), atol=1e-4)
    gamma = module[1].weight.detach().abs().numpy()
    assert gamma.max() / gamma.min() < original[1].weight.detach().abs().numpy().max() / 10  # the outliers tamed
    assert torch.equal(module[0].weight, original[0].weight)  # the division on the BatchNorm, not the convolution


def test_scales_that_name_no_parameter_are_refused_not_guessed():
    pair = {"first": "node_a", "second": "node_b", "weight": "onnx::Conv_7", "bias": "", "reader_weight": "w2",
            "depthwise_reader": False, "scale": [1.0, 2.0]}
    with pytest.raises(Exception, match="not a parameter"):
        torch_edits({"w2": (4, 2, 3, 3)}, [pair], {})


KERAS_MODELS = '''
import sys
import keras
folder = sys.argv[1]
for activation in ("relu", "sigmoid"):  # conv_a -> BatchNorm -> activation -> conv_b, two outlier channels
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3), name="image")
    h = keras.layers.Conv2D(8, 3, padding="same", name="conv_a")(inputs)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.Activation(activation, name="act")(h)
    outputs = keras.layers.Conv2D(4, 3, padding="same", name="conv_b")(h)
    model = keras.Model(inputs, outputs)
    gamma, beta, mean, var = model.get_layer("bn").get_weights()
    gamma[:2] *= 40; beta[:2] *= 40
    model.get_layer("bn").set_weights([gamma, beta, mean, var + 0.5])
    kernel, bias = model.get_layer("conv_b").get_weights()
    kernel[:, :, :2] /= 40
    model.get_layer("conv_b").set_weights([kernel, bias])
    model.save(f"{folder}/{activation}.keras")
keras.utils.set_random_seed(0)  # a separable convolution, then a BatchNorm tf2onnx folds into its pointwise half
inputs = keras.Input((8, 8, 3), name="image")
h = keras.layers.SeparableConv2D(8, 3, padding="same", depth_multiplier=2, name="sep")(inputs)
h = keras.layers.BatchNormalization(name="bn")(h)
h = keras.layers.ReLU(name="act")(h)
outputs = keras.layers.Conv2D(4, 3, padding="same", name="conv_b")(h)
keras.Model(inputs, outputs).save(f"{folder}/separable.keras")
'''


@pytest.fixture(scope="module")
def keras_models(tmp_path_factory):
    """The Keras models of these tests, saved by one child (TensorFlow imported once)."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("keras")
    subprocess.run([sys.executable, "-c", KERAS_MODELS, str(folder)], check=True, capture_output=True)
    return folder


def _keras_source(tmp_path, models, activation: str):
    """The scales as the simulation's equalization of the model's ONNX form names them (tf2onnx)."""
    scale = [8.0, 6.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    (tmp_path / "scales.json").write_text(json.dumps([{
        "first": "model_1/conv_a_1/convolution", "second": "model_1/conv_b_1/convolution", "weight": "w_a",
        "bias": "b_a", "reader_weight": "w_b", "depthwise_reader": False, "scale": scale}]))
    np.save(tmp_path / "samples.npy", np.random.default_rng(0).normal(size=(16, 8, 8, 3)).astype(np.float32))
    return ModelForm(KERAS_MODEL, str(models / f"{activation}.keras"))


@pytest.mark.parametrize("activation, carried", [("relu", True), ("sigmoid", False)])
def test_a_keras_model_is_equalized_and_exported_or_refused_where_its_function_would_change(tmp_path, keras_models,
                                                                                            activation, carried):
    """Through a ReLU the scales are exact and the model is saved and exported as a SavedModel;
    through a sigmoid (not positively homogeneous) the outputs would change: refused, said."""
    form = _keras_source(tmp_path, keras_models, activation)
    report = worker.convert(equalize_source_model, SourceEqualizeRequest(
        form.to_dict(), str(tmp_path / "scales.json"), str(tmp_path / "samples.npy"), str(tmp_path), {},
        ("conv_a", "bn", "act", "conv_b")), what="equalization", timeout=300)
    if carried:
        assert not report.why_not and report.largest_difference < 1e-4
        assert set(report.forms) == {KERAS_MODEL, TF_GRAPH}
        assert (tmp_path / "equalized-savedmodel" / "saved_model.pb").exists()
    else:
        assert report.forms == {} and "differ from its own" in report.why_not


def test_a_keras_separable_convolution_takes_the_scales_of_both_its_halves(tmp_path, keras_models):
    """A SeparableConv2D is two ONNX convolutions (depthwise, then pointwise) in one Keras layer;
    tf2onnx folds the BatchNormalization after it into the pointwise one and names that node after
    the BatchNormalization. The pair between its halves rescales its own two kernels, the pair it
    starts the BatchNormalization's gamma and beta; the float function is unchanged."""
    pairs = [{"first": "model_1/sep_1/separable_conv2d/depthwise", "second": "model_1/bn_1/batchnorm/mul_1",
              "weight": "dw", "bias": "", "reader_weight": "pw", "depthwise_first": True, "depthwise_reader": False,
              "scale": [3.0, 0.5, 2.0, 1.0, 4.0, 0.25]},  # 3 channels x multiplier 2
             {"first": "model_1/bn_1/batchnorm/mul_1", "second": "model_1/conv_b_1/convolution", "weight": "pw",
              "bias": "b", "reader_weight": "w_b", "depthwise_first": False, "depthwise_reader": False,
              "scale": [5.0, 1.0, 1.0, 0.2, 1.0, 1.0, 3.0, 1.0]}]
    (tmp_path / "scales.json").write_text(json.dumps(pairs))
    np.save(tmp_path / "samples.npy", np.random.default_rng(0).normal(size=(16, 8, 8, 3)).astype(np.float32))
    report = worker.convert(equalize_source_model, SourceEqualizeRequest(
        ModelForm(KERAS_MODEL, str(keras_models / "separable.keras")).to_dict(), str(tmp_path / "scales.json"),
        str(tmp_path / "samples.npy"), str(tmp_path), {}, ("sep", "bn", "act", "conv_b")), what="equalization",
        timeout=300)
    assert not report.why_not and report.largest_difference < 1e-4, report
