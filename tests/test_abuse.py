"""What a new user's first hour tried, end to end on a fresh package, through the real command lines.

Every user mistake ends in exactly one `error:` line with a `fix:`, exit 1, no traceback and never
`internal error`; every suspicious input that still runs is said out loud with a `warning:`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, assert_user_error, device_cli, edgekit_cli, load_npz
from tests.data.test_preprocessing import png_header_only

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fresh(digits_all_package: Path) -> Path:
    """A fresh package of every format, as the README's first command makes it: the run's shared
    one (these tests only read it)."""
    return digits_all_package


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    x, _ = load_npz(EVAL)
    np.save(folder / "good.npy", x[:2])
    np.save(folder / "objects.npy", np.array([{"pixels": 1}], dtype=object), allow_pickle=True)
    (folder / "empty.npy").write_bytes(b"")
    (folder / "ragged.json").write_text("[[1, 2, 3], [4]]")
    (folder / "truncated.json").write_text('[[0.1, 0.2], [0.3')
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    png_header_only(folder / "huge.png", 20000, 20000)
    (folder / "text.png").write_text("not really a png")
    return folder


RUN_ERRORS = [
    (["-i", "objects.npy"], ["objects.npy", "not a readable array file"]),
    (["-i", "empty.npy"], ["empty.npy", "not a readable array file"]),
    (["-i", "ragged.json"], ["ragged.json", "not a rectangular array"]),
    (["-i", "truncated.json"], ["truncated.json", "not valid JSON"]),
    (["-i", "deep.json"], ["deep.json", "nested too deeply"]),
    (["-i", "huge.png"], ["20000x20000", "megapixel limit"]),
    (["-i", "text.png"], ["cannot read image", "text.png"]),
    (["-i", "missing.npy"], ["input file(s) not found"]),
]


@pytest.mark.parametrize("args, needles", RUN_ERRORS, ids=[a[1] for a, _ in RUN_ERRORS])
def test_bad_inputs_to_the_device_command(fresh, inputs, args, needles):
    assert_user_error(device_cli(fresh, *args, cwd=inputs), *needles)


def test_read_only_outputs_of_every_command(fresh, inputs, readonly_dir, tmp_path):
    target = readonly_dir / "sub"
    assert_user_error(device_cli(fresh, "-i", inputs / "good.npy", "--output", target / "out.json"),
                      "--output file", "read-only")
    assert_user_error(device_cli(fresh, "--bench", "--runs", "3", "--report", target / "r.json"),
                      "report", "read-only")
    assert_user_error(edgekit_cli("keys", "generate", target / "key"), "key", "read-only")
    assert_user_error(edgekit_cli("export", "triton", fresh, "-o", target / "repo"),
                      "Triton model repository", "read-only")
    assert list(readonly_dir.iterdir()) == [readonly_dir / "existing.txt"]


def test_verify_on_an_unsigned_package_suggests_its_own_flag(fresh):
    result = edgekit_cli("verify", fresh)
    assert_user_error(result, "not signed", "--allow-unsigned")
    assert "--require-signature" not in result.stderr
    assert edgekit_cli("verify", fresh, "--allow-unsigned").returncode == 0


def test_suspicious_inputs_run_but_are_said_out_loud(fresh, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "sixteen_bit_values.npy", np.asarray(x[:1], np.int64) * 257)
    result = device_cli(fresh, "-i", tmp_path / "sixteen_bit_values.npy")
    assert result.returncode == 0 and "warning: input values range" in result.stderr, result.stderr
    tflite = fresh / "tflite" / "model.int8.tflite"
    result = device_cli(tflite, "-i", tmp_path / "sixteen_bit_values.npy")
    assert result.returncode == 0 and "warning: input values range" in result.stderr, result.stderr


def test_package_user_errors_end_cleanly(tmp_path):
    (tmp_path / "empty_labels.txt").write_text("")
    assert_user_error(edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "--labels",
                                  tmp_path / "empty_labels.txt", "-o", tmp_path / "o"), "is empty")
    (tmp_path / "zero.npy").write_bytes(b"")
    result = edgekit_cli("package", DIGITS_MODEL, "-c", tmp_path / "zero.npy", "-o", tmp_path / "o")
    assert_user_error(result, "0 bytes")
    assert "aborted" not in result.stderr


def test_relative_output_directory_gives_a_complete_package(digits_all_package):
    """Converter children run in their own directory: every path handed to them must be absolute.
    The README tour's first command gives relative paths for everything (the model, the data,
    ``-o dist/``) to every format and its float fallback: its package, built as a user runs it."""
    package = digits_all_package
    import json

    manifest = json.loads((package / "manifest.json").read_text())
    assert sorted({a["format"] for a in manifest["artifacts"]}) == ["coreml", "executorch", "onnx", "tflite"]
    assert all(a["bytes"] > 1000 for a in manifest["artifacts"]), manifest["artifacts"]
    assert edgekit_cli("verify", package, "--allow-unsigned").returncode == 0
