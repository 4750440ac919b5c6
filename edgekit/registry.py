"""One registry idiom for edgekit's four extension axes: formats, sources, output kinds and
conversion steps.

Each axis is a folder whose parts are found by themselves (a new format, source, kind or step is
one new module or folder, nothing else edited), held by name in a fixed order (the built-in parts
first, in the order given, then the others by name). Registering a name twice is an error, as in
coremltools' pass registry or NNCF's ``Registry``: a plugin that shadowed a built-in would
silently change what edgekit builds.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Named parts of one axis, read like a dict (iteration gives names, in registration order)."""

    def __init__(self, what: str) -> None:
        self.what = what  # "format", "source", ...: for the duplicate error
        self._parts: dict[str, T] = {}

    def add(self, name: str, part: T) -> T:
        if not name:
            raise ValueError(f"every {self.what} needs a name")
        if name in self._parts:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._parts[name] = part
        return part

    def remove(self, name: str) -> None:
        """Take a part out (tests and plugins that add one for a while); a missing name is no error."""
        self._parts.pop(name, None)

    def __getitem__(self, name: str) -> T:
        return self._parts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __repr__(self) -> str:
        return f"Registry({self.what}: {', '.join(self._parts)})"


def discover(package: str, folder: str, folders: bool, first: Sequence[str] = (),
             skip: Sequence[str] = ()) -> Iterator[ModuleType]:
    """Import each sub-package (a folder with ``__init__.py``: ``folders``) or each module (``NAME.py``)
    of ``package``, which lives in ``folder``: the names in ``first`` in that order, then the others by
    name. ``os.scandir``, not ``pkgutil``: its import costs every cold start a millisecond."""
    names = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if folders:
                name, found = entry.name, entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py"))
            else:
                name, found = entry.name[:-3], entry.name.endswith(".py") and entry.is_file()
            if found and name.isidentifier() and name != "__init__" and name not in skip:
                names.append(name)
    for name in sorted(names, key=lambda n: (first.index(n) if n in first else len(first), n)):
        yield importlib.import_module(f"{package}.{name}")


def gather(registry: Registry[T], modules: Iterator[ModuleType], attribute: str, kind: type,
           name: Callable[[T], str]) -> Registry[T]:
    """Add each module's ``attribute`` (one part, or a tuple of parts) to ``registry``; a module
    without it is a helper. A value of the wrong type is an error naming the module."""
    for module in modules:
        found = getattr(module, attribute, None)
        if found is None:
            continue
        for part in found if isinstance(found, tuple) else (found,):
            if not isinstance(part, kind):
                raise TypeError(f"{module.__name__}.{attribute} is not a {kind.__module__}.{kind.__name__}")
            registry.add(name(part), part)
    return registry


__all__ = ["Registry", "discover", "gather"]
