"""Opening and archiving packages: a ``NAME.edgekit/`` directory or a ``NAME.ekpkg`` zip.

An archive is unpacked once into the cache (keyed by its sha256) and read from there.
Every artifact is checked against the manifest's sha256 before a runtime loads it.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from pathlib import Path, PurePosixPath
from typing import Any

from ..machine.cache import ensure_entry
from ..errors import CacheWarning, PackageError, StorageError, storage_error
from ..fsutil import publish, sha256_file, sha256_tree, staging_dir
from ..manifest import MANIFEST_NAME, Artifact, Manifest

MAX_UNPACKED_BYTES = 4 << 30
MAX_ENTRIES = 10_000


_URL = re.compile(r"^(https?|file)://", re.IGNORECASE)


def is_url(source: str | os.PathLike[str]) -> bool:
    return isinstance(source, str) and _URL.match(source) is not None


def local_path(source: str | os.PathLike[str]) -> Path:
    """Where a package source is on this machine: the one place every command resolves one. An
    ``http(s)://``/``file://`` URL is fetched into the cache once (``cache.fetch``); a path is itself."""
    if is_url(source):
        from ..machine.cache import fetch

        return fetch(str(source))
    return Path(source)


def open_package(source: str | os.PathLike[str]) -> tuple[Path, Manifest]:
    """The package's root directory and its parsed manifest; ``source`` is a package directory,
    an ``.ekpkg`` archive or a URL of one (``local_path``)."""
    path = local_path(source)
    if not path.exists():
        raise PackageError(f"package {path} does not exist", hint="pass a NAME.edgekit directory or a NAME.ekpkg file")
    root = _unpack(path) if path.is_file() else path
    manifest_file = root / MANIFEST_NAME
    if not manifest_file.is_file():
        raise PackageError(
            f"{path} is not an edgekit package (no {MANIFEST_NAME})", hint="build one with `edgekit package`"
        )
    return root, Manifest.from_json(manifest_file.read_bytes())


STAMP_MIN_BYTES = 1 << 20  # smaller files hash faster than a stamp is read


def verified_artifact_path(root: Path, artifact: Artifact, use_stamps: bool = True) -> Path:
    """The artifact's path after checking that its bytes are the ones the manifest names.

    A file of a megabyte or more that this machine already hashed is not hashed again while
    its inode, size, modification and change times are the ones recorded then (``verified/``
    in the cache): any write to the file changes its change time, which a user cannot set.
    ``use_stamps=False`` (packages that must be signed) hashes every time."""
    path = root / artifact.path
    if not path.exists():
        raise PackageError(f"package is incomplete: {artifact.path} is missing", hint="copy or rebuild the package")
    stamped = use_stamps and path.is_file() and path.stat().st_size >= STAMP_MIN_BYTES
    if stamped and _stamp(path) == _read_stamp(path, artifact.sha256):
        return path
    actual = sha256_tree(path)
    if actual != artifact.sha256:
        raise PackageError(
            f"{artifact.path} does not match the manifest (sha256 {actual[:12]}..., expected "
            f"{artifact.sha256[:12]}...): the package is corrupt or was modified",
            hint="copy the package again from its source, or rebuild it",
        )
    if stamped:
        _write_stamp(path, actual)
    return path


def _stamp(path: Path) -> dict[str, int]:
    info = path.stat()
    return {"dev": info.st_dev, "ino": info.st_ino, "size": info.st_size, "mtime_ns": info.st_mtime_ns,
            "ctime_ns": info.st_ctime_ns}


def _stamp_path(path: Path) -> Path:
    from ..machine.cache import entry_path
    from ..fsutil import sha256_hex

    return entry_path("verified", sha256_hex(str(path.resolve()).encode())[:40] + ".json")


def _read_stamp(path: Path, sha256: str) -> dict[str, int] | None:
    import json

    try:
        record = json.loads(_stamp_path(path).read_text())
    except (OSError, ValueError):
        return None
    return record.get("stat") if isinstance(record, dict) and record.get("sha256") == sha256 else None


