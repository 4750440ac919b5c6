"""File hashing: the built-in SHA-256 (small inputs) and OpenSSL's (large) give the same digests."""

from __future__ import annotations

import hashlib
import os

import pytest

from edgekit.fsutil import OPENSSL_FROM_BYTES, new_sha256, sha256_file, sha256_hex, sha256_tree


@pytest.mark.parametrize("size", [0, 1, 1000, OPENSSL_FROM_BYTES - 1, OPENSSL_FROM_BYTES, 3 * (1 << 20) + 5])
def test_digests_equal_hashlib_on_both_sides_of_the_threshold(tmp_path, size):
    data = os.urandom(size)
    expected = hashlib.sha256(data).hexdigest()
    (tmp_path / "f.bin").write_bytes(data)
    assert sha256_file(tmp_path / "f.bin") == expected
    assert sha256_hex(data) == expected
    streamed = new_sha256(expected_bytes=size)
    for start in range(0, size, 4096):
        streamed.update(data[start:start + 4096])
    assert streamed.hexdigest() == expected


def test_a_tree_digest_names_every_file_and_its_bytes(tmp_path):
    (tmp_path / "t" / "sub").mkdir(parents=True)
    (tmp_path / "t" / "a.bin").write_bytes(b"a")
    (tmp_path / "t" / "sub" / "b.bin").write_bytes(b"b")
    first = sha256_tree(tmp_path / "t")
    (tmp_path / "t" / "sub" / "b.bin").write_bytes(b"c")
    assert sha256_tree(tmp_path / "t") != first
    (tmp_path / "t" / "sub" / "b.bin").write_bytes(b"b")
    assert sha256_tree(tmp_path / "t") == first
    (tmp_path / "t" / "sub" / "b.bin").rename(tmp_path / "t" / "sub" / "c.bin")
    assert sha256_tree(tmp_path / "t") != first


def test_a_failed_write_leaves_no_output_folder_it_created(tmp_path):
    """A failed package left the empty -o folder (and its parents) it had created."""
    from edgekit.fsutil import staging_dir

    destination = tmp_path / "new" / "out" / "model.edgekit"
    with pytest.raises(RuntimeError):
        with staging_dir(destination) as staged:
            (staged / "manifest.json").write_text("{}")
            raise RuntimeError("the build failed")
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "other.txt").write_text("mine")
    with pytest.raises(RuntimeError):
        with staging_dir(tmp_path / "kept" / "model.edgekit"):
            raise RuntimeError("the build failed")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["other.txt"]  # a folder it did not make stays
    with staging_dir(destination) as staged:  # published: the folders stay
        staged.rename(destination)
    assert destination.is_dir()


def test_a_full_destination_disk_is_named_not_the_copys_source():
    """shutil's copy of a finished file out of $TMPDIR into -o names the source first and the
    destination second; a full -o disk was reported as a full $TMPDIR."""
    import errno

    from edgekit.errors import storage_error

    found = storage_error(OSError(errno.ENOSPC, "No space left on device", "/tmp/edgekit-x/ort/model.ort", None,
                                  "/data/out/.pkg.partial/onnx/model.ort"))
    assert "/data/out/.pkg.partial/onnx/model.ort" in found.message and "/tmp/" not in found.message
    assert "/data/out/" in found.hint
    plain = storage_error(OSError(errno.ENOSPC, "No space left on device", "/data/out/manifest.json"))
    assert "/data/out/manifest.json" in plain.message
