"""Device profiles as parsed data, kept in the local cache so that a start parses no TOML.

Every ``python -m edgekit.run`` reads every profile to recognise its device. Importing tomllib
and parsing the files cost about a fifth of what edgekit added to a cold start, so the parsed
tables are stored as JSON in the cache (``profiles.json``) beside each file's path and text: a
file added, removed or edited since (even within one timestamp tick) is parsed again. Reading
the few small files is cheap; parsing them was not. A cache that cannot be read or written
(read-only disk) only costs the parse.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..version import __version__
from ..errors import EdgekitError

CACHE_NAME = "profiles.json"


def read_profile_tables(files: list[Path]) -> list[dict[str, Any]]:
    """The TOML tables of ``files``, in order: from the cache when none changed, else parsed."""
    try:
        texts = [file.read_text() for file in files]
    except (OSError, UnicodeDecodeError):
        return [parse_profile(file) for file in files]  # says which file cannot be read
    sources = [[str(file), text] for file, text in zip(files, texts)]
    cached = _cached(sources)
    if cached is not None:
        return cached
    tables = [_parse_text(text, file) for file, text in zip(files, texts)]
    _store(sources, tables)
    return tables


def parse_profile(path: Path) -> dict[str, Any]:
    """One profile file's TOML tables, parsed now (an EdgekitError naming the file if it is not TOML)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise EdgekitError(f"device profile {path} is not valid TOML: {exc}", hint="fix or remove the file") from None
    return _parse_text(text, path)


def _parse_text(text: str, path: Path) -> dict[str, Any]:
    try:
        return _toml(text)
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise EdgekitError(f"device profile {path} is not valid TOML: {exc}", hint="fix or remove the file") from None


def _cache_file() -> Path:
    from ..machine.cache import cache_root

    return cache_root() / CACHE_NAME


def _cached(sources: list[list[str]]) -> list[dict[str, Any]] | None:
    try:
        stored = json.loads(_cache_file().read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(stored, dict) or stored.get("edgekit") != __version__ or stored.get("sources") != sources:
        return None
    tables = stored.get("tables")
    if not isinstance(tables, list) or len(tables) != len(sources) or not all(isinstance(t, dict) for t in tables):
        return None
    if stored.get("sha256") != _digest(sources, tables):
        return None  # edited or damaged since it was written: parsed again, and stored whole again
    return tables


def _digest(sources: list[list[str]], tables: list[dict[str, Any]]) -> str:
    """Binds the parsed tables to the texts they were parsed from: an edit to either shows."""
    from ..fsutil import sha256_hex

    return sha256_hex(json.dumps([sources, tables], sort_keys=True).encode())


def verify_cache() -> str | None:
    """``edgekit cache verify``: the stored tables parsed again from their stored texts; a cache
    that does not match them is removed (the next start parses and stores it again). Why, or None."""
    path = _cache_file()
    try:
        stored = json.loads(path.read_bytes())
        sources, tables = stored["sources"], stored["tables"]
        if stored.get("sha256") != _digest(sources, tables):
            issue = "its tables or texts were changed after it was written"
        elif [_toml(text) for _, text in sources] != tables:
            issue = "its tables differ from its profile texts parsed again"
        else:
            return None
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        issue = f"unreadable ({type(exc).__name__})"
    path.unlink(missing_ok=True)
    return issue


def _toml(text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10 (Jetson JetPack 6)
        import tomli as tomllib
    return tomllib.loads(text)


def _store(sources: list[list[str]], tables: list[dict[str, Any]]) -> None:
    try:
        text = json.dumps({"edgekit": __version__, "sources": sources, "tables": tables,
                           "sha256": _digest(sources, tables)})
    except (TypeError, ValueError):  # a TOML date or time has no JSON spelling: such files are parsed each time
        return
    from ..fsutil import write_text_atomic

    try:
        path = _cache_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    except OSError:  # read-only or full cache: the next start parses again
        pass
