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
