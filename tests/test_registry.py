"""The one registry idiom of formats, sources, kinds and steps (``edgekit.registry``)."""

from __future__ import annotations

import pytest

from edgekit.formats import FORMATS, register
from edgekit.kinds import KINDS
from edgekit.registry import Registry, discover, gather
from edgekit.sources import SOURCES
from edgekit.steps import STEPS


def test_every_axis_is_a_registry_in_its_fixed_order():
    assert all(isinstance(axis, Registry) for axis in (FORMATS, SOURCES, KINDS, STEPS))
    assert list(FORMATS)[:3] == ["tflite", "onnx", "coreml"]
    assert list(SOURCES)[:2] == ["tensorflow", "onnx"]
    assert list(STEPS) == ["onnx-to-torch -> torch-program", "onnx-to-torch -> torch-module", "tf2onnx -> onnx-graph"]


def test_a_name_registered_twice_is_an_error_and_remove_takes_it_out():
    parts: Registry[int] = Registry("widget")
    parts.add("a", 1)
    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        parts.add("a", 2)
    assert parts["a"] == 1 and len(parts) == 1 and dict(parts) == {"a": 1}
    with pytest.raises(ValueError, match="every widget needs a name"):
        parts.add("", 3)
    parts.remove("a")
    parts.remove("a")  # twice: no error
    assert "a" not in parts


def test_a_format_named_like_a_built_in_one_is_refused():
    with pytest.raises(ValueError, match="format 'onnx' is registered twice"):
        register(FORMATS["onnx"])
    assert list(FORMATS)[:3] == ["tflite", "onnx", "coreml"]


def test_discovery_puts_the_first_names_first_and_refuses_a_part_of_the_wrong_type(tmp_path, monkeypatch):
    package = tmp_path / "toyaxis"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, value in (("zeta", "PART = 'z'"), ("alpha", "PART = 'a'"), ("helper", "X = 1"), ("mid", "PART = 'm'")):
        (package / f"{name}.py").write_text(value)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = gather(Registry("toy part"), discover("toyaxis", str(package), folders=False, first=("zeta",)), "PART",
                   str, lambda part: part)
    assert list(found) == ["z", "a", "m"]
    (package / "wrong.py").write_text("PART = 3")
    with pytest.raises(TypeError, match="toyaxis.wrong.PART is not a builtins.str"):
        gather(Registry("toy part"), discover("toyaxis", str(package), folders=False), "PART", str, lambda p: p)
