"""SIGKILL a process at random points while it fills the cache: nothing partial is ever served."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from edgekit.machine import cache
from edgekit.device.cache_verify import problem, verify_all
from edgekit.device.package_io import open_package
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

_WRITER = """
import os, random, shutil, sys, zipfile
from pathlib import Path
from edgekit.device.package_io import unpacked_entry, write_archive
source, work = Path(sys.argv[1]), Path(sys.argv[2])
rng = random.Random(os.getpid())
while True:  # new content each time, so every round writes a new cache entry
    copy = work / f"pkg{rng.randrange(10**9)}"
    shutil.copytree(source, copy)
    (copy / "noise.bin").write_bytes(os.urandom(rng.randint(1, 4 << 20)))
    archive = work / f"{copy.name}.ekpkg"
    write_archive(copy, archive)
    unpacked_entry(archive)
    shutil.rmtree(copy)
    archive.unlink()
"""


def test_killed_writers_never_leave_a_servable_partial_entry(digits_package, tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(cache_dir))
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    rng = random.Random(0)
    kills = 0
    for round_ in range(12):
        work = tmp_path / f"w{round_}"
        work.mkdir()
        writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(digits_package), str(work)], env=env,
                                    stderr=subprocess.DEVNULL) for _ in range(2)]  # two writers at once
        time.sleep(rng.uniform(0.3, 2.0))
        for writer in writers:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
            kills += 1
        entries = [e for e in cache.entries() if e.kind == "packages"]
        for entry in entries:  # every visible entry is complete and matches its manifest
            assert problem(entry) is None, entry.key
            root, manifest = open_package(entry.path)
            assert manifest.name == "digits"
    leftovers = list((cache_dir / "packages").glob(".*.partial")) if (cache_dir / "packages").exists() else []
    assert verify_all() == []  # removes the dead writers' staging leftovers
    assert not list((cache_dir / "packages").glob(".*.partial"))
    assert kills == 24
    print(f"{kills} kills, {len(entries)} complete entries, {len(leftovers)} stale partials cleaned")
