"""The per-user cache and configuration folders, as platformdirs names them.

On Linux (every edge board) the rule is the XDG one, applied here without importing
platformdirs: its import is several milliseconds of a device's cold start. Elsewhere
platformdirs answers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP = "edgekit"


def user_cache_dir() -> Path:
    return _user_dir("XDG_CACHE_HOME", "~/.cache", "user_cache_dir")


def user_config_dir() -> Path:
    return _user_dir("XDG_CONFIG_HOME", "~/.config", "user_config_dir")


def _user_dir(variable: str, default: str, platformdirs_function: str) -> Path:
    if sys.platform.startswith("linux"):
        base = os.environ.get(variable, "").strip()  # unset or blank: the default, as platformdirs does
        return Path(base or os.path.expanduser(default)) / APP
    import platformdirs

    return Path(getattr(platformdirs, platformdirs_function)(APP, appauthor=False))
