"""The local cache: fetched packages, unpacked packages, compiled engines, predictions.

Layout below ``cache_root()`` (``EDGEKIT_CACHE_DIR``, else the platform's user cache dir)::

    blobs/SHA256.ekpkg       fetched archives, named by their content hash
    urls/SHA256(URL).json    which blob a URL gave (fetched once)
    packages/SHA256/         an archive unpacked once
    compiled/KEY/            per artifact x device x runtime version: ONNX Runtime optimized
                             model, TensorRT engine cache
    locks/                   one lock file per entry
    predictions.sqlite       opt-in persisted prediction cache

Every entry is built under a temporary name and renamed into place while holding the
entry's file lock, so two processes filling the same entry wait for each other and a
reader never sees half an entry. Each use touches the entry's ``.last_used`` stamp; when the
cache grows past its size cap (``EDGEKIT_CACHE_MAX_BYTES``, default 2 GiB) the least
recently used entries are evicted.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from ..errors import PackageError, StorageError, storage_error
from ..fsutil import OPENSSL_FROM_BYTES, new_sha256, publish, remove_stale, sha256_file, sha256_hex, staging_dir, tree_bytes
from ..logs import quiet

DEFAULT_MAX_BYTES = 2 << 30
KINDS = ("blobs", "packages", "compiled")
STAMP = ".last_used"
FETCH_TIMEOUT_S = 30.0


def cache_root() -> Path:
    override = os.environ.get("EDGEKIT_CACHE_DIR")
    if override:
        return Path(override)
    from .userdirs import user_cache_dir

    return user_cache_dir()


def describe_space(path: Path) -> str:
    """Free space on the disk holding ``path`` (its nearest existing parent), for error messages."""
    import shutil

    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return "free space unknown"
    return f"{free / (1 << 20):.1f} MiB free"


def max_bytes() -> int:
    value = os.environ.get("EDGEKIT_CACHE_MAX_BYTES")
    return int(value) if value else DEFAULT_MAX_BYTES


def entry_path(kind: str, key: str) -> Path:
    return cache_root() / kind / key


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """An exclusive inter-process lock for one cache entry (flock on POSIX, msvcrt on Windows)."""
    from filelock import FileLock

    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    log = quiet("edgekit.cache")
    if log is not None:
        log.debug("waiting for cache lock %s", name)
    with FileLock(str(lock_dir / f"{name}.lock")):
        yield


def touch(entry: Path) -> None:
    """Record a use of ``entry`` for least-recently-used eviction."""
    stamp = entry / STAMP if entry.is_dir() else entry.with_name(entry.name + STAMP)
    with contextlib.suppress(OSError):
        stamp.touch()


def last_used(entry: Path) -> float:
    stamp = entry / STAMP if entry.is_dir() else entry.with_name(entry.name + STAMP)
    for path in (stamp, entry):
        with contextlib.suppress(OSError):
            return path.stat().st_mtime
    return 0.0


def ensure_entry(kind: str, key: str, build: Callable[[Path], None], valid: Callable[[Path], bool]) -> Path:
    """The entry ``kind/key``, built by ``build(tmp_path)`` unless a valid one exists.

    An existing entry that fails ``valid`` (corrupted on disk) is removed and rebuilt.
    """
    target = entry_path(kind, key)
    if target.exists() and valid(target):
        touch(target)
        return target
    with locked(f"{kind}-{key}"):
        if target.exists():
            if valid(target):
                touch(target)
                return target
            remove(target)
        remove_stale_partials(target.parent)
        with staging_dir(target) as tmp:
            work = tmp / "entry"
            build(work)
            publish(work, target)
    touch(target)
    evict(keep={target})
    return target


def remove_stale_partials(directory: Path) -> int:
    """Delete staging leftovers of writers that died (power loss, SIGKILL); live writers' are kept."""
    return remove_stale(directory, ".*.partial")


def remove(entry: Path) -> None:
    import shutil

    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        entry.unlink(missing_ok=True)
    entry.with_name(entry.name + STAMP).unlink(missing_ok=True)


