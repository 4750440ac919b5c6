"""Device profiles parsed once and kept in the cache: a start parses no TOML, and an edited,
added or removed profile is never read stale."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from edgekit.device.devices import load_profiles
from edgekit.errors import EdgekitError
from edgekit.device.profile_store import CACHE_NAME
from tests.conftest import ROOT

PROFILE = 'name = "board"\npriority = {priority}\n[detect]\narch = ["aarch64"]\n[runtime]\nthreads = 2\n'


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_second_start_reads_the_parsed_profiles_without_importing_tomllib(cache_dir):
    code = ("import sys, json; from edgekit.device.devices import load_profiles; p = load_profiles(); "
            "print(json.dumps(['tomllib' in sys.modules, sorted(p), p['x86-cpu'].builds('onnx'), p['rpi5'].prefer]))")
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(cache_dir)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                                      env=env, check=True).stdout) for _ in range(2)]
    assert runs[0][0] is True and runs[1][0] is False  # parsed, then read from the cache
    assert runs[0][1:] == runs[1][1:] and "rpi4" in runs[1][1]
    assert (cache_dir / CACHE_NAME).is_file()


def test_an_edit_within_one_timestamp_tick_is_seen(tmp_path, cache_dir):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    file = profiles / "board.toml"
    file.write_text(PROFILE.format(priority=10))
    assert load_profiles([profiles])["board"].priority == 10
    stat = file.stat()
    file.write_text(PROFILE.format(priority=20))  # same size, and the same modification time below
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file.stat().st_size == stat.st_size
    assert load_profiles([profiles])["board"].priority == 20


def test_added_and_removed_profiles_are_seen(tmp_path, cache_dir):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "a.toml").write_text('name = "a"\n')
    assert set(load_profiles([profiles])) == {"a"}
    (profiles / "b.toml").write_text('name = "b"\n')
    assert set(load_profiles([profiles])) == {"a", "b"}
    (profiles / "a.toml").unlink()
    assert set(load_profiles([profiles])) == {"b"}


def test_a_corrupt_or_unwritable_cache_costs_only_the_parse(tmp_path, cache_dir):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "board.toml").write_text(PROFILE.format(priority=7))
    cache_dir.mkdir()
    (cache_dir / CACHE_NAME).write_text('{"edgekit": "0", "sources": [')  # torn by hand
    assert load_profiles([profiles])["board"].priority == 7
    assert json.loads((cache_dir / CACHE_NAME).read_text())["tables"][0]["priority"] == 7  # rewritten whole
    (cache_dir / CACHE_NAME).unlink()
    (cache_dir / CACHE_NAME).mkdir()  # cannot be written as a file
    assert load_profiles([profiles])["board"].priority == 7


def test_a_broken_profile_is_never_served_from_the_cache(tmp_path, cache_dir):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    file = profiles / "board.toml"
    file.write_text(PROFILE.format(priority=10))
    load_profiles([profiles])
    file.write_text("name = [unclosed")
    with pytest.raises(EdgekitError, match="board.toml is not valid TOML"):
        load_profiles([profiles])


def test_an_edited_cache_file_is_not_trusted_and_is_healed(tmp_path, cache_dir, capsys):
    """profiles.json with its parsed table edited (priority 10 -> 99) was read as it was until the
    cache was cleared; the stored texts and tables are bound by a hash, and `cache verify` parses
    the texts again."""
    from tests.conftest import run_cli

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "board.toml").write_text(PROFILE.format(priority=10))
    assert load_profiles([profiles])["board"].priority == 10
    stored = cache_dir / CACHE_NAME
    edited = json.loads(stored.read_text())
    edited["tables"][0]["priority"] = 99
    stored.write_text(json.dumps(edited))
    assert load_profiles([profiles])["board"].priority == 10  # parsed again ...
    assert json.loads(stored.read_text())["tables"][0]["priority"] == 10  # ... and stored whole again
    edited = json.loads(stored.read_text())
    edited["tables"][0]["priority"] = 99
    stored.write_text(json.dumps(edited))
    code, out, _ = run_cli(capsys, "cache", "verify")
    assert code == 0 and f"removed {CACHE_NAME}: its tables or texts were changed" in out
    assert not stored.exists()
