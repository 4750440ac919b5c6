"""Package signatures: Ed25519 over ``manifest.json``, which binds every artifact by sha256.

``manifest.json.sig`` (JSON: algorithm, key id, public key, signature) sits next to the
manifest. Verifying a package = the signature matches the manifest's exact bytes, the key is
one of the trusted keys, and (at load) every artifact matches its sha256 in the manifest.
Keys are PEM files: ``KEY`` (private, mode 0600) and ``KEY.pub`` (public). A key id is the
first 16 hex digits of the sha256 of the raw public key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..errors import EdgekitError, PackageError
from ..fsutil import write_bytes_atomic, write_text_atomic
from ..manifest import MANIFEST_NAME

SIGNATURE_NAME = "manifest.json.sig"


class SignatureError(PackageError):
    default_hint = "get the package again from its publisher, or trust the key that signed it (--trusted-keys DIR)"


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise EdgekitError("package signing needs the 'cryptography' package",
                           hint="pip install 'edgekit[sign]'") from None
    return serialization, ed25519


def key_id(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:16]


def generate_keys(path: str | os.PathLike[str], force: bool = False) -> tuple[Path, Path, str]:
    serialization, ed25519 = _crypto()
    private_path = Path(path)
    public_path = private_path.with_name(private_path.name + ".pub")
    if (private_path.exists() or public_path.exists()) and not force:
        raise EdgekitError(f"{private_path} already exists", hint="choose another path or pass --force")
    from ..fsutil import ensure_writable

    ensure_writable(private_path, "key")  # never one half of a pair
    private_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # keys/mykey: a folder for keys
    private = ed25519.Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    write_bytes_atomic(private_path, pem)
    os.chmod(private_path, 0o600)
    public = private.public_key()
    write_bytes_atomic(public_path, public.public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo))
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return private_path, public_path, key_id(raw)


def _load_private(path: str | os.PathLike[str]) -> Any:
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise EdgekitError(f"cannot read signing key {path} ({exc})",
                           hint="create one with `edgekit keys generate KEY`") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise EdgekitError(f"{path} is not an Ed25519 private key", hint="create one with `edgekit keys generate KEY`")
    return key


def check_private_key(path: str | os.PathLike[str]) -> None:
    """Fail now, not after converting, when --sign names a key that cannot be used."""
    if not Path(path).is_file():
        raise EdgekitError(f"signing key {path} does not exist",
                           hint="create one with `edgekit keys generate KEY`, or check the --sign path")
    _load_private(path)


def sign_directory(root: str | os.PathLike[str], key_path: str | os.PathLike[str]) -> str:
    """Sign ``root/manifest.json``; returns the key id."""
    root = Path(root)
    text, signer = signature_document((root / MANIFEST_NAME).read_bytes(), key_path)
    write_text_atomic(root / SIGNATURE_NAME, text)
    return signer


def signature_document(manifest: bytes, key_path: str | os.PathLike[str]) -> tuple[str, str]:
    """``manifest.json.sig``'s text for the manifest bytes ``manifest``, and the key id: made before
    a changed manifest is written, so a key that cannot sign leaves the package as it was."""
    serialization, _ = _crypto()
    private = _load_private(key_path)
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    document = {
        "algorithm": "ed25519",
        "key_id": key_id(raw),
        "public_key": base64.b64encode(raw).decode(),
        "signed": MANIFEST_NAME,
        "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
        "signature": base64.b64encode(private.sign(manifest)).decode(),
    }
    return json.dumps(document, indent=1) + "\n", key_id(raw)


def trusted_keys(directory: str | os.PathLike[str]) -> dict[str, bytes]:
    """Raw public keys by key id from every ``*.pub`` PEM file in ``directory``."""
    serialization, ed25519 = _crypto()
    folder = Path(directory)
    if not folder.is_dir():
        raise EdgekitError(f"trusted keys directory {folder} does not exist",
                           hint="point --trusted-keys at a folder of KEY.pub files")
    keys = {}
    for file in sorted(folder.glob("*.pub")):  # a file that is no key is said: a trust list is never half read
        try:
            public = serialization.load_pem_public_key(file.read_bytes())
        except (ValueError, TypeError, OSError) as exc:
            raise EdgekitError(f"trusted key {file} is not a PEM public key ({type(exc).__name__})",
                               hint="keep only KEY.pub files written by `edgekit keys generate` in that folder") from None
        if not isinstance(public, ed25519.Ed25519PublicKey):
            raise EdgekitError(f"trusted key {file} is not an Ed25519 key (edgekit signs with Ed25519)",
                               hint="keep only KEY.pub files written by `edgekit keys generate` in that folder")
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        keys[key_id(raw)] = raw
    return keys


def verify_signature(
    root: str | os.PathLike[str],
    trusted: dict[str, bytes] | None,
    unsigned_hint: str = "sign it with `edgekit sign PACKAGE --key KEY`, or run without --require-signature",
) -> str:
    """Check ``manifest.json.sig``; the key id that signed. ``trusted=None`` accepts any key.

    ``unsigned_hint`` is the fix printed for an unsigned package: each command names its own flag.
    """
    _, ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature

    root = Path(root)
    signature_file = root / SIGNATURE_NAME
    if not signature_file.is_file():
        raise SignatureError(f"package {root.name} is not signed (no {SIGNATURE_NAME})",
                             hint=unsigned_hint)
    try:
        document = json.loads(signature_file.read_text())
        public_raw = base64.b64decode(document["public_key"], validate=True)
        signature = base64.b64decode(document["signature"], validate=True)
        if document.get("algorithm") != "ed25519":
            raise ValueError(f"algorithm {document.get('algorithm')!r}")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
        raise SignatureError(f"{SIGNATURE_NAME} of {root.name} is malformed ({exc})") from None
    signer = key_id(public_raw)
    if trusted is not None and signer not in trusted:
        raise SignatureError(f"package {root.name} is signed by key {signer}, which is not trusted here")
    manifest = (root / MANIFEST_NAME).read_bytes()
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(public_raw).verify(signature, manifest)
    except (InvalidSignature, ValueError):
        raise SignatureError(
            f"the signature of package {root.name} does not match its manifest.json: the manifest was modified "
            "after signing (or the signature was replaced)"
        ) from None
    return signer
