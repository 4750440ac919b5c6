"""Compiled copies a runtime keeps for one artifact on one device, sealed with their hashes.

A compiled entry (``cache/compiled/<key>/``) holds what a runtime made from an artifact so the
next load skips the work: ONNX Runtime's optimized graph, TensorRT engines, OpenVINO's compiled
blob. The runtime that reads them back trusts them as it trusts the artifact, but nothing
checked them: a blob truncated on a full disk, or edited, was loaded as it was (or refused by
the runtime on every load, never replaced). So every file is sealed (``edgekit-seal.json``,
its sha256 per file) when it is written, checked before a load and by ``edgekit cache verify``,
and a bad entry is emptied so the next load compiles again.

A file the seal does not list (a TensorRT engine built at the first inference, after the load
sealed the entry) is only checked for content: a runtime writes such files whole.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from ..fsutil import sha256_file, write_text_atomic

SEAL_NAME = "edgekit-seal.json"


def _files(directory: Path) -> dict[str, Path]:
    """Every compiled file below ``directory`` by relative path (not the seal, not the cache's
    use stamp or a writer's partial file: their names start with a dot)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != SEAL_NAME and not path.name.startswith("."):  # stamps, partial writes
            found[path.relative_to(directory).as_posix()] = path
    return found


def seal(directory: str | os.PathLike[str], only: list[str] | None = None) -> None:
    """Record the hash of every file now in ``directory`` (``only``: of these relative paths; a
    file a runtime rewrites later, as TensorRT's timing cache, is left out). A cache that cannot
    be written costs the seal (the next load compiles again), never the model."""
    folder = Path(directory)
    try:
        hashes = {name: sha256_file(path) for name, path in _files(folder).items() if only is None or name in only}
        write_text_atomic(folder / SEAL_NAME, json.dumps({"sha256": hashes}, indent=1, sort_keys=True))
    except OSError:
        pass


def problem(directory: str | os.PathLike[str]) -> str | None:
    """Why the compiled files in ``directory`` cannot be trusted, or None."""
    folder = Path(directory)
    if not folder.is_dir():
        return None
    files = _files(folder)
    empty = [name for name, path in files.items() if path.stat().st_size == 0]
    if empty:
        return f"{empty[0]} is empty (0 bytes)"
    if not files:
        return None
    try:
        sealed = json.loads((folder / SEAL_NAME).read_text())["sha256"]
        if not isinstance(sealed, dict):
            raise TypeError("sha256 is not a table")
    except FileNotFoundError:
        return f"{next(iter(files))} has no seal (written by a load that did not finish, or by hand)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its seal {SEAL_NAME} is unreadable ({type(exc).__name__})"
    for name, digest in sealed.items():
        if name not in files:
            return f"{name} is missing"
        if sha256_file(files[name]) != digest:
            return f"{name} does not match the hash recorded when it was compiled"
    return None


@contextlib.contextmanager
def held(directory: str | os.PathLike[str]) -> Iterator[None]:
    """One load at a time checks, reads and writes this entry (another process's fresh files are
    never emptied as unsealed while it is still writing them)."""
    from . import cache

    with cache.locked(f"compiled-{Path(directory).name}"):
        yield


def heal(directory: str | os.PathLike[str]) -> str | None:
    """Empty ``directory`` when its compiled files cannot be trusted; why, or None when they can."""
    issue = problem(directory)
    if issue is not None:
        clear(directory)
    return issue


def clear(directory: str | os.PathLike[str]) -> None:
    """Remove every compiled file (the entry stays, for the runtime to write into)."""
    import shutil

    folder = Path(directory)
    for path in list(folder.iterdir()) if folder.is_dir() else []:
        try:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        except OSError:
            pass
