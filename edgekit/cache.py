"""Content-addressed local cache (unpacked ``.ekpkg`` packages for now).

Entries are keyed by the sha256 of what they were made from and published by rename, so a
reader never sees a half-written entry, and two writers of one entry both end with a
complete copy. ``EDGEKIT_CACHE_DIR`` overrides the platform's user cache directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    override = os.environ.get("EDGEKIT_CACHE_DIR")
    if override:
        return Path(override)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("edgekit", appauthor=False))


def entry_path(kind: str, key: str) -> Path:
    return cache_root() / kind / key
