"""Opt-in prediction cache: identical inputs to the same model return the stored outputs.

Keyed by the artifact's sha256 and the exact bytes, dtype and shape of the preprocessed
input, so a changed model or input never hits. In memory: an LRU with a time-to-live;
optionally persisted in SQLite (shared by processes, e.g. repeated CLI runs). Hit and miss
counts are kept for reports and metrics.
"""

from __future__ import annotations

import io
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ..fsutil import new_sha256


class PredictionCache:
    def __init__(self, max_entries: int = 1024, ttl_s: float | None = 3600.0, sqlite_path: str | Path | None = None):
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.hits = 0
        self.misses = 0
        self._memory: OrderedDict[str, tuple[float, np.ndarray]] = OrderedDict()
        import threading  # here: the runtime's cold start pays for it only when predictions are cached

        self._lock = threading.Lock()
        self._db: Any = None
        self._path = sqlite_path
        if sqlite_path is not None:
            import sqlite3  # only when persistence is asked for

            try:
                Path(sqlite_path).parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(str(sqlite_path), timeout=10, check_same_thread=False)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS predictions (key TEXT PRIMARY KEY, created REAL, value BLOB)"
                )
                self._db.commit()
            except (OSError, sqlite3.Error) as exc:
                self._give_up_persistence(exc)

    @staticmethod
    def key(model_sha256: str, x: np.ndarray | list[np.ndarray]) -> str:
        """Keyed by the model and the exact bytes, dtype and shape of every input array."""
        arrays = x if isinstance(x, list) else [x]
        digest = new_sha256(model_sha256.encode(), expected_bytes=sum(a.nbytes for a in arrays))
        for array in arrays:
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()

    def get(self, key: str) -> Any:
        """The stored outputs (an array, or a list of arrays, as put), copied; None on a miss."""
        now = time.time()
        with self._lock:
            found = self._memory.get(key)
            if found is not None and not self._expired(found[0], now):
                self._memory.move_to_end(key)
                self.hits += 1
                return _copy(found[1])
            if found is not None:
                del self._memory[key]
            row = None
            if self._db is not None:
                import sqlite3

                try:
                    row = self._db.execute("SELECT created, value FROM predictions WHERE key = ?", (key,)).fetchone()
                except sqlite3.Error as exc:  # a damaged database file: predict again instead
                    self._give_up_persistence(exc)
                if row is not None and not self._expired(row[0], now):
                    value = _decode(row[1])
                    self._remember(key, row[0], value)
                    self.hits += 1
                    return _copy(value)
            self.misses += 1
            return None

    def put(self, key: str, value: np.ndarray | list[np.ndarray]) -> None:
        now = time.time()
        with self._lock:
            self._remember(key, now, _copy(value))
            if self._db is not None:
                import sqlite3

                try:
                    self._db.execute(
                        "INSERT OR REPLACE INTO predictions (key, created, value) VALUES (?, ?, ?)",
                        (key, now, _encode(value)),
                    )
                    if self.ttl_s is not None:
                        self._db.execute("DELETE FROM predictions WHERE created < ?", (now - self.ttl_s,))
                    self._db.commit()
                except (OSError, sqlite3.Error) as exc:  # disk filled up: keep predicting, from memory
                    self._give_up_persistence(exc)

    def _give_up_persistence(self, exc: BaseException) -> None:
        import warnings

        from ..errors import CacheWarning

        if self._db is not None:
            try:
                self._db.close()
            except Exception:  # noqa: BLE001 - closing a broken connection: nothing more to learn
                pass
        self._db = None
        warnings.warn(CacheWarning(
            f"the prediction cache {self._path} cannot be written ({exc}): keeping predictions in memory only"
        ), stacklevel=3)

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._memory)}

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _expired(self, created: float, now: float) -> bool:
        return self.ttl_s is not None and now - created > self.ttl_s

    def _remember(self, key: str, created: float, value: np.ndarray) -> None:
        self._memory[key] = (created, value)
        self._memory.move_to_end(key)
        while len(self._memory) > self.max_entries:
            self._memory.popitem(last=False)


def _copy(value: Any) -> Any:
    return [v.copy() for v in value] if isinstance(value, list) else value.copy()


def _encode(value: Any) -> bytes:
    """Outputs as one .npz blob (a list keeps its order: out0, out1, ...)."""
    arrays = value if isinstance(value, list) else [value]
    buffer = io.BytesIO()
    np.savez(buffer, kind=np.array("list" if isinstance(value, list) else "array"),
             **{f"out{i}": a for i, a in enumerate(arrays)})
    return buffer.getvalue()


def _decode(blob: bytes) -> Any:
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as stored:
            if "kind" not in stored.files:  # a plain .npy from an older edgekit
                raise ValueError("not an npz")
            arrays = [stored[f"out{i}"] for i in range(len(stored.files) - 1)]
            return arrays if str(stored["kind"]) == "list" else arrays[0]
    except (ValueError, OSError):
        return np.load(io.BytesIO(blob), allow_pickle=False)
