"""Reading the latency cards a package holds (``package_cards.py`` stores them): each file
checked against its sha256 in the manifest before it is read or copied anywhere."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ..errors import PackageError
from ..fsutil import sha256_file
from ..manifest import MANIFEST_NAME, Manifest

CARDS_DIR = "cards"


def stored_cards(root: Path, manifest: Manifest) -> list[dict[str, Any]]:
    """The package's cards, each file checked against its sha256 in the manifest."""
    from .card_files import read_card

    found = []
    for entry in manifest.cards:
        for path, digest in ((entry["path"], entry["sha256"]), (entry["markdown"], entry["markdown_sha256"])):
            file = root / path
            if not file.is_file() or sha256_file(file) != digest:
                raise PackageError(f"{path} does not match the manifest: the package is corrupt or was modified",
                                   hint="copy the package again from its source")
        found.append(read_card(root / entry["path"]))
    return found


def is_package(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a package (a directory with a manifest, or an ``.ekpkg``), not a folder of cards."""
    path = Path(path)
    return (path.is_dir() and (path / MANIFEST_NAME).is_file()) or (path.is_file() and path.suffix == ".ekpkg")


def copy_cards(root: Path, manifest: Manifest, destination: Path) -> int:
    """The package's cards (checked) copied into ``destination``; how many."""
    if not manifest.cards:
        return 0
    stored_cards(root, manifest)
    destination.mkdir(parents=True, exist_ok=True)
    for entry in manifest.cards:
        for path in (entry["path"], entry["markdown"]):
            shutil.copyfile(root / path, destination / Path(path).name)
    return len(manifest.cards)
