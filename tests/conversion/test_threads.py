"""EDGEKIT_THREADS caps the packager's converter children and validation runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgekit.conversion import threads, worker
from edgekit.errors import OptionError

# not tests.conftest's: a child importing this module for its step must not run the suite's
# conftest, which sets the xdist worker's thread counts at import
ROOT = Path(__file__).resolve().parents[2]


def thread_pools_seen() -> dict[str, object]:
    """Child side: what the child's environment and its PyTorch say about their threads."""
    import torch

    return {"omp": os.environ.get("OMP_NUM_THREADS"), "tf": os.environ.get("TF_NUM_INTRAOP_THREADS"),
            "torch": torch.get_num_threads()}


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_without_a_cap_a_child_keeps_every_core(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    assert threads.cap() is None and threads.child_env() == {}
    seen = worker.call(thread_pools_seen, what="reading thread pools")
    assert seen["omp"] is None and seen["tf"] is None
    assert seen["torch"] > 1 or (os.cpu_count() or 1) == 1  # PyTorch's own default: a pool per core


def test_a_cap_reaches_the_native_pools_of_a_converter_child(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(threads.ENV, "1")
    seen = worker.call(thread_pools_seen, what="reading thread pools")
    assert seen == {"omp": "1", "tf": "1", "torch": 1}


@pytest.mark.parametrize("value", ["0", "-2", "all", "1.5"])
def test_a_malformed_cap_is_named_with_its_fix(monkeypatch, value):
    monkeypatch.setenv(threads.ENV, value)
    with pytest.raises(OptionError) as info:
        threads.cap()
    assert threads.ENV in info.value.message and repr(value) in info.value.message
    assert "whole number" in info.value.hint


def test_a_malformed_cap_stops_packaging_before_the_model_loads(monkeypatch, tmp_path):
    from tests.conftest import CALIBRATION, DIGITS_MODEL, edgekit_cli

    monkeypatch.setenv(threads.ENV, "many")
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "--format", "onnx", "-o", tmp_path / "out")
    assert result.returncode == 2
    assert "EDGEKIT_THREADS='many' is not a thread count" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out" / "digits.edgekit").exists()


def test_a_librarys_own_thread_variable_outranks_the_cap(monkeypatch):
    monkeypatch.setenv(threads.ENV, "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    env = threads.child_env()
    assert env["OMP_NUM_THREADS"] == "3" and env["MKL_NUM_THREADS"] == "2"
