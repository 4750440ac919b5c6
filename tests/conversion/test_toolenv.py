"""``python -m edgekit.conversion.toolenv NAME``: the environments scripts/test.sh creates early."""

from __future__ import annotations

import hashlib
import sys

from edgekit.conversion import toolenv


def test_an_unknown_environment_is_refused_with_the_known_ones(capsys):
    assert toolenv.main(["litert"]) == 2
    assert "no converter environment named 'litert' (known: litert-torch)" in capsys.readouterr().err


def test_a_ready_environment_is_named_without_installing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EDGEKIT_TOOLENV_DIR", str(tmp_path))
    tool = toolenv.LITERT_TORCH
    key = hashlib.sha256(f"{sys.version_info[:2]} {' '.join(tool.requirements)}".encode()).hexdigest()[:12]
    home = tmp_path / f"{tool.name}-py{sys.version_info[0]}{sys.version_info[1]}-{key}"
    home.mkdir()
    (home / ".edgekit-ready").write_text("ready\n")  # what a finished creation leaves
    assert toolenv.main(["litert-torch"]) == 0
    assert capsys.readouterr().out.strip() == f"litert-torch: {home / 'bin' / 'python'}"