class Entry(NamedTuple):
    kind: str
    key: str
    path: Path
    bytes: int
    last_used: float


def entries() -> list[Entry]:
    found = []
    for kind in KINDS:
        directory = cache_root() / kind
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            if path.name.startswith(".") or path.name.endswith(STAMP):
                continue  # staging directories and stamps
            found.append(Entry(kind, path.name, path, tree_bytes(path), last_used(path)))
    return found


def evict(keep: set[Path] | None = None, limit: int | None = None) -> list[Entry]:
    """Remove least-recently-used entries until the cache fits ``limit`` bytes."""
    limit = max_bytes() if limit is None else limit
    current = sorted(entries(), key=lambda e: e.last_used)
    total = sum(e.bytes for e in current)
    removed = []
    for entry in current:
        if total <= limit:
            break
        if keep and entry.path in keep:
            continue
        with locked(f"{entry.kind}-{entry.key}"):
            remove(entry.path)
        total -= entry.bytes
        removed.append(entry)
    return removed


def clear() -> int:
    removed = 0
    for entry in entries():
        with locked(f"{entry.kind}-{entry.key}"):
            remove(entry.path)
        removed += 1
    with contextlib.suppress(FileNotFoundError):
        (cache_root() / "predictions.sqlite").unlink()
    return removed


# --- fetching ------------------------------------------------------------------------------


def fetch(url: str, refresh: bool = False) -> Path:
    """An ``http(s)://`` or ``file://`` ``.ekpkg`` in the cache, downloaded once.

    The download goes to a temporary file and is renamed to ``blobs/SHA256.ekpkg`` only when
    complete; a failed fetch leaves the cache as it was.
    """
    record = entry_path("urls", sha256_hex(url.encode()) + ".json")
    if not refresh and record.is_file():
        with contextlib.suppress(ValueError, OSError, KeyError):
            digest = json.loads(record.read_text())["sha256"]
            blob = entry_path("blobs", f"{digest}.ekpkg")
            if blob.is_file() and sha256_file(blob) == digest:
                touch(blob)
                return blob
    blobs = cache_root() / "blobs"
    try:
        blobs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cache_storage_error(exc, url) from None
    remove_stale_partials(blobs)  # a killed download's partial file
    with staging_dir(blobs / "download") as tmp:
        part = tmp / "download.part"
        digest = _download(url, part)
        blob = entry_path("blobs", f"{digest}.ekpkg")
        with locked(f"blobs-{digest}"):
            if not blob.is_file() or sha256_file(blob) != digest:
                os.replace(part, blob)
    record.parent.mkdir(parents=True, exist_ok=True)
    from ..fsutil import write_text_atomic

    write_text_atomic(record, json.dumps({"url": url, "sha256": digest, "fetched": time.time()}))
    touch(blob)
    evict(keep={blob})
    return blob


def _cache_storage_error(exc: OSError, url: str) -> StorageError:
    found = storage_error(exc)
    reason = found.message if found else str(exc)
    return StorageError(
        f"cannot store {url} in the cache at {cache_root()} ({reason}; {describe_space(cache_root())})",
        hint="free space there, or set EDGEKIT_CACHE_DIR to a writable disk, or copy the .ekpkg to the device "
             "and pass its path",
    )


def _download(url: str, destination: Path) -> str:
    import urllib.error  # imported here: urllib costs 20 ms of every cold start otherwise
    import urllib.request

    digest = new_sha256(expected_bytes=OPENSSL_FROM_BYTES)
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response, open(destination, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        if not isinstance(exc, urllib.error.URLError) and storage_error(exc) is not None:
            raise _cache_storage_error(exc, url) from None
        reason = getattr(exc, "reason", exc)
        raise PackageError(
            f"cannot fetch {url}: {reason}", hint="check the URL and the network; the cache was not changed"
        ) from None
    except ValueError as exc:
        reason = getattr(exc, "reason", exc)
        raise PackageError(
            f"cannot fetch {url}: {reason}", hint="check the URL and the network; the cache was not changed"
        ) from None
    return digest.hexdigest()
