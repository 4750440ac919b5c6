"""``python -m edgekit.conversion.toolenv NAME``: the environments scripts/test.sh creates early."""

from __future__ import annotations

from edgekit.conversion import toolenv


def test_an_unknown_environment_is_refused_with_the_known_ones(capsys):
    assert toolenv.main(["litert"]) == 2
    assert "no converter environment named 'litert' (known: litert-torch)" in capsys.readouterr().err


def test_a_ready_environment_is_named_without_installing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EDGEKIT_TOOLENV_DIR", str(tmp_path))
    home = toolenv.home_of(toolenv.LITERT_TORCH)
    assert home.parent == tmp_path
    home.mkdir()
    (home / ".edgekit-ready").write_text("ready\n")  # what a finished creation leaves
    assert toolenv.main(["litert-torch"]) == 0
    assert capsys.readouterr().out.strip() == f"litert-torch: {home / 'bin' / 'python'}"
