"""The one rule for names that become part of a path: package names, report ids, file stems.

A name read from a manifest, an archive, a URL or a request is checked here before anything
joins it to a directory. The rule is the file-name rule every filesystem and Triton/KServe
accept: a letter or digit first, then letters, digits, ``.``, ``_`` or ``-``, at most 100
characters. That excludes ``/``, ``\\``, ``..``, a leading dot (hidden files and ``.``/``..``)
and control characters, so ``directory / name`` is always a direct child of ``directory``.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from .errors import EdgekitError

MAX_NAME_LENGTH = 100
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,%d}$" % (MAX_NAME_LENGTH - 1))
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")
_PACKAGE_SUFFIXES = (".ekpkg", ".edgekit", ".tflite", ".onnx", ".ort", ".mlpackage", ".zip")


def is_safe_name(name: object) -> bool:
    """Whether ``name`` can be joined to a directory without leaving it or hiding a file."""
    return isinstance(name, str) and bool(_SAFE_NAME.match(name)) and ".." not in name


def check_name(name: object, what: str, error: type[EdgekitError] = EdgekitError,
               hint: str = "use letters, digits, '.', '_' or '-' (a letter or digit first, at most 100)") -> str:
    """``name`` unchanged when it is safe; otherwise ``error`` naming ``what`` and the value."""
    if not is_safe_name(name):
        raise error(f"{what} {name!r} is not a safe name (it could escape its folder or hide a file)", hint=hint)
    assert isinstance(name, str)
    return name


def slug(text: str, fallback: str = "model") -> str:
    """A safe name made from arbitrary text (runs of other characters become one ``-``)."""
    cleaned = _UNSAFE_RUN.sub("-", text).replace("..", ".").strip("-._")[:MAX_NAME_LENGTH].strip("-._")
    return cleaned if is_safe_name(cleaned) else fallback


def name_from_source(source: str, fallback: str = "model") -> str:
    """The model name a path or URL stands for: its last path segment without the package
    suffix (``https://h/m/mobilenet.v2.ekpkg?sig=x`` -> ``mobilenet.v2``), made safe."""
    if "://" in source:
        parsed = urlparse(source)
        last = unquote(parsed.path.rstrip("/").rsplit("/", 1)[-1]) or parsed.netloc
    else:
        last = Path(source.rstrip("/\\")).name
    for suffix in _PACKAGE_SUFFIXES:
        if last.lower().endswith(suffix):
            last = last[: -len(suffix)]
            break
    return slug(last, fallback)


def kubernetes_name(name: str) -> str:
    """``name`` as a Kubernetes object name (RFC 1123 label: lowercase letters, digits and
    ``-``, a letter first, at most 63): what an InferenceService's ``metadata.name`` must be."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"m-{cleaned}".rstrip("-")
    return cleaned[:63].rstrip("-")
