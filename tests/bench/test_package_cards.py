"""Latency cards stored in a package: measured and stored on the device (``edgekit card --store``)
or brought back (``edgekit cards add``), bound by the manifest and so by its signature, checked
when read, refused when they measured another package or another build, and written into an
``.ekpkg`` as into a directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edgekit.device.stored_cards import stored_cards
from edgekit.device.package_io import open_package, write_archive
from edgekit.device.signing import generate_keys
from tests.conftest import assert_user_error, edgekit_cli

pytestmark = pytest.mark.slow

QUICK = ("--runs", "30", "--min-seconds", "0.1", "--warmup", "2", "--no-launch")


@pytest.fixture
def package(heads_package: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "heads.edgekit"
    shutil.copytree(heads_package, copy)
    return copy


def _data(heads_package: Path) -> Path:
    return heads_package.parent.parent / "heads_eval.npz"


def test_a_card_stored_on_the_device_is_listed_checked_and_covered_by_the_signature(package, heads_package, tmp_path):
    first = edgekit_cli("card", package, "--eval", _data(heads_package), "-o", tmp_path / "cards", *QUICK, "--store",
                        "--device-name", "pi5", "--report", tmp_path / "run.json")
    assert first.returncode == 0, first.stderr[-3000:]
    root, manifest = open_package(package)
    (entry,) = manifest.cards
    key = entry["artifact"]  # the ONNX scheme this CPU runs best: onnx, or onnx-u8s8 on x86 with VNNI
    assert key.startswith("onnx") and f"stored card pi5 · {key}: cards/heads.{key}.pi5.card.md" in first.stdout
    assert entry["device"] == "pi5" and (package / entry["markdown"]).is_file()
    (card,) = stored_cards(root, manifest)
    assert card["artifact"]["sha256"] == manifest.artifact(key).sha256
    assert f"card pi5 · {key}: cards/heads.{key}.pi5.card.json ok" in edgekit_cli("verify", package,
                                                                                 "--allow-unsigned").stdout
    shown = edgekit_cli("cards", "show", package)
    assert shown.returncode == 0 and f"| measurement | pi5 · {key} |" in shown.stdout

    generate_keys(tmp_path / "keys" / "publisher")
    assert edgekit_cli("sign", package, "--key", tmp_path / "keys" / "publisher").returncode == 0
    refused = edgekit_cli("card", package, "--eval", _data(heads_package), "-o", tmp_path / "cards", *QUICK, "--store",
                          "--device-name", "pi5", "--report", tmp_path / "again.json")
    assert_user_error(refused, "is signed", "--sign KEY")
    assert not (tmp_path / "again.json").exists()  # refused before measuring
    added = edgekit_cli("cards", "add", package, tmp_path / "cards", "--sign", tmp_path / "keys" / "publisher")
    assert added.returncode == 0 and "(replaces the earlier card)" in added.stdout, added.stderr
    assert len(open_package(package)[1].cards) == 1  # one per device and artifact
    verified = edgekit_cli("verify", package, "--trusted-keys", tmp_path / "keys")
    assert verified.returncode == 0 and "signature: ok" in verified.stdout and f"card pi5 · {key}" in verified.stdout, \
        verified.stderr

    stored = package / entry["path"]
    stored.write_text(stored.read_text().replace('"pi5"', '"pi4"'))  # a card edited after it was signed
    for command in (("verify", package, "--trusted-keys", tmp_path / "keys"), ("compare", package)):
        assert_user_error(edgekit_cli(*command), f"cards/heads.{key}.pi5.card.json does not match the manifest")


def test_a_card_of_another_package_or_build_is_refused_and_an_archive_takes_cards(package, heads_package, tmp_path):
    made = edgekit_cli("card", heads_package, "--eval", _data(heads_package), "-o", tmp_path / "cards", *QUICK,
                       "--report", tmp_path / "run.json")
    assert made.returncode == 0, made.stderr[-3000:]
    (path,) = (tmp_path / "cards").glob("*.card.json")
    card = json.loads(path.read_text())
    for change, needle in ((("model", "name", "other"), "does not belong to package 'heads'"),
                           (("artifact", "sha256", "0" * 64), "(its sha256 differs)"),
                           (("artifact", "key", "tflite"), "package 'heads' has no artifact 'tflite'")):
        edited = json.loads(path.read_text())
        edited[change[0]][change[1]] = change[2]
        wrong = tmp_path / "wrong" / path.name
        wrong.parent.mkdir(exist_ok=True)
        wrong.write_text(json.dumps(edited))
        assert_user_error(edgekit_cli("cards", "add", package, wrong), needle)
    assert not open_package(package)[1].cards and not (package / "cards").exists()

    archive = tmp_path / "heads.ekpkg"
    write_archive(package, archive)
    added = edgekit_cli("cards", "add", archive, path)
    assert added.returncode == 0, added.stderr
    lines = edgekit_cli("verify", archive, "--allow-unsigned").stdout
    assert f"card {card['device']['name']} · {card['artifact']['key']}" in lines
    assert_user_error(edgekit_cli("cards", "add", package, tmp_path / "wrong" / "none"), "no card files")
