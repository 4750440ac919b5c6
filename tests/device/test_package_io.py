"""Artifact verification: a large artifact this machine already hashed is not hashed again
while the file is untouched, and any write to it (even one that keeps its size and
modification time) makes the next load hash it again and refuse it."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from edgekit.device import package_io
from edgekit.errors import PackageError
from edgekit.manifest import Artifact


@pytest.fixture
def artifact(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    data = os.urandom(package_io.STAMP_MIN_BYTES + 1)
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model.onnx").write_bytes(data)
    return tmp_path, Artifact(format="onnx", path="onnx/model.onnx", sha256=hashlib.sha256(data).hexdigest(),
                              bytes=len(data))


def test_an_untouched_large_artifact_is_hashed_once(artifact, monkeypatch):
    root, entry = artifact
    hashed = []
    real = package_io.sha256_tree
    monkeypatch.setattr(package_io, "sha256_tree", lambda path: hashed.append(path) or real(path))
    for _ in range(3):
        assert package_io.verified_artifact_path(root, entry) == root / entry.path
    assert len(hashed) == 1
    package_io.verified_artifact_path(root, entry, use_stamps=False)  # signed packages: every time
    assert len(hashed) == 2


def test_a_write_that_keeps_size_and_mtime_is_still_caught(artifact):
    root, entry = artifact
    path = root / entry.path
    package_io.verified_artifact_path(root, entry)
    before = path.stat()
    time.sleep(0.05)  # file times tick with the kernel's clock (a few ms): a later write, as in life
    with open(path, "r+b") as handle:  # one byte changed in place, then the old mtime put back
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    with pytest.raises(PackageError, match="does not match the manifest"):
        package_io.verified_artifact_path(root, entry)


def test_every_command_reads_a_package_url_through_one_resolver(digits_package, tmp_path, monkeypatch):
    """A URL is fetched by ``local_path`` wherever a package is read: the sweep's artifact list,
    tuning's resolver, verify and the Triton export (the sweep used to hand the URL to the file
    system and report that it does not exist)."""
    from edgekit.bench.cli import runnable_artifacts
    from edgekit.export.triton import export_triton
    from edgekit.bench.tune import resolve_package

    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    archive = tmp_path / "digits.ekpkg"
    package_io.write_archive(digits_package, archive)
    url = archive.resolve().as_uri()
    assert runnable_artifacts(url, "auto") == runnable_artifacts(str(digits_package), "auto") != []
    root, manifest = resolve_package(url)
    assert manifest.name == package_io.open_package(digits_package)[1].name
    assert (tmp_path / "cache") in root.parents
    assert any(line.startswith("tflite") for line in package_io.verify_package(url, None, allow_unsigned=True))
    assert (export_triton(url, str(tmp_path / "repo"), backend="python") / "config.pbtxt").is_file()
    with pytest.raises(PackageError, match="a URL is not a local file"):
        package_io.sign_package(url, tmp_path / "key.pem")
