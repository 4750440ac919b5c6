"""Signed packages and tampering, refused by the runtime and the server; unsafe archives refused."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import edgekit
from edgekit.errors import EdgekitError, PackageError
from edgekit.device.package_io import open_package, verify_package, write_archive
from edgekit.device.signing import SignatureError, generate_keys, sign_directory
from tests.conftest import EVAL, ROOT, load_npz, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    base = tmp_path_factory.mktemp("keys")
    trusted = base / "trusted"
    trusted.mkdir()
    generate_keys(base / "publisher")
    shutil.copy(base / "publisher.pub", trusted / "publisher.pub")
    generate_keys(base / "stranger")
    return base, trusted


@pytest.fixture
def signed(digits_all_package, keys, tmp_path):
    base, _ = keys
    copy = tmp_path / "digits.edgekit"
    shutil.copytree(digits_all_package, copy)
    sign_directory(copy, base / "publisher")
    return copy


def load_signed(path, trusted):
    return edgekit.load(path, require_signature=True, trusted_keys=trusted, artifact="tflite")


def test_signed_package_loads_and_verifies(signed, keys, capsys):
    _, trusted = keys
    with load_signed(signed, trusted) as model:
        assert model.predict(load_npz(EVAL)[0][:2]).shape == (2, 10)
    lines = verify_package(signed, str(trusted))
    assert lines[0].startswith("signature: ok") and "trusted" in lines[0] and len(lines) == 11  # 10 artifacts
    code, out, _ = run_cli(capsys, "verify", signed, "--trusted-keys", trusted)
    assert code == 0 and "coreml: coreml/model.int8.mlpackage ok" in out


@pytest.mark.parametrize("artifact", ["tflite/model.int8.tflite", "onnx/model.int8.onnx", "onnx/model.int8.ort",
                                      "coreml/model.int8.mlpackage/Data/com.apple.CoreML/weights/weight.bin"])
def test_flipping_one_byte_of_any_artifact_is_refused(signed, keys, artifact):
    _, trusted = keys
    path = signed / artifact
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(PackageError, match="does not match the manifest"):
        verify_package(signed, str(trusted))
    if artifact.startswith("tflite"):
        with pytest.raises(PackageError, match="tflite/model.int8.tflite does not match the manifest"):
            load_signed(signed, trusted)


def test_modified_manifest_swapped_artifact_and_untrusted_signer_are_refused(signed, keys, tmp_path):
    base, trusted = keys
    manifest = signed / "manifest.json"
    original = manifest.read_bytes()
    manifest.write_bytes(original.replace(b'"digits"', b'"digitz"', 1))
    with pytest.raises(SignatureError, match="does not match its manifest.json"):
        load_signed(signed, trusted)
    manifest.write_bytes(original)

    other = tmp_path / "other.tflite"  # a different (valid) model in the artifact's place
    other.write_bytes((signed / "onnx" / "model.int8.ort").read_bytes())
    shutil.copy(other, signed / "tflite" / "model.int8.tflite")
    with pytest.raises(PackageError, match="does not match the manifest"):
        load_signed(signed, trusted)

    fresh = tmp_path / "resigned.edgekit"
    shutil.copytree(signed, fresh)
    sign_directory(fresh, base / "stranger")  # re-signed by a key the device does not trust
    with pytest.raises(SignatureError, match="not trusted here"):
        load_signed(fresh, trusted)
    (fresh / "manifest.json.sig").unlink()
    with pytest.raises(SignatureError, match="is not signed"):
        load_signed(fresh, trusted)
    with pytest.raises(EdgekitError, match="needs --trusted-keys"):
        edgekit.load(fresh, require_signature=True)


def test_server_refuses_to_serve_a_tampered_package(signed, keys):
    _, trusted = keys
    manifest = signed / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"digits"', b'"digitz"', 1))
    result = subprocess.run([sys.executable, "-m", "edgekit.cli", "serve", str(signed), "--require-signature",
                             "--trusted-keys", str(trusted), "--port", "0"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 1
    assert "does not match its manifest.json" in result.stderr and "Traceback" not in result.stderr


def test_packaging_with_sign_and_signing_an_archive(keys, tmp_path, capsys):
    base, trusted = keys
    from tests.conftest import CALIBRATION, DIGITS_MODEL

    code, _, err = run_cli(capsys, "package", DIGITS_MODEL, "--calibration", CALIBRATION, "-o", tmp_path,
                           "--sign", base / "publisher", "--archive")
    assert code == 0, err
    assert (tmp_path / "digits.edgekit" / "manifest.json.sig").is_file()
    edgekit.load(tmp_path / "digits.ekpkg", require_signature=True, trusted_keys=trusted).close()
    unsigned = tmp_path / "unsigned.ekpkg"
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "digits.edgekit", copy)
    (copy / "manifest.json.sig").unlink()
    write_archive(copy, unsigned)
    code, _, err = run_cli(capsys, "sign", unsigned, "--key", base / "stranger")
    assert code == 0, err
    with pytest.raises(SignatureError, match="not trusted here"):
        edgekit.load(unsigned, require_signature=True, trusted_keys=trusted)


def make_archive(path, entries):
    """entries: (name, data, mode or None)."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            if mode is not None:
                info.external_attr = mode << 16
            archive.writestr(info, data)
    return path


