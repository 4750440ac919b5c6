"""The local cache: concurrent fetches, corruption detected and repaired, LRU eviction, URLs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import edgekit
from edgekit.machine import cache
from edgekit.device.cache_verify import verify_all
from edgekit.errors import PackageError
from edgekit.device.prediction_cache import PredictionCache
from tests.conftest import EVAL, ROOT, load_npz, run_cli


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


_FETCH = """
import sys
from edgekit.machine import cache
from edgekit.device.package_io import open_package
blob = cache.fetch(sys.argv[1])
root, manifest = open_package(blob)
print(blob, root, manifest.name)
"""


@pytest.mark.slow
def test_two_processes_fetching_the_same_package(digits_package, fresh_cache):
    url = digits_package.with_suffix(".ekpkg").resolve().as_uri()
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(fresh_cache)}
    procs = [subprocess.Popen([sys.executable, "-c", _FETCH, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=ROOT) for _ in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [r[1] for r in results]
    assert len({r[0] for r in results}) == 1  # same blob, same unpacked entry, same manifest
    blobs = [p for p in (fresh_cache / "blobs").iterdir() if p.suffix == ".ekpkg"]
    packages = [p for p in (fresh_cache / "packages").iterdir() if not p.name.startswith(".")]
    assert len(blobs) == 1 and len(packages) == 1
    assert not [p for p in (fresh_cache / "blobs").iterdir() if p.name.startswith(".")]  # no partial downloads


@pytest.mark.slow
def test_corrupted_cache_entry_is_detected_and_replaced(digits_package, fresh_cache):
    archive = digits_package.with_suffix(".ekpkg")
    x, _ = load_npz(EVAL)
    with edgekit.load(archive, artifact="tflite") as model:
        expected = model.predict(x[:3])
        cached = model.root
    artifact = cached / "tflite" / "model.int8.tflite"
    artifact.write_bytes(artifact.read_bytes()[:-10] + b"corrupted!")
    with edgekit.load(archive, artifact="tflite") as model:  # verification fails, the entry is unpacked again
        assert np.array_equal(model.predict(x[:3]), expected)
    assert verify_all() == []

    (cached / "tflite" / "model.int8.tflite").write_bytes(b"rot")
    bad = verify_all()
    assert [(e.kind, problem) for e, problem in bad] == [("packages", "tflite/model.int8.tflite does not match the manifest")]
    assert not cached.exists()


def test_eviction_removes_least_recently_used_first(fresh_cache, monkeypatch):
    def build(size: int):
        return lambda work: (work.mkdir(), (work / "data").write_bytes(b"x" * size))

    entries = [cache.ensure_entry("compiled", f"entry{i}", build(1000), lambda p: True) for i in range(4)]
    now = time.time()
    for age, entry in zip((400, 100, 300, 200), entries):  # entry0 oldest, then entry2, entry3, entry1
        os.utime(entry / cache.STAMP, (now - age, now - age))
    removed = cache.evict(limit=2100)
    assert [e.key for e in removed] == ["entry0", "entry2"]
    assert sorted(e.key for e in cache.entries()) == ["entry1", "entry3"]
    monkeypatch.setenv("EDGEKIT_CACHE_MAX_BYTES", "1500")
    cache.ensure_entry("compiled", "entry4", build(1000), lambda p: True)  # adding evicts down to the cap
    assert [e.key for e in cache.entries()] == ["entry4"]


def test_unreachable_url_is_a_clear_error_and_leaves_the_cache_alone(fresh_cache, tmp_path):
    with pytest.raises(PackageError, match="cannot fetch file://"):
        cache.fetch((tmp_path / "missing.ekpkg").as_uri())
    with pytest.raises(PackageError, match="cannot fetch http://127.0.0.1:9/"):
        cache.fetch("http://127.0.0.1:9/model.ekpkg")
    assert cache.entries() == []
    leftovers = list((fresh_cache / "blobs").iterdir()) if (fresh_cache / "blobs").exists() else []
    assert leftovers == []


def test_prediction_cache_lru_ttl_and_sqlite(tmp_path):
    memory = PredictionCache(max_entries=2, ttl_s=None)
    a, b, c = (np.full((1, 2), v, np.float32) for v in (1, 2, 3))
    for x in (a, b, c):
        memory.put(PredictionCache.key("m", x), x * 10)
    assert memory.get(PredictionCache.key("m", a)) is None  # evicted (LRU, 2 entries)
    assert np.array_equal(memory.get(PredictionCache.key("m", c)), c * 10)
    assert memory.get(PredictionCache.key("other-model", c)) is None
    assert memory.stats() == {"hits": 1, "misses": 2, "entries": 2}

    expiring = PredictionCache(ttl_s=0.0)
    expiring.put("k", a)
    time.sleep(0.01)
    assert expiring.get("k") is None

    db = tmp_path / "p.sqlite"
    first = PredictionCache(sqlite_path=db)
    first.put("k", a)
    first.close()
    second = PredictionCache(sqlite_path=db)  # another process, later
    assert np.array_equal(second.get("k"), a) and second.hits == 1


@pytest.mark.slow
def test_cache_commands(digits_package, fresh_cache, capsys):
    edgekit.load(digits_package.with_suffix(".ekpkg")).close()
    code, out, _ = run_cli(capsys, "cache", "ls")
    assert code == 0 and "packages" in out and "1 entries" in out
    code, out, _ = run_cli(capsys, "cache", "verify")
    assert code == 0 and "all entries verified" in out
    code, out, _ = run_cli(capsys, "cache", "clear")
    assert code == 0 and "removed 1 entries" in out
    assert cache.entries() == []


def _dead_pid() -> int:
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


@pytest.mark.slow
@pytest.mark.parametrize("cache_kind", ["readonly_dir", "full_dir"])
def test_an_unusable_cache_does_not_stop_the_device(digits_all_package, digits_package, tmp_path, request,
                                                    cache_kind):
    """A read-only or full cache: the archive is unpacked to a temporary directory, ONNX runs without a
    compiled copy, predictions are kept in memory; each is said once, and the answers are right."""
    from tests.conftest import device_cli

    unusable = request.getfixturevalue(cache_kind) / "cache"
    x, y = load_npz(EVAL)
    np.save(tmp_path / "three.npy", x[:3])
    env = {"EDGEKIT_CACHE_DIR": str(unusable)}
    archive = device_cli(digits_package.with_suffix(".ekpkg"), "-i", tmp_path / "three.npy", "--top-k", "1",
                         "--cache-predictions", env=env)
    assert archive.returncode == 0, archive.stderr
    assert "cannot be used" in archive.stderr and "temporary directory" in archive.stderr
    assert "internal error" not in archive.stderr and "corrupt" not in archive.stderr
    assert [line.split(": ")[1].split()[0] for line in archive.stdout.strip().splitlines()] == [str(v) for v in y[:3]]
    onnx = device_cli(digits_all_package, "--artifact", "onnx", "-i", tmp_path / "three.npy", "--top-k", "1", env=env)
    assert onnx.returncode == 0, onnx.stderr
    assert "running without a compiled-model cache" in onnx.stderr
    assert [line.split(": ")[1].split()[0] for line in onnx.stdout.strip().splitlines()] == [str(v) for v in y[:3]]


def test_a_truncated_compiled_onnx_copy_is_rebuilt(digits_all_package, fresh_cache):
    x, _ = load_npz(EVAL)
    with edgekit.load(digits_all_package, artifact="onnx") as model:
        expected = model.predict(x[:2])
    optimized = next(fresh_cache.glob("compiled/*/model.optimized.onnx"))
    optimized.write_bytes(optimized.read_bytes()[:100])  # the disk filled while it was written
    with edgekit.load(digits_all_package, artifact="onnx") as model:
        np.testing.assert_array_equal(model.predict(x[:2]), expected)
        assert not model.backend.optimized_from_cache
    assert optimized.stat().st_size > 100  # written again whole


def test_a_killed_downloads_partial_file_is_removed_by_the_next_fetch(digits_package, fresh_cache):
    blobs = fresh_cache / "blobs"
    blobs.mkdir(parents=True)
    stale = blobs / f".download.{_dead_pid()}.k2j4h6.partial"
    stale.mkdir()
    (stale / "download.part").write_bytes(b"half")
    live = blobs / f".download.{os.getpid()}.a1b2c3.partial"
    live.mkdir()
    cache.fetch(digits_package.with_suffix(".ekpkg").resolve().as_uri())
    assert not stale.exists() and live.exists()


def test_a_manifest_that_fails_its_checks_is_not_unpacked(tmp_path, fresh_cache):
    import json
    import zipfile

    from edgekit.device.package_io import open_package

    archive = tmp_path / "bad.ekpkg"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("manifest.json", json.dumps({"schema_version": 1, "name": "bad", "inputs": "nope"}))
        zf.writestr("tflite/model.int8.tflite", b"x" * 1000)
    with pytest.raises(PackageError, match="manifest"):
        open_package(archive)
    assert not list((fresh_cache / "packages").glob("*")) if (fresh_cache / "packages").exists() else True
    assert not any(p.name.endswith(".tflite") for p in fresh_cache.rglob("*")) if fresh_cache.exists() else True


def test_an_edited_compiled_onnx_copy_is_never_read(digits_all_package, fresh_cache, capsys):
    """The optimized graph kept for the next load was read back unchecked: an edited copy (valid
    ONNX, other weights) would have answered instead of the artifact. Its hash is checked first,
    and `cache verify` finds it (and a 0-byte file) too."""
    import onnx
    from onnx import numpy_helper

    x, _ = load_npz(EVAL)
    with edgekit.load(digits_all_package, artifact="onnx") as model:
        expected = model.predict(x[:2])
    optimized = next(fresh_cache.glob("compiled/*/model.optimized.onnx"))
    graph = onnx.load(str(optimized))
    weights = next(t for t in graph.graph.initializer if numpy_helper.to_array(t).dtype == np.float32
                   and numpy_helper.to_array(t).size > 16)
    weights.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weights) * 0, weights.name))
    onnx.save(graph, str(optimized))
    with edgekit.load(digits_all_package, artifact="onnx") as model:
        np.testing.assert_array_equal(model.predict(x[:2]), expected)
        assert not model.backend.optimized_from_cache
        assert "does not match the hash" in model.backend.describe()["compiled_cache_replaced"]
    with edgekit.load(digits_all_package, artifact="onnx") as model:
        assert model.backend.optimized_from_cache  # written and sealed again
    (optimized.parent / "engine.bin").write_bytes(b"")
    code, out, _ = run_cli(capsys, "cache", "verify")
    assert code == 0 and "engine.bin is empty (0 bytes)" in out and "1 bad entries removed" in out
    assert not optimized.exists()
