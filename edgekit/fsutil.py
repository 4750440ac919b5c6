"""File helpers: hashing and atomic publication.

Nothing edgekit writes is ever visible half-written: files and whole directory trees are
built under a temporary name next to their destination and renamed into place.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20
# Below this many bytes Python's built-in SHA-256 is used: hashlib loads OpenSSL, which costs a
# device's cold start about as much as hashing 256 KiB with the built-in code.
OPENSSL_FROM_BYTES = 256 << 10


def new_sha256(data: bytes = b"", expected_bytes: int = 0) -> Any:
    """A SHA-256 hash object (``update``, ``hexdigest``): the same digest either way."""
    if expected_bytes < OPENSSL_FROM_BYTES:
        try:
            from _sha256 import sha256  # Python 3.11
        except ImportError:
            try:
                from _sha2 import sha256  # Python 3.12+
            except ImportError:  # a Python built without its own hashes
                from hashlib import sha256
    else:
        from hashlib import sha256
    return sha256(data)


def sha256_hex(data: bytes) -> str:
    return new_sha256(data, len(data)).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = new_sha256(expected_bytes=os.stat(path).st_size)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_tree(path: str | os.PathLike[str]) -> str:
    """Hash of a file, or of a directory's relative paths and contents (order-independent)."""
    root = Path(path)
    if root.is_file():
        return sha256_file(root)
    digest = new_sha256()
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

    target = Path(destination).absolute()  # absolute: converter children run in their own directory
    created = [d for d in (target.parent, *target.parent.parents) if not d.exists()]  # the -o folders made here
    target.parent.mkdir(parents=True, exist_ok=True)
    # the pid in the name lets a later process tell a crashed writer's leftovers from live work
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".partial", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the published tree gets normal permissions
    try:
        yield tmp
    finally:
        if tmp.exists():  # not published: nothing of this run is left, the folders it made included
            shutil.rmtree(tmp, ignore_errors=True)
            for folder in created:  # deepest first; one that holds anything else stays
                with contextlib.suppress(OSError):
                    folder.rmdir()


def ensure_writable(path: str | os.PathLike[str], what: str, is_dir: bool = False) -> None:
    """Prove that ``path`` (a file to write, or a directory with ``is_dir``) can be written, before
    long work starts: a read-only or full disk is then reported in a second, not after minutes.

    Nothing is created at ``path``: a probe file goes into the nearest existing directory.
    """
    import tempfile

    from .errors import StorageError, storage_error

    target = Path(path)
    directory = target if is_dir else target.parent
    probe_dir = directory
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if probe_dir.exists() and not probe_dir.is_dir():
        raise StorageError(f"cannot write {what} {path}: {probe_dir} is a file, not a directory",
                           hint=f"choose another {what} path")
    if target.is_dir() and not is_dir:
        raise StorageError(f"cannot write {what} {path}: it is a directory", hint=f"give a file path for the {what}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".edgekit-write-probe.", dir=probe_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        found = storage_error(exc)
        if found is None:
            raise
        raise StorageError(f"cannot write {what} {path}: {found.message.split(': ', 1)[-1]}",
                           hint=f"choose a writable location for the {what}" + (
                               " or free space on that disk" if exc.errno in (28, 122) else "")) from None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def staging_pid(name: str) -> int | None:
    """The writer's pid in a staging leftover's name: ``.NAME.<pid>.<random>.partial``."""
    fields = name.split(".")
    return int(fields[-3]) if len(fields) >= 4 and fields[-3].isdigit() else None


def remove_stale(
    directory: str | os.PathLike[str], pattern: str, pid_from: Callable[[str], int | None] = staging_pid
) -> int:
    """Delete leftovers matching ``pattern`` in ``directory`` whose writer process is gone
    (SIGKILL, power loss); a live writer's are kept."""
    import shutil

    folder = Path(directory)
    removed = 0
    if not folder.is_dir():
        return 0
    for leftover in folder.glob(pattern):
        pid = pid_from(leftover.name)
        if pid is not None and pid_alive(pid):
            continue
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                leftover.unlink()
        removed += 1
    return removed


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    """A temporary directory named with this process's pid, so a later run can remove it if
    this process is killed before its own cleanup (see ``remove_stale_temp``)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")).absolute()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def remove_stale_temp(prefix: str) -> int:
    """Remove ``$TMPDIR/PREFIX<pid>-*`` directories of processes that no longer exist."""
    import tempfile

    def pid_from(name: str) -> int | None:
        head = name[len(prefix):].split("-", 1)[0]
        return int(head) if head.isdigit() else os.getpid()  # not ours to judge: treated as live

    return remove_stale(tempfile.gettempdir(), f"{prefix}*", pid_from)


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
