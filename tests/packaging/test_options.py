"""Numeric options: one rule for the command line and the Python API (finite, in range)."""

from __future__ import annotations

import math

import pytest

from edgekit.errors import InputError
from edgekit.packaging.options import PackageOptions
from tests.conftest import run_cli


@pytest.mark.parametrize("keywords, named", [
    ({"min_sqnr_db": math.nan}, "--min-sqnr"),  # NaN compared false everywhere: the SQNR gate was off
    ({"min_sqnr_db": math.inf}, "--min-sqnr"),
    ({"max_accuracy_drop": -1.0}, "--max-accuracy-drop"),
    ({"max_accuracy_drop": math.nan}, "--max-accuracy-drop"),
    ({"samples": 0}, "--samples"),
    ({"samples": 2.5}, "--samples"),
    ({"samples": True}, "--samples"),
    ({"eval_samples": -3}, "--eval-samples"),
    ({"timeout_s": math.inf}, "--timeout"),
    ({"seed": "7"}, "--seed"),
])
def test_the_python_api_refuses_non_finite_or_out_of_range_numbers(keywords, named):
    with pytest.raises(InputError, match=named):
        PackageOptions("model.keras", "data.npz", "out", **keywords)


def test_format_options_given_as_keywords_are_checked_like_their_flags():
    for keywords in ({"calibration_method": "bogus"}, {"max_intermediate_outputs": 0},
                     {"reduce_range": "yes"}):
        options = PackageOptions.from_keywords(model="m", calibration="c", output_dir="o", **keywords)
        with pytest.raises(InputError):
            options.options_for_formats()


def test_the_python_api_takes_a_preprocessing_preset_and_the_plan_flags_by_their_python_names(tmp_path):
    """preprocessing="0..1" was refused with a hint about fixed_inputs; keep_float= was answered "did
    you mean also_float?"."""
    from edgekit.errors import OptionError
    from edgekit.formats.plan import FLOAT, INT16, PrecisionPlan

    options = PackageOptions.from_keywords(model="m", calibration="c", output_dir="o", preprocessing="0..1")
    assert options.preprocessing == {"preset": "0..1"}
    PrecisionPlan({"head": FLOAT}).save(tmp_path / "plan.json")
    options = PackageOptions.from_keywords(model="m", calibration="c", output_dir="o", keep_float="conv1",
                                           int16_activations=["conv2"], precision_plan=str(tmp_path / "plan.json"))
    assert dict(options.plan.layers) == {"head": FLOAT, "conv2": INT16, "conv1": FLOAT}
    options = PackageOptions.from_keywords(model="m", calibration="c", output_dir="o", plan={"head": "float"},
                                           keep_float=["conv1"])
    assert dict(options.plan.layers) == {"head": FLOAT, "conv1": FLOAT}
    with pytest.raises(OptionError, match=r"plan= and the flags disagree on head \(--int16-activations; plan= says"):
        PackageOptions.from_keywords(model="m", calibration="c", output_dir="o", plan={"head": "float"},
                                     int16_activations="head")
    with pytest.raises(InputError, match="keep_float= must be a layer name or a list of them"):
        PackageOptions.from_keywords(model="m", calibration="c", output_dir="o", keep_float=3)


@pytest.mark.parametrize("flag, value", [("--min-sqnr", "nan"), ("--min-sqnr", "inf"), ("--max-accuracy-drop", "nan"),
                                         ("--samples", "0")])
def test_the_command_line_refuses_the_same_numbers(capsys, tmp_path, flag, value):
    code, _, err = run_cli(capsys, "package", str(tmp_path / "m.keras"), "-c", str(tmp_path / "d.npz"), "-o",
                           str(tmp_path / "out"), flag, value)
    assert code == 2 and flag in err and "Traceback" not in err


def test_a_preset_beginning_with_a_dash_is_read_as_help_lists_it(capsys, tmp_path):
    """``--preprocessing -1..1`` (with a space) was an argparse error; only ``=`` worked."""
    from edgekit.cli.main import joined_dash_values

    assert joined_dash_values(["package", "m", "--preprocessing", "-1..1", "-o", "x"]) == [
        "package", "m", "--preprocessing=-1..1", "-o", "x"]
    code, _, err = run_cli(capsys, "package", str(tmp_path / "m.keras"), "-c", str(tmp_path / "d.npz"), "-o",
                           str(tmp_path / "out"), "--preprocessing", "-1..1")
    assert "expected one argument" not in err and "--preprocessing" not in err and code != 0  # the missing model


def test_a_non_finite_number_on_the_command_line_is_called_so(capsys, tmp_path):
    """--min-sqnr nan was told it "must be at least 0"."""
    code, _, err = run_cli(capsys, "package", "m.keras", "-c", "d.npz", "-o", tmp_path, "--min-sqnr", "nan")
    assert code == 2 and "--min-sqnr: must be a finite number, got nan" in err


@pytest.mark.parametrize("flags, named", [(("--also-float", "--no-also-float"), "--also-float and --no-also-float"),
                                          (("--no-auto-fix", "--auto-fix"), "--auto-fix and --no-auto-fix"),
                                          (("--allow-float-ops", "--full-integer"), "--allow-float-ops and --full-integer")])
def test_flags_that_say_opposite_things_are_a_usage_error(capsys, tmp_path, flags, named):
    """argparse took the last of the two silently."""
    code, _, err = run_cli(capsys, "package", "m.keras", "-c", "d.npz", "-o", tmp_path, *flags)
    assert code == 2 and f"{named} say opposite things" in err
