"""Typed messages across the converter process boundary: what a step's request and report carry
arrives as the types they declare, and a step of the wrong shape is refused before it runs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edgekit.conversion import worker
from edgekit.conversion.forms import ModelForm
from edgekit.conversion.messages import Message, request_and_report
from edgekit.errors import ConversionError
from tests.conftest import ROOT


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


@dataclass(frozen=True)
class Inner(Message):
    label: str
    ops: tuple[int, ...]


@dataclass(frozen=True)
class EchoRequest(Message):
    form: ModelForm
    names: tuple[str, ...]
    where: Path
    inner: Inner
    optional: Inner | None = None
    by_name: dict[str, Inner] | None = None
    record: Any = None


@dataclass(frozen=True)
class EchoReport(Message):
    received: EchoRequest
    kinds: dict[str, str]


def echo(request: EchoRequest) -> EchoReport:
    """Child side: what arrived, and the types it arrived as."""
    return EchoReport(received=request, kinds={
        "form": type(request.form).__name__, "names": type(request.names).__name__,
        "where": type(request.where).__name__, "inner": type(request.inner).__name__,
        "ops": type(request.inner.ops).__name__, "by_name": type((request.by_name or {})["a"]).__name__})


def refuses(request: EchoRequest) -> EchoReport:
    raise ConversionError("no such op: Foo", hint="keep it in float")


def untyped(model: str) -> dict:
    return {}


def _request() -> EchoRequest:
    return EchoRequest(form=ModelForm("onnx-graph", "/m.onnx", via="tf2onnx"), names=("x", "y"),
                       where=Path("/tmp/w"), inner=Inner("int8", (1, 2)), by_name={"a": Inner("f", ())},
                       record={"rows": [{"layer": "conv", "sqnr_db": None}]})


def test_a_request_and_its_report_cross_a_child_process_as_their_types():
    report = worker.convert(echo, _request(), what="echo")
    assert isinstance(report, EchoReport) and report.received == _request()
    assert report.kinds == {"form": "ModelForm", "names": "tuple", "where": "PosixPath", "inner": "Inner",
                            "ops": "tuple", "by_name": "Inner"}


def test_a_child_error_keeps_its_class_message_and_hint():
    with pytest.raises(ConversionError) as raised:
        worker.convert(refuses, _request(), what="refusing")
    assert raised.value.message == "no such op: Foo" and raised.value.hint == "keep it in float"


def test_a_step_not_of_the_request_report_shape_is_refused_before_any_child():
    with pytest.raises(TypeError, match="must take one request message"):
        request_and_report(lambda a, b: None)
    with pytest.raises(TypeError, match="request must be a Message"):
        worker.convert(untyped, _request(), what="untyped")
    with pytest.raises(TypeError, match="takes a EchoRequest"):
        worker.convert(echo, Inner("x", ()), what="wrong request")


def test_a_report_with_a_field_its_type_does_not_declare_is_refused():
    """A child of another version writing a field this parent does not know is an error, never a
    field silently dropped."""
    with pytest.raises(TypeError, match="unknown field"):
        Inner.from_json({"label": "x", "ops": [], "extra": 1})