def _write_stamp(path: Path, sha256: str) -> None:
    """Best effort: a cache that cannot be written costs the next load a hash, nothing else."""
    import json

    from ..fsutil import write_text_atomic

    target = _stamp_path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, json.dumps({"sha256": sha256, "stat": _stamp(path)}))
    except OSError:
        pass


def write_archive(package_dir: Path, archive: Path, replace: bool = False) -> None:
    """Zip a package directory into ``archive`` (written under a temp name, then renamed)."""
    import zipfile

    with staging_dir(archive) as tmp:
        staged = tmp / archive.name
        with zipfile.ZipFile(staged, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for file in sorted(p for p in package_dir.rglob("*") if p.is_file()):
                zf.write(file, file.relative_to(package_dir).as_posix())
        publish(staged, archive, replace=replace)


def unpacked_entry(archive: Path) -> Path:
    """The archive unpacked in the cache (once; keyed by the archive's sha256)."""
    import zipfile

    try:
        is_zip = zipfile.is_zipfile(archive)
    except OSError as exc:
        raise PackageError(f"cannot read {archive} ({exc.strerror})") from None
    if not is_zip:
        raise PackageError(f"{archive} is not an edgekit package (not a directory or a .ekpkg zip)")

    return ensure_entry("packages", sha256_file(archive), lambda work: extract_archive(archive, work),
                        lambda entry: (entry / MANIFEST_NAME).is_file())


def extract_archive(archive: Path, work: Path) -> None:
    """Unpack ``archive`` into ``work`` after checking every member name and the manifest.

    A manifest that fails its checks is refused before anything is written. Disk failures
    (full, read-only) propagate as ``OSError`` so the caller can unpack elsewhere.
    """
    import zipfile
    import zlib

    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            _check_members(members, archive)
            if MANIFEST_NAME not in zf.namelist():
                raise PackageError(f"{archive} is not an edgekit package (no {MANIFEST_NAME} inside)")
            Manifest.from_json(zf.read(MANIFEST_NAME))  # refused here, before unpacking
            work.mkdir(parents=True)
            for member in members:
                zf.extract(member, work)
    except PackageError:
        raise
    except OSError as exc:
        if storage_error(exc) is not None:
            raise
        raise PackageError(f"{archive} is a corrupt archive ({type(exc).__name__}: {exc})",
                           hint="copy or rebuild the package") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError,
            struct.error, UnicodeDecodeError, RuntimeError, IndexError) as exc:
        raise PackageError(f"{archive} is a corrupt archive ({type(exc).__name__}: {exc})",
                           hint="copy or rebuild the package") from None


def unpacked_exists(archive: Path) -> bool:
    """Whether the archive is already unpacked in the cache (a cache hit for the next open)."""
    from ..machine.cache import entry_path

    try:
        return (entry_path("packages", sha256_file(archive)) / MANIFEST_NAME).is_file()
    except OSError:
        return False


def _unpack(archive: Path) -> Path:
    """The archive unpacked in the cache, or in a temporary directory when the cache cannot be
    written (full SD card, read-only mount): the package itself is fine, so the device runs it."""
    try:
        return unpacked_entry(archive)
    except OSError as exc:
        problem = storage_error(exc)
        if problem is None:
            raise
        import warnings

        from ..machine.cache import cache_root, describe_space

        warnings.warn(CacheWarning(
            f"the cache at {cache_root()} cannot be used ({problem.message}; {describe_space(cache_root())}): "
            f"unpacking {archive.name} to a temporary directory for this run"
        ), stacklevel=3)
        return _unpack_to_temp(archive)


def _unpack_to_temp(archive: Path) -> Path:
    import atexit
    import shutil
    import tempfile

    try:
        root = Path(tempfile.mkdtemp(prefix="edgekit-unpacked-"))
    except OSError as exc:
        raise (storage_error(exc) or exc) from None
    atexit.register(shutil.rmtree, root, True)  # runtimes hold the artifact open/mapped, not the path
    try:
        extract_archive(archive, root / "package")
    except OSError as exc:
        shutil.rmtree(root, ignore_errors=True)
        found = storage_error(exc)
        if found is None:
            raise
        raise StorageError(f"cannot unpack {archive.name}: both the cache and the temporary directory fail "
                           f"({found.message})",
                           hint="free space on the device, set EDGEKIT_CACHE_DIR to a writable disk, or copy the "
                                "package as a NAME.edgekit directory (it needs no unpacking)") from None
    return root / "package"


