"""Storing latency cards in a package: ``cards/`` beside the artifacts, bound by the manifest.

A card measured on a device (``edgekit card``) travels with the package it measured: its JSON and
Markdown go under ``cards/``, and the manifest lists each with its sha256, one per device and
artifact (a newer card of the same device and artifact replaces the older). The manifest binds
the cards as it binds the artifacts, so a signed package's signature covers them: storing a card
in a signed package signs it again (``--sign KEY``) or is refused, never leaves a stale signature.
A card is stored only in the package holding the exact artifact it measured (its sha256).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import PackageError
from ..fsutil import sha256_file, write_bytes_atomic, write_text_atomic
from ..manifest import MANIFEST_NAME, Manifest
from ..device.package_io import is_url, open_package, write_archive
from ..device.stored_cards import CARDS_DIR



def store_cards(package: str | os.PathLike[str], cards: Iterable[Mapping[str, Any]],
                key: str | os.PathLike[str] | None = None) -> list[str]:
    """Add ``cards`` to ``package`` (a directory in place; an ``.ekpkg`` rewritten); a signed
    package is signed again with ``key``. Returns one line per stored card."""
    from ..device.signing import SIGNATURE_NAME, check_private_key

    if is_url(package):
        raise PackageError(f"cannot store cards in {package}: storing rewrites the package, and a URL is not a local file",
                           hint="download the .ekpkg, store the cards in the local copy, then publish it")
    if key is not None:
        check_private_key(key)
    path = Path(package)
    root, manifest = open_package(path)
    cards = list(cards)
    for card in cards:
        _check_belongs(card, manifest, path)
    if (root / SIGNATURE_NAME).is_file() and key is None:
        raise PackageError(f"package {path} is signed: storing a card changes its manifest.json, which would void the "
                           "signature", hint="pass --sign KEY to sign it again (devices must trust that key)")
    if path.is_dir():
        return _store_in(path, manifest, cards, key)
    with tempfile.TemporaryDirectory(prefix="edgekit-cards-") as tmp:
        copy = Path(tmp) / "package"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".last_used"))
        lines = _store_in(copy, manifest, cards, key)
        write_archive(copy, path, replace=True)
    return lines


def _check_belongs(card: Mapping[str, Any], manifest: Manifest, package: Path) -> None:
    """A card is stored only with the package and artifact it measured."""
    name, artifact = card["model"]["name"], card["artifact"]
    if name != manifest.name:
        raise PackageError(f"the card of model {name!r} does not belong to package {manifest.name!r} ({package})",
                           hint="store each card in the package it was measured from")
    entry = next((a for a in manifest.artifacts if a.key == artifact["key"]), None)
    if entry is None or artifact.get("sha256") != entry.sha256:
        said = (f"package {manifest.name!r} has no artifact {artifact['key']!r}" if entry is None else
                f"package {manifest.name!r} holds another build of {artifact['key']!r} (its sha256 differs)")
        raise PackageError(f"the card of {name} · {artifact['key']} cannot be stored: {said}",
                           hint="measure the card again from this package (edgekit card PACKAGE --eval DATA --store)")


def _store_in(root: Path, manifest: Manifest, cards: list[Mapping[str, Any]], key: Any) -> list[str]:
    """Card files first, then the manifest listing them, then its signature: a reader never finds
    a manifest naming a card file that is not there yet."""
    from .card import card_name, markdown

    entries = {(e["device"], e["artifact"]): e for e in manifest.cards}
    lines = []
    (root / CARDS_DIR).mkdir(exist_ok=True)
    for card in cards:
        stem = f"{CARDS_DIR}/{card_name(card)}"
        text, page = json.dumps(card, indent=1, allow_nan=False) + "\n", markdown(card)
        write_text_atomic(root / f"{stem}.json", text)
        write_text_atomic(root / f"{stem}.md", page)
        device, artifact = str(card["device"]["name"] or "device"), str(card["artifact"]["key"])
        replaced = (device, artifact) in entries
        entries[(device, artifact)] = {
            "device": device, "artifact": artifact, "created": str(card.get("created") or ""),
            "path": f"{stem}.json", "sha256": sha256_file(root / f"{stem}.json"),
            "markdown": f"{stem}.md", "markdown_sha256": sha256_file(root / f"{stem}.md")}
        lines.append(f"card {device} · {artifact}: {stem}.md{' (replaces the earlier card)' if replaced else ''}")
    _publish_manifest(root, sorted(entries.values(), key=lambda e: (e["artifact"], e["device"])), key)
    return lines


def _publish_manifest(root: Path, cards: list[dict[str, str]], key: Any) -> None:
    """The manifest with ``cards`` listed (every other key kept as written, a newer writer's too)."""
    from ..device.signing import SIGNATURE_NAME, signature_document

    document = json.loads((root / MANIFEST_NAME).read_bytes())
    document["cards"] = cards
    data = (json.dumps(document, indent=2, allow_nan=False) + "\n").encode()
    Manifest.from_json(data)  # what devices will read
    signature = signature_document(data, key) if key is not None else None
    write_bytes_atomic(root / MANIFEST_NAME, data)
    if signature is not None:
        write_text_atomic(root / SIGNATURE_NAME, signature[0])
