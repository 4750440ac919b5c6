"""Opt-in prediction cache: identical inputs to the same model return the stored outputs.

Keyed by the artifact's sha256 and the exact bytes, dtype and shape of the preprocessed
input, so a changed model or input never hits. In memory: an LRU with a time-to-live;
optionally persisted in SQLite (shared by processes, e.g. repeated CLI runs). Hit and miss
counts are kept for reports and metrics.
"""

from __future__ import annotations

import hashlib
import io
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np


class PredictionCache:
    def __init__(self, max_entries: int = 1024, ttl_s: float | None = 3600.0, sqlite_path: str | Path | None = None):
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.hits = 0
        self.misses = 0
        self._memory: OrderedDict[str, tuple[float, np.ndarray]] = OrderedDict()
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
    def key(model_sha256: str, x: np.ndarray) -> str:
        digest = hashlib.sha256(model_sha256.encode())
        digest.update(f"{x.dtype.str}{x.shape}".encode())
        digest.update(np.ascontiguousarray(x).tobytes())
        return digest.hexdigest()

    def get(self, key: str) -> np.ndarray | None:
        now = time.time()
        with self._lock:
            found = self._memory.get(key)
            if found is not None and not self._expired(found[0], now):
                self._memory.move_to_end(key)
                self.hits += 1
                return found[1].copy()
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
                    value = np.load(io.BytesIO(row[1]), allow_pickle=False)
                    self._remember(key, row[0], value)
                    self.hits += 1
                    return value.copy()
            self.misses += 1
            return None

    def put(self, key: str, value: np.ndarray) -> None:
        now = time.time()
        with self._lock:
            self._remember(key, now, value.copy())
            if self._db is not None:
                import sqlite3

                buffer = io.BytesIO()
                np.save(buffer, value, allow_pickle=False)
                try:
                    self._db.execute(
                        "INSERT OR REPLACE INTO predictions (key, created, value) VALUES (?, ?, ?)",
                        (key, now, buffer.getvalue()),
                    )
                    if self.ttl_s is not None:
                        self._db.execute("DELETE FROM predictions WHERE created < ?", (now - self.ttl_s,))
                    self._db.commit()
                except (OSError, sqlite3.Error) as exc:  # disk filled up: keep predicting, from memory
                    self._give_up_persistence(exc)

    def _give_up_persistence(self, exc: BaseException) -> None:
        import warnings

        from .errors import CacheWarning

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