def _check_members(members: list[Any], archive: Path) -> None:
    if len(members) > MAX_ENTRIES:
        raise PackageError(f"{archive} has {len(members)} entries (limit {MAX_ENTRIES})")
    total = 0
    seen: set[str] = set()
    for member in members:
        if not member.filename or member.filename in (".", "/") or "\0" in member.filename:
            raise PackageError(f"{archive} contains an entry with an empty or invalid name: refusing to unpack")
        name = PurePosixPath(member.filename)
        if name.is_absolute() or ".." in name.parts or "\\" in member.filename:
            raise PackageError(f"{archive} contains an unsafe path {member.filename!r}: refusing to unpack")
        kind = stat.S_IFMT(member.external_attr >> 16)  # 0: no type recorded (many zip tools)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise PackageError(f"{archive} contains a link or special file {member.filename!r}: refusing to unpack")
        if member.filename in seen:
            raise PackageError(f"{archive} contains {member.filename!r} twice: refusing to unpack")
        seen.add(member.filename)
        total += member.file_size
        if total > MAX_UNPACKED_BYTES:
            raise PackageError(f"{archive} unpacks to more than {MAX_UNPACKED_BYTES >> 20} MiB: refusing to unpack")


def sign_package(package: str | os.PathLike[str], key: str | os.PathLike[str]) -> str:
    """Sign a package directory in place, or rewrite an ``.ekpkg`` with the signature added."""
    import shutil
    import tempfile

    from .signing import sign_directory

    if is_url(package):
        raise PackageError(f"cannot sign {package}: signing rewrites the package, and a URL is not a local file",
                           hint="download the .ekpkg, sign the local copy, then publish it")
    path = Path(package)
    if path.is_dir():
        if not (path / MANIFEST_NAME).is_file():
            raise PackageError(f"{path} is not an edgekit package (no {MANIFEST_NAME})")
        return sign_directory(path, key)
    root, _ = open_package(path)
    with tempfile.TemporaryDirectory(prefix="edgekit-sign-") as tmp:
        copy = Path(tmp) / "package"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".last_used"))
        key_id = sign_directory(copy, key)
        write_archive(copy, path, replace=True)
    return key_id


def verify_package(package: str | os.PathLike[str], trusted: str | None, allow_unsigned: bool = False) -> list[str]:
    """Signature (trusted keys or any) and every artifact and companion file; report lines."""
    from .signing import SIGNATURE_NAME, trusted_keys, verify_signature

    root, manifest = open_package(package)
    lines = []
    if (root / SIGNATURE_NAME).is_file() or not allow_unsigned:
        signer = verify_signature(
            root, trusted_keys(trusted) if trusted else None,
            unsigned_hint="sign it with `edgekit sign PACKAGE --key KEY`, or pass --allow-unsigned to check only "
                          "its artifacts",
        )
        lines.append(f"signature: ok (key {signer}{', trusted' if trusted else ', not checked against trusted keys'})")
    else:
        lines.append("signature: none (unsigned package)")
    for artifact in manifest.artifacts:
        verified_artifact_path(root, artifact)
        for companion in artifact.companions:
            file = root / companion["path"]
            if not file.is_file() or sha256_file(file) != companion["sha256"]:
                raise PackageError(f"{companion['path']} does not match the manifest: the package is corrupt or modified")
        lines.append(f"{artifact.key}: {artifact.path} ok")
    from .stored_cards import stored_cards  # checked like the artifacts

    for entry, _ in zip(manifest.cards, stored_cards(root, manifest)):
        lines.append(f"card {entry['device']} · {entry['artifact']}: {entry['path']} ok")
    return lines
