"""``edgekit cache verify``: every cache entry checked against the hashes that name or describe it."""

from __future__ import annotations

from ..machine import cache
from ..errors import PackageError
from ..fsutil import sha256_file, sha256_tree
from ..manifest import MANIFEST_NAME, Manifest


def problem(entry: cache.Entry) -> str | None:
    """Why an entry is bad, or None when it checks out."""
    if entry.kind == "blobs":
        digest = entry.key.split(".")[0]
        return None if sha256_file(entry.path) == digest else "content does not match its sha256 name"
    if entry.kind == "packages":
        try:
            manifest = Manifest.from_json((entry.path / MANIFEST_NAME).read_bytes())
        except (OSError, PackageError) as exc:
            return f"manifest unreadable ({exc})"
        for artifact in manifest.artifacts:
            path = entry.path / artifact.path
            if not path.exists() or sha256_tree(path) != artifact.sha256:
                return f"{artifact.path} does not match the manifest"
            for companion in artifact.companions:
                file = entry.path / companion["path"]
                if not file.is_file() or sha256_file(file) != companion["sha256"]:
                    return f"{companion['path']} does not match the manifest"
    if entry.kind == "compiled":
        from ..machine.compiled_cache import problem as compiled_problem

        return compiled_problem(entry.path)
    return None


def verify_all() -> list[tuple[cache.Entry, str]]:
    for kind in cache.KINDS:
        cache.remove_stale_partials(cache.cache_root() / kind)
    bad = []
    for entry in cache.entries():
        with cache.locked(f"{entry.kind}-{entry.key}"):
            issue = problem(entry)
            if issue is not None:
                cache.remove(entry.path)
                bad.append((entry, issue))
    return bad
