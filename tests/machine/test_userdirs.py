"""The cache and configuration folders match platformdirs' (which the fast path replaces on Linux)."""

from __future__ import annotations

import platformdirs
import pytest

from edgekit.machine import userdirs


@pytest.mark.parametrize("value", [None, "", "   ", "/tmp/xdg-here"])
def test_user_dirs_are_platformdirs_dirs(monkeypatch, value):
    for variable in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)
    assert str(userdirs.user_cache_dir()) == platformdirs.user_cache_dir("edgekit", appauthor=False)
    assert str(userdirs.user_config_dir()) == platformdirs.user_config_dir("edgekit", appauthor=False)


def test_without_an_override_the_cache_and_the_profiles_live_in_the_users_folders(monkeypatch, tmp_path):
    """Every test run sets EDGEKIT_CACHE_DIR, so the default path of the cache and the profile
    folders was never taken here; a fresh install's first package took it (and failed when the
    folder reader moved without them)."""
    from edgekit.device.devices import profile_dirs
    from edgekit.machine.cache import cache_root

    monkeypatch.delenv("EDGEKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert cache_root() == tmp_path / "cache" / "edgekit"
    assert any(str(folder).startswith(str(tmp_path / "config")) for folder in profile_dirs())
