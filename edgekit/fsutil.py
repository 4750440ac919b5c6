"""File helpers: hashing and atomic publication.

Nothing edgekit writes is ever visible half-written: files and whole directory trees are
built under a temporary name next to their destination and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_tree(path: str | os.PathLike[str]) -> str:
    """Hash of a file, or of a directory's relative paths and contents (order-independent)."""
    root = Path(path)
    if root.is_file():
        return sha256_file(root)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        digest.update(sha256_file(file).encode() + b"\n")
    return digest.hexdigest()


def tree_bytes(path: str | os.PathLike[str]) -> int:
    root = Path(path)
    if root.is_file():
        return root.stat().st_size
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    import tempfile  # writers only: the device read path stays lean

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


@contextlib.contextmanager
def staging_dir(destination: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory beside ``destination``, removed unless published."""
    import shutil
    import tempfile

    target = Path(destination)
    target.parent.mkdir(parents=True, exist_ok=True)
    # the pid in the name lets a later process tell a crashed writer's leftovers from live work
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".partial", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the published tree gets normal permissions
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def publish(staged: Path, destination: str | os.PathLike[str], replace: bool = False) -> None:
    """Rename a staged file or directory to ``destination``.

    With ``replace`` an existing destination is first moved aside and removed only after the
    new one is in place, so a reader sees either the old tree or the new one.
    """
    import shutil
    import uuid

    target = Path(destination)
    aside: Path | None = None
    if target.exists() or target.is_symlink():
        if not replace:
            raise FileExistsError(str(target))
        aside = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(target, aside)
    try:
        os.replace(staged, target)
    except BaseException:
        if aside is not None:
            os.replace(aside, target)
        raise
    _fsync_dir(target.parent)
    if aside is not None:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            aside.unlink(missing_ok=True)
