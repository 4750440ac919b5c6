"""The cache and configuration folders match platformdirs' (which the fast path replaces on Linux)."""

from __future__ import annotations

import platformdirs
import pytest

from edgekit.device import userdirs


@pytest.mark.parametrize("value", [None, "", "   ", "/tmp/xdg-here"])
def test_user_dirs_are_platformdirs_dirs(monkeypatch, value):
    for variable in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)
    assert str(userdirs.user_cache_dir()) == platformdirs.user_cache_dir("edgekit", appauthor=False)
    assert str(userdirs.user_config_dir()) == platformdirs.user_config_dir("edgekit", appauthor=False)
