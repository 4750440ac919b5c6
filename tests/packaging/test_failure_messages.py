"""The failure message after --auto-fix names what is left to try, never what it just tried."""

from __future__ import annotations

from edgekit.formats.building import Fix, float_fix
from edgekit.packaging.gates import GateFailure, failure_hint, failure_message


def _failure() -> GateFailure:
    fixes = (float_fix("head"), Fix("--reduce-range", "reduce_range", True),
             Fix("--calibration-method percentile", "calibration_method", "percentile"))
    return GateFailure("onnx", "scores", "sqnr", "output 'scores': SQNR 12.0 dB < 20 dB", fixes)


def test_before_auto_fix_the_error_lists_every_fix_and_recommends_it():
    message, hint = failure_message([_failure()]), failure_hint()
    assert "(fix: --keep-float head or --reduce-range or --calibration-method percentile)" in message
    assert hint.startswith("without --no-auto-fix, edgekit searches")


def test_after_auto_fix_it_names_only_the_fixes_left_and_what_was_tried():
    tried = {"onnx": {"--keep-float head", "--calibration-method percentile"}}
    message, hint = failure_message([_failure()], tried), failure_hint(tried, {"onnx": 7})
    assert "(fix: --reduce-range)" in message and "--keep-float head" not in message
    assert "edgekit searches" not in hint and "already tried" in hint and "--keep-float head" in hint
    assert "7 layer precision plans" in hint
    everything = {"onnx": {"--keep-float head", "--reduce-range", "--calibration-method percentile"}}
    assert "(fix:" not in failure_message([_failure()], everything)


def test_when_the_search_did_not_run_the_hint_does_not_say_it_tried():
    hint = failure_hint({"tflite": set()}, {"tflite": 0})
    assert "already tried" not in hint and "the search did not run" in hint


def test_a_format_left_out_after_its_search_keeps_its_tries_and_says_what_was_tried(tmp_path):
    """A refused artifact left out of a partial package carries its search's tries (typed Trials
    since the search returns them) into its ``failed`` entry; they were copied as mappings."""
    from types import SimpleNamespace

    from edgekit.formats.plan import FLOAT, PrecisionPlan
    from edgekit.packaging.partial import leave_out
    from edgekit.packaging.search.trial import LAYERS, Trial

    tries = (Trial("--calibration-method percentile", before={"gates": {"scores sqnr": -8.0}}),
             Trial("--keep-float head", LAYERS, PrecisionPlan({"head": FLOAT}), after={"gates": {"scores sqnr": -2.0}}))
    artifact = SimpleNamespace(path="onnx/model.int8.onnx", companions=[])
    outcome = SimpleNamespace(name="onnx", built=SimpleNamespace(artifact=artifact), failures=(_failure(),), fixes=tries)
    failed = leave_out(outcome, tmp_path, searched=True)
    assert [t["change"] for t in failed.search] == ["--calibration-method percentile", "--keep-float head"]
    assert failed.search[1]["plan"] == {"head": "float"} and failed.search[1]["stage"] == LAYERS
    assert "left out of the package" in failed.error and "1 layer precision plan" in failed.hint
