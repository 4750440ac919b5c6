"""Reading latency card files (``bench/card.py`` writes them): the schema and version this edgekit
reads, checked before a card is tabled, stored or verified; below ``device/``'s package checks."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import EdgekitError


SCHEMA = "edgekit.card"
SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("card.schema.json")
CARD_SUFFIX = ".card.json"


class CardError(EdgekitError):
    default_hint = "pass card files written by `edgekit card PACKAGE --eval DATA -o DIR`"


def read_card(path: str | Path) -> dict[str, Any]:
    """A card file, checked: its schema, a version this edgekit reads, the fields a table needs."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CardError(f"{path}: not a readable card ({type(exc).__name__})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise CardError(f"{path}: not an edgekit card (schema {data.get('schema') if isinstance(data, dict) else None!r})")
    version = data.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise CardError(f"{path}: card schema_version {version!r} is not one this edgekit reads ({SCHEMA_VERSION})",
                        hint="upgrade edgekit where you compare cards")
    missing = [key for key in json.loads(SCHEMA_FILE.read_text())["required"] if key not in data]
    if missing:
        raise CardError(f"{path}: card without {', '.join(missing)}")
    return data


def card_files(paths: Iterable[str | Path]) -> list[Path]:
    """The ``*.card.json`` files among ``paths`` (files, or folders searched recursively)."""
    found: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*" + CARD_SUFFIX) if p.is_file()))
        elif path.name.endswith(CARD_SUFFIX) and path.is_file():
            found.append(path)
    return found