@pytest.mark.parametrize("entries, message", [
    ([("../escape.txt", b"x", None)], "unsafe path"),
    (([("/etc/evil", b"x", None)]), "unsafe path"),
    ([("link", b"/etc/passwd", stat.S_IFLNK | 0o777)], "link or special file"),
    ([("dev", b"", stat.S_IFCHR | 0o600)], "link or special file"),
    ([("a.txt", b"1", None), ("a.txt", b"2", None)], "twice"),
    ([("", b"x", None)], "empty or invalid name"),
])
def test_unsafe_archives_are_refused(tmp_path, entries, message):
    archive = make_archive(tmp_path / "bad.ekpkg", [("manifest.json", b"{}", None), *entries])
    with pytest.raises(PackageError, match=message):
        open_package(archive)


def test_zip_bombs_and_too_many_files_are_refused(tmp_path, monkeypatch):
    import edgekit.device.package_io as package_io

    monkeypatch.setattr(package_io, "MAX_UNPACKED_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.ekpkg"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", "{}")
        archive.writestr("zeros.bin", b"\0" * (4 << 20))  # 4 MiB of zeros compress to a few KiB
    assert bomb.stat().st_size < 64 << 10
    with pytest.raises(PackageError, match="unpacks to more than 1 MiB"):
        open_package(bomb)
    monkeypatch.setattr(package_io, "MAX_ENTRIES", 10)
    many = make_archive(tmp_path / "many.ekpkg", [(f"f{i}", b"", None) for i in range(11)])
    with pytest.raises(PackageError, match="11 entries"):
        open_package(many)


def test_files_not_in_the_manifest_are_never_loaded(digits_all_package, tmp_path):
    copy = tmp_path / "digits.edgekit"
    shutil.copytree(digits_all_package, copy)
    (copy / "tflite" / "evil.tflite").write_bytes(b"not a model")
    (copy / "payload.py").write_text("raise SystemExit('executed')")
    archive = tmp_path / "digits.ekpkg"
    write_archive(copy, archive)
    with edgekit.load(archive, artifact="tflite") as model:
        assert model.artifact.path == "tflite/model.int8.tflite"
        assert np.isfinite(model.predict(load_npz(EVAL)[0][:1])).all()


def test_a_trusted_keys_folder_holding_a_file_that_is_no_ed25519_key_is_refused(keys, tmp_path):
    """A garbage KEY.pub was skipped silently: the trust list was read half, and a package signed
    by the key meant to be there was then called untrusted."""
    from edgekit.device.signing import trusted_keys

    folder = tmp_path / "trusted"
    shutil.copytree(keys[1], folder)
    assert trusted_keys(folder)
    (folder / "broken.pub").write_text("not a key\n")
    with pytest.raises(EdgekitError, match=r"broken.pub is not a PEM public key"):
        trusted_keys(folder)
