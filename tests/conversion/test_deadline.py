"""A format's share of --time-limit ends its child steps, with an error that ends the format only."""

from __future__ import annotations

import os
import time

import pytest

from edgekit.conversion import deadline, worker, worker_reuse
from edgekit.errors import ConversionError, TimeShareError
from edgekit.packaging.each_format import MIN_SHARE_S, format_share
from tests.conftest import ROOT
from tests.conversion.test_worker import blocks_forever


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.mark.parametrize("reuse", [False, True], ids=["fresh child", "reused child"])
def test_a_step_running_past_its_formats_share_is_ended_with_the_shares_error(reuse):
    started = time.monotonic()
    with pytest.raises(TimeShareError, match=r"tflite ran past its share .*2 s: a test.* other formats are built"):
        with deadline.within(2, "tflite", "a test"):
            if reuse:
                with worker_reuse.reusing():
                    worker.call(blocks_forever, what="TFLite conversion", timeout=600)
            else:
                worker.call(blocks_forever, what="TFLite conversion", timeout=600)
    assert time.monotonic() - started < 60


def test_a_step_started_after_the_share_ended_fails_at_once_and_its_own_timeout_stays_its_own():
    with deadline.within(0, "onnx", "a test"), pytest.raises(TimeShareError):
        worker.call(blocks_forever, what="ONNX quantization")
    with pytest.raises(ConversionError) as caught:  # no share: the step's own timeout, said as such
        worker.call(blocks_forever, what="loading the model", timeout=1)
    assert not isinstance(caught.value, TimeShareError) and "did not finish within 1 s" in caught.value.message
    assert deadline.left() is None


def test_each_format_may_use_what_is_left_less_the_floor_of_each_after_it():
    assert format_share(600, 60, 4) == pytest.approx(360)  # 540 left, 60 s kept for each of the 3 after it
    assert format_share(600, 60, 1) == pytest.approx(540)  # the last format: all that is left
    assert format_share(600, 590, 2) == MIN_SHARE_S  # a format never starts already ended
    assert format_share(0, 60, 4) is None  # --time-limit 0: no limit


def test_a_time_limit_below_the_floor_of_every_format_is_said():
    from edgekit.packaging.each_format import time_limit_below_floor

    said = time_limit_below_floor(30, 4)
    assert "--time-limit 30 s is less than 60 s for each of the 4 formats" in said and "up to 240 s" in said
    assert time_limit_below_floor(240, 4) == time_limit_below_floor(0, 4) == time_limit_below_floor(30, 1) == ""
