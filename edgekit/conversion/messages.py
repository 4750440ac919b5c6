"""Typed messages across the converter process boundary.

A format's parent side builds a frozen request, its child side (``convert.py``) answers with a
frozen report; both are ``Message`` dataclasses, and JSON exists only inside ``worker.convert``.
The parent reads what the child found by attribute, so a field renamed on one side is a type
error on the other, not a ``KeyError`` at run time in a child.

Fields may be JSON values, ``Path``, tuples, lists and dicts of them, optional values, other
messages, and classes with ``to_dict``/``from_dict`` (``ModelForm``). ``Any`` passes unchanged:
it marks a record the parent stores without reading it (a per-layer report written to details).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

M = TypeVar("M", bound="Message")


@dataclasses.dataclass(frozen=True)
class Message:
    """A frozen request or report of one converter step."""

    def to_json(self) -> dict[str, Any]:
        return {field.name: _encode(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_json(cls: type[M], data: Any) -> M:
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        hints = _hints(cls)
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise TypeError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")
        return cls(**{name: _decode(hints[name], value) for name, value in data.items()})


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """A message class's field types, resolved once per process (each child step decodes one)."""
    return typing.get_type_hints(cls)


@dataclasses.dataclass(frozen=True)
class PathRequest(Message):
    """A step that reads one file: an artifact or a graph, by its path."""

    path: str


def _encode(value: Any) -> Any:
    if isinstance(value, Message):
        return value.to_json()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict") and not isinstance(value, type):  # before tuple: a NamedTuple form
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode(hint: Any, value: Any) -> Any:
    """``value`` (from JSON) as the type ``hint`` names."""
    if hint is Any or value is None:
        return value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        others = [a for a in args if a is not type(None)]
        return _decode(others[0], value) if len(others) == 1 else value
    if origin in (list, tuple):
        items = [_decode(args[0] if args else Any, v) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        value_hint = args[1] if len(args) == 2 else Any
        return {k: _decode(value_hint, v) for k, v in value.items()}
    if isinstance(hint, type):
        if issubclass(hint, Message):
            return hint.from_json(value)
        if hint is Path:
            return Path(value)
        if hint is float:
            return float(value)
        if hasattr(hint, "from_dict"):
            return hint.from_dict(value)
    return value


@functools.lru_cache(maxsize=None)
def request_and_report(function: Any) -> tuple[type[Message], type[Message]]:
    """The request and report classes of a converter step ``convert(request) -> report``, read
    from its annotations; a step that is not of that shape is a programming error said here."""
    hints = typing.get_type_hints(function)
    report = hints.pop("return", None)
    if len(hints) != 1:
        raise TypeError(f"{function.__qualname__} must take one request message, takes {sorted(hints)}")
    (request,) = hints.values()
    for kind, cls in (("request", request), ("report", report)):
        if not (isinstance(cls, type) and issubclass(cls, Message)):
            raise TypeError(f"{function.__qualname__}'s {kind} must be a Message, is {cls!r}")
    return request, report
