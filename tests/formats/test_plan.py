"""The precision plan: one type for the flags, the search, the manifest and a saved file."""

from __future__ import annotations

import json

import pytest

from edgekit.errors import InputError
from edgekit.formats.plan import FLOAT, INT16, PrecisionPlan


def test_flags_make_one_plan_and_float_wins_over_int16():
    plan = PrecisionPlan.of(floats=["conv3"], int16=["conv1", "conv3"])
    assert plan.floats == ("conv3",) and plan.int16 == ("conv1",)
    assert plan.precision("conv2") == "int8" and plan.describe() == "--keep-float conv3 --int16-activations conv1"


def test_raising_and_lowering_layers():
    plan = PrecisionPlan().raised(["a", "b"], INT16).raised(["b"], FLOAT)
    assert dict(plan.layers) == {"a": INT16, "b": FLOAT}
    assert dict(plan.without(["a"]).layers) == {"b": FLOAT}
    assert not plan.raised(["a", "b"], "int8") and PrecisionPlan().describe() == "plain int8"


def test_a_plan_round_trips_through_a_file(tmp_path):
    plan = PrecisionPlan({"/model.22/cv2.0/conv/Conv": INT16, "head": FLOAT})
    plan.save(tmp_path / "plan.json")
    assert json.loads((tmp_path / "plan.json").read_text())["layers"]["head"] == FLOAT
    assert PrecisionPlan.load(tmp_path / "plan.json") == plan


@pytest.mark.parametrize("text", ['{"layers": {"a": "int4"}}', '{"layers": []}', '[1]', 'not json',
                                  '{"default": "float", "layers": {}}'])
def test_a_bad_plan_file_is_one_clear_error(tmp_path, text):
    (tmp_path / "plan.json").write_text(text)
    with pytest.raises(InputError) as raised:
        PrecisionPlan.load(tmp_path / "plan.json")
    assert str(tmp_path / "plan.json") in raised.value.message or "precision plan" in raised.value.message


def test_a_plan_file_nested_past_the_parser_is_one_clear_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InputError, match="nested too deeply"):
        PrecisionPlan.load(deep)


def test_a_flag_that_gives_a_plan_file_layer_another_precision_is_refused(tmp_path):
    from edgekit.errors import OptionError

    PrecisionPlan({"conv1": INT16, "head": FLOAT}).save(tmp_path / "plan.json")
    with pytest.raises(OptionError, match=r"conv1 \(--keep-float; the file says int16\)") as caught:
        PrecisionPlan.from_flags(floats=["conv1"], file=tmp_path / "plan.json")
    assert caught.value.exit_code == 2
    with pytest.raises(OptionError, match=r"head \(--int16-activations; the file says float\)"):
        PrecisionPlan.from_flags(int16=["head"], file=tmp_path / "plan.json")
    # agreeing flags and layers the file does not name add to it
    plan = PrecisionPlan.from_flags(floats=["head", "conv2"], file=tmp_path / "plan.json")
    assert dict(plan.layers) == {"conv1": INT16, "head": FLOAT, "conv2": FLOAT}
