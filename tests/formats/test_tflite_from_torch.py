"""TFLite from a PyTorch module (litert-torch): an op it leaves in float is named by the user's
layer, never by edgekit's wrapper module."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgekit.formats.tflite.from_torch import torch_layer

WRAPPER = "edgekit.formats.tflite.from_torch.convert_torch.<locals>.Named"


@pytest.mark.parametrize("tensor, layer", [
    # as litert-torch 0.x names them: the wrapper, the user's model, then its submodules
    (f"{WRAPPER}/edgekit_model_m.Net_inner;3", "Net.forward"),
    (f"{WRAPPER}/edgekit_model_m.Net_inner/torch.nn.modules.linear.Linear_head;1", "head (Linear)"),
    (f"{WRAPPER}/m.Net_inner/m.Block_blocks_0/torch.nn.modules.conv.Conv1d_conv_1;2", "blocks_0.conv_1 (Conv1d)"),
    (f"{WRAPPER}/edgekit_model_m.Net_inner;;{WRAPPER}/edgekit_model_m.Net_inner/torch.nn.modules.conv.Conv1d_conv;",
     "Net.forward"),
    ("serving_default_output_output", "serving_default_output_output"),  # not below the wrapper: as named
])
def test_a_litert_torch_tensor_is_named_by_the_users_layer(tensor, layer):
    assert torch_layer(tensor) == layer
    assert "<locals>" not in torch_layer(tensor)



def test_an_op_fused_from_two_modules_belongs_to_both_layers():
    """litert-torch fuses a Conv2d with the ReLU after it into one CONV_2D named after both,
    the ReLU first: a plan keeping ``conv2`` float (the simulation's search names the layer that
    computes) found no op of it and was refused on TFLite."""
    from edgekit.formats.tflite.quantizer import MODULES, layer_test

    fused = (f"{WRAPPER}/m.Net_inner/torch.nn.modules.activation.ReLU_act2;;"
             f"{WRAPPER}/m.Net_inner/torch.nn.modules.conv.Conv2d_conv2;1")
    belongs = layer_test(MODULES, [])
    assert belongs(fused, "conv2") and belongs(fused, "act2")
    assert not belongs(fused, "conv1")


def test_input_names_that_are_no_python_identifier_reach_tflite_and_keep_their_names(tmp_path_factory, tmp_path):
    """A TF export names its input ``serving_default_audio:0``: torch.export wrote it into
    generated code and the TFLite route failed with ``SyntaxError: invalid syntax (<eval_with_key>
    .16, line 5)``. litert-torch gets identifiers; the signature keeps the model's own name."""
    import json

    import onnx

    from edgekit.formats.tflite.signature_names import identifiers
    from tests.conftest import device_cli, edgekit_cli, verdict_model

    assert identifiers(["serving_default_audio:0", "input.1", "class", "1", "x", "x_"]) == {
        "serving_default_audio:0": "serving_default_audio_0", "input.1": "input_1", "class": "input_class",
        "1": "input_1_2", "x": "x", "x_": "x_"}
    folder = verdict_model(tmp_path_factory, "conv1d_asr")
    model = onnx.load(folder / "conv1d_asr.onnx")
    name = "serving_default_audio:0"
    for node in model.graph.node:
        node.input[:] = [name if i == "audio" else i for i in node.input]
    model.graph.input[0].name = name
    onnx.save(model, tmp_path / "renamed.onnx")
    audio = np.load(folder / "calibration.npz")["audio"]
    np.savez(tmp_path / "cal.npz", **{name: audio})
    result = edgekit_cli("package", tmp_path / "renamed.onnx", "-c", tmp_path / "cal.npz", "--format", "tflite",
                         "--no-auto-fix", "--no-also-float", "--allow-accuracy-drop", "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-2000:]
    package = tmp_path / "out" / "renamed.edgekit"
    assert [i["name"] for i in json.loads((package / "manifest.json").read_text())["inputs"]] == [name]
    np.save(tmp_path / "clip.npy", audio[:2])
    run = device_cli(package, "-i", tmp_path / "clip.npy", "--output", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr


@pytest.mark.slow
def test_a_search_try_converts_the_float_program_once_for_pt2e_and_plans_alike(tmp_path):
    """A plan's build (LiteRT Quantizer on litert-torch's float conversion) and PT2E's plain build
    of the same source in one package share the float conversion: the PT2E build made after a
    plan's (a simulated plan tried first, then plain INT8) converted the float program again, 2-6 s
    of litert-torch each time."""
    from edgekit.conversion.forms import TORCH_PROGRAM, ModelForm
    from edgekit.conversion.worker_reuse import reusing
    from edgekit.formats.building import BuildContext
    from edgekit.formats.plan import PrecisionPlan
    from edgekit.formats.tflite.builder import TFLiteBuilder

    digits = Path(__file__).resolve().parents[2] / "models" / "digits_torch"
    calibration = tmp_path / "calibration.npy"
    np.save(calibration, np.load(digits / "data" / "calibration.npz")["x"][:32].astype(np.float32) / 255)
    form = ModelForm(TORCH_PROGRAM, f"{digits / 'model.py'}:factory", loader="edgekit.sources.pytorch:load_module",
                     arguments={"kind": "torch_factory", "fixed": None})
    (tmp_path / "package").mkdir()
    (tmp_path / "work").mkdir()
    context = BuildContext(calibration_npy=str(calibration), eval_npy=str(calibration), package_dir=tmp_path / "package",
                           workdir=tmp_path / "work", model=form, output_names=("output",))
    builder = TFLiteBuilder()
    with reusing():
        planned = builder.build(context.with_plan(PrecisionPlan.of(floats=["head"])))
        float_model = Path(planned.float_model)
        made = float_model.stat().st_mtime_ns
        plain = builder.build(context)
    assert "PT2E" in plain.artifact.converter["tool"] and "PT2E" not in planned.artifact.converter["tool"]
    assert plain.float_model == planned.float_model and float_model.stat().st_mtime_ns == made  # not converted again
