"""One converter child for a run of steps: the same answers and errors as a child per step."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

from edgekit.conversion import worker, worker_reuse
from edgekit.errors import ConversionError, EdgekitError
from tests.conftest import ROOT
from tests.conversion.test_worker import fails_like_the_tflite_converter


def where_am_i(tag: str) -> dict[str, object]:
    """The child's pid, working directory and temp folder, and a file it leaves in that folder."""
    scratch = Path(tempfile.gettempdir())
    (scratch / f"{tag}.tmp").write_text(tag)
    return {"pid": os.getpid(), "cwd": os.getcwd(), "tmp": str(scratch), "leftovers": sorted(os.listdir(scratch))}


def refuses(text: str) -> None:
    raise EdgekitError(text, hint="a fix")


def exits_hard() -> None:
    os._exit(3)


def sleeps(seconds: float) -> None:
    import time

    time.sleep(seconds)


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_steps_in_a_reusing_block_share_one_child_each_with_its_own_folders():
    with worker_reuse.reusing():
        first = worker.call(where_am_i, what="a step", tag="first")
        second = worker.call(where_am_i, what="a step", tag="second")
    assert first["pid"] == second["pid"] != os.getpid()
    assert first["cwd"] != second["cwd"] and first["tmp"] != second["tmp"]
    assert second["leftovers"] == ["second.tmp"]  # a step never sees the one before's scratch files
    assert not Path(first["cwd"]).exists()  # removed with its step, as for a fresh child


def test_outside_a_block_every_step_gets_its_own_child():
    assert worker.call(where_am_i, what="a step", tag="a")["pid"] != worker.call(where_am_i, what="a step", tag="b")["pid"]


def test_errors_keep_their_class_text_and_native_cause_and_the_child_goes_on():
    with worker_reuse.reusing():
        with pytest.raises(EdgekitError, match="the input is wrong") as info:
            worker.call(refuses, what="a step", text="the input is wrong")
        assert info.value.hint == "a fix"
        with pytest.raises(ConversionError) as native:
            worker.call(fails_like_the_tflite_converter, what="TFLite conversion")
        assert "same scale constraint" in native.value.message
        before = worker.call(where_am_i, what="a step", tag="x")["pid"]
        assert worker.call(where_am_i, what="a step", tag="y")["pid"] == before


def test_a_child_that_dies_is_a_named_crash_and_the_next_step_gets_a_new_one():
    with worker_reuse.reusing():
        pid = worker.call(where_am_i, what="a step", tag="a")["pid"]
        with pytest.raises(ConversionError, match="a step crashed: the converter process exited with 3"):
            worker.call(exits_hard, what="a step")
        assert worker.call(where_am_i, what="a step", tag="b")["pid"] != pid


def test_a_step_past_its_timeout_ends_the_child(monkeypatch):
    """Ended at its deadline: a child busy in its step never reads the end of its stdin, so a grace
    period for it to exit was only time lost (a --timeout of 5 s took 15)."""
    monkeypatch.setattr(worker, "EXIT_GRACE_S", 60.0)
    with worker_reuse.reusing():
        started = time.monotonic()
        with pytest.raises(ConversionError, match="did not finish within 1 s"):
            worker.call(sleeps, what="a step", timeout=1, seconds=120)
        assert time.monotonic() - started < 30  # not the 60 s grace
        assert worker.call(where_am_i, what="a step", tag="after")["pid"]


def test_a_child_is_replaced_after_max_steps(monkeypatch):
    monkeypatch.setattr(worker_reuse, "MAX_STEPS", 2)
    with worker_reuse.reusing():
        pids = [worker.call(where_am_i, what="a step", tag=str(i))["pid"] for i in range(3)]
    assert pids[0] == pids[1] != pids[2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child's memory is read from /proc (Linux)")
def test_a_child_holding_too_much_memory_is_replaced(monkeypatch):
    monkeypatch.setattr(worker_reuse, "MAX_CHILD_RSS", 1024)  # any Python process holds more
    with worker_reuse.reusing():
        pids = [worker.call(where_am_i, what="a step", tag=str(i))["pid"] for i in range(2)]
    assert pids[0] != pids[1]


def test_a_step_asked_under_a_changed_environment_gets_a_child_started_under_it(monkeypatch):
    """A block held open across runs (the suite holds one per process) must not answer a run with
    a child started under another run's settings (a PYTHONPATH, a thread count)."""
    with worker_reuse.reusing():
        first = worker.call(where_am_i, what="a step", tag="a")["pid"]
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        second = worker.call(where_am_i, what="a step", tag="b")["pid"]
        third = worker.call(where_am_i, what="a step", tag="c")["pid"]
    assert first != second == third


def test_a_caller_that_restores_its_environment_finds_its_child_still_there(monkeypatch):
    """A caller (a test) that changes its environment for a while (a PYTHONPATH, a thread count) and
    then restores it: the child started before goes on with its converters imported instead of being
    started a third time; a third environment ends the least recently used child."""
    with worker_reuse.reusing():
        before = os.environ.get("OMP_NUM_THREADS")  # scripts/test.sh's workers set it
        home = worker.call(where_am_i, what="a step", tag="a")["pid"]
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        away = worker.call(where_am_i, what="a step", tag="b")["pid"]
        if before is None:
            monkeypatch.delenv("OMP_NUM_THREADS")
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", before)
        back = worker.call(where_am_i, what="a step", tag="c")["pid"]
        monkeypatch.setenv("OMP_NUM_THREADS", "5")
        third = worker.call(where_am_i, what="a step", tag="d")["pid"]
        pool = worker.reuse.pool
        alive = sorted(child.proc.pid for child in pool.children.values())
    assert home != away and back == home and third not in (home, away)
    assert alive == sorted([home, third])  # the child of OMP_NUM_THREADS=3 was the least recently used: ended


def test_a_changed_temporary_folder_keeps_the_child(monkeypatch, tmp_path):
    """Every step is given its own temporary folders: a caller's new TMPDIR (or the inductor cache
    folder torch sets in the parent) is no reason to start a child and import its converters again."""
    with worker_reuse.reusing():
        first = worker.call(where_am_i, what="a step", tag="a")
        monkeypatch.setenv("TMPDIR", str(tmp_path))
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
        second = worker.call(where_am_i, what="a step", tag="b")
    assert first["pid"] == second["pid"]


def test_a_variable_an_import_derives_from_the_installation_keeps_the_child(monkeypatch):
    """Loading ExecuTorch's runtime in the parent (a validation, a device run) sets OPENVINO_LIB_PATH
    to the installed openvino's library; the child's own import sets the same, so its imports stay."""
    monkeypatch.delenv("OPENVINO_LIB_PATH", raising=False)
    with worker_reuse.reusing():
        first = worker.call(where_am_i, what="a step", tag="a")["pid"]
        monkeypatch.setenv("OPENVINO_LIB_PATH", "/site-packages/openvino/libs/libopenvino_c.so")
        second = worker.call(where_am_i, what="a step", tag="b")["pid"]
    assert first == second
