"""The plan an artifact was built with is read back from the artifact: what landed is recorded,
and a plan entry the converter did not keep at its precision is said (``plan_read_back.py``)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, edgekit_cli

pytestmark = pytest.mark.slow


def test_a_kept_activation_that_executorch_fuses_into_an_int8_convolution_is_said(tmp_path):
    """``--keep-float block3_pw_relu6`` (the ReLU6 after a pointwise convolution): XNNPACK's
    quantizer annotates a convolution and its activation as one pattern, so the program holds that
    ReLU6 in int8; the package said nothing of it, and recorded the plan as if it had landed."""
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "--eval", EVAL, "--format", "executorch",
                         "--keep-float", "block2_dw", "--keep-float", "block3_pw_relu6", "--no-also-float",
                         "--no-auto-fix", "--allow-accuracy-drop", "-o", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "executorch: 1 of the 2 precision plan entries are not in the artifact as planned: block3_pw_relu6 " \
           "(float)" in result.stderr, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "digits.edgekit" / "manifest.json").read_text())
    plan = manifest["artifacts"][0]["details"]["precision_plan"]
    assert plan["layers"] == {"block2_dw": "float", "block3_pw_relu6": "float"}  # the plan built, as given
    assert plan["read_back"] == {"landed": ["block2_dw"], "missed": ["block3_pw_relu6"]}


def test_a_plan_built_in_onnx_nodes_is_said_in_the_pytorch_sources_module_names():
    """What a user is told of a plan an ONNX build of a PyTorch model took (a warning that it did
    not build, the manifest's record) names the modules, not the nodes they became."""
    from edgekit.conversion.layer_names import LayerNames
    from edgekit.formats.plan import PrecisionPlan
    from edgekit.packaging.plan_read_back import source_plan

    names = LayerNames(module_paths={"node_conv2d_1": "mid", "node_mean": "pool", "node_relu": "act"})
    built = PrecisionPlan.of(floats=["midd", "node_conv2d_1", "node_mean"])
    assert source_plan(built, names).describe() == "--keep-float midd mid pool"
    assert source_plan(built, LayerNames()) == built  # no module record: as built
