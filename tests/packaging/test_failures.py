"""`edgekit package` when things go wrong mid-way: full disks, races, kills, collapsed artifacts.

Real converters in child processes; every failure is one clear error and leaves nothing behind
(no staging tree in OUTDIR, no temporary directory in $TMPDIR, no orphaned converter process).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, ROOT, assert_user_error, edgekit_cli, load_npz, run_tf
from tests.conftest import write_digit_images

pytestmark = pytest.mark.slow


def leftovers(tmpdir: Path, outdir: Path) -> list[str]:
    found = [p.name for p in tmpdir.glob("edgekit-*")]
    if outdir.exists():
        found += [p.name for p in outdir.glob(".*.partial")]
    return found


@pytest.fixture
def own_tmpdir(tmp_path):
    path = tmp_path / "tmpdir"
    path.mkdir()
    return path


def test_image_folder_for_a_dynamic_size_model_says_pass_resize(tmp_path):
    model = tmp_path / "dynamic.keras"
    run_tf(f"""
        import keras
        keras.utils.set_random_seed(0)
        inputs = keras.Input((None, None, 1))
        x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
        x = keras.layers.GlobalAveragePooling2D()(x)
        keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x)).save({str(model)!r})
    """)
    x, y = load_npz(CALIBRATION)
    write_digit_images(tmp_path / "images", x[:30], y[:30])
    result = edgekit_cli("package", model, "-c", tmp_path / "images", "-o", tmp_path / "out")
    assert_user_error(result, "dynamic height/width", "pass --resize HxW")
    assert not (tmp_path / "out").exists()


def test_disk_full_while_writing_the_package(full_dir, own_tmpdir):
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "--eval", EVAL, "-o", full_dir / "dist",
                         env={"TMPDIR": str(own_tmpdir)})
    assert_user_error(result, "no space left on the device")
    assert leftovers(own_tmpdir, full_dir / "dist") == []


def test_two_runs_racing_into_one_outdir(tmp_path, own_tmpdir, digits_all_package):
    """Two commands started together, packaging the same model into one folder: one publishes, the
    other says why it did not, and neither leaves anything behind. (The digits model's float ONNX
    for ONNX: two whole commands as a user starts them, without TensorFlow's start-up in each.)"""
    out = tmp_path / "dist"
    source = tmp_path / "digits.onnx"
    shutil.copyfile(digits_all_package / "onnx" / "model.float32.onnx", source)
    command = [sys.executable, "-m", "edgekit.cli", "package", str(source), "--format", "onnx", "-c", str(CALIBRATION),
               "--eval", str(EVAL), "-o", str(out)]
    env = {**os.environ, "TMPDIR": str(own_tmpdir)}
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
            for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in runs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "internal error" not in loser and "Traceback" not in loser
    assert "appeared while this package was being built" in loser or "already exists" in loser, loser
    assert (out / "digits.edgekit" / "manifest.json").is_file()
    assert leftovers(own_tmpdir, out) == []


def test_constant_outputs_never_pass_validation(tmp_path, own_tmpdir):
    """Outputs near 1000 that differ by 1e-3: the INT8 output scale (~4) rounds them all to one value."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    model = tmp_path / "flat.onnx"
    weights = [numpy_helper.from_array(rng.normal(0, 1e-4, (64, 10)).astype(np.float32), "w"),
               numpy_helper.from_array(np.full(10, 1000.0, np.float32), "b"),
               numpy_helper.from_array(np.array([-1, 64], np.int64), "flat")]
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["image", "flat"], ["x"], name="flatten"),
         helper.make_node("Gemm", ["x", "w", "b"], ["scores"], name="dense")], "flat",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 8, 8, 1])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 10])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    x, _ = load_npz(CALIBRATION)
    np.save(tmp_path / "calib.npy", x[:120])  # unlabeled: no accuracy gate would catch it
    common = (model, "--format", "onnx", "-c", tmp_path / "calib.npy", "-o", tmp_path / "out")
    result = edgekit_cli("package", *common, env={"TMPDIR": str(own_tmpdir)})
    assert_user_error(result, "carries no signal", "the outputs are the same for all")
    assert not (tmp_path / "out" / "flat.edgekit").exists()
    assert leftovers(own_tmpdir, tmp_path / "out") == []
    kept = edgekit_cli("package", *common, "--allow-accuracy-drop")
    assert kept.returncode == 0, kept.stderr
    assert "failed validation" in kept.stderr


def test_nan_in_calibration_names_the_file_row(tmp_path):
    x, y = load_npz(CALIBRATION)
    bad = x.astype(np.float32) / 255
    bad[150, 2, 3, 0] = np.nan
    np.savez(tmp_path / "nan.npz", x=bad, y=y)
    result = edgekit_cli("package", DIGITS_MODEL, "-c", tmp_path / "nan.npz", "--samples", "1000",
                         "-o", tmp_path / "out")
    assert_user_error(result, "first in row 150 of")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_kill_9_leaves_no_orphan_and_the_next_run_cleans_up(tmp_path, own_tmpdir):
    out = tmp_path / "dist"
    env = {**os.environ, "TMPDIR": str(own_tmpdir)}
    command = [sys.executable, "-m", "edgekit.cli", "package", str(DIGITS_MODEL), "-c", str(CALIBRATION),
               "--eval", str(EVAL), "-o", str(out)]
    parent = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    deadline = time.time() + 240
    child = None
    while time.time() < deadline and parent.poll() is None:
        partials = list(out.glob(".*.partial")) if out.exists() else []
        kids = _children(parent.pid)
        if partials and kids:  # converting into the staging tree, with a converter child running
            child = kids[0]
            break
        time.sleep(0.2)
    assert child is not None, "the package run never reached a conversion step"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 15
    while time.time() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child), "the converter child outlived its killed parent"
    assert leftovers(own_tmpdir, out)  # what the killed run left: staging tree and temp dirs
    again = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert leftovers(own_tmpdir, out) == []
