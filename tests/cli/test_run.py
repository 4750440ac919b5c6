"""`python -m edgekit.run`: the device command line, and that it never imports TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import EVAL, ROOT, assert_user_error, device_cli, edgekit_cli, load_npz

pytestmark = pytest.mark.slow

_PROBE = """
import runpy, sys
sys.argv = ["edgekit.cli.run", *sys.argv[1:]]
try:
    runpy.run_module("edgekit.cli.run", run_name="__main__")
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "coremltools", "tf2onnx"))
print("HEAVY:" + ",".join(heavy))
sys.exit(code)
"""


def run_device(*args, env=None):
    return subprocess.run([sys.executable, "-c", _PROBE, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_run_prints_top_k_labels_without_importing_tensorflow(digits_package, tmp_path):
    x, y = load_npz(EVAL)
    np.save(tmp_path / "a.npy", x[0])
    np.save(tmp_path / "b.npy", x[1])
    result = run_device(digits_package.with_suffix(".ekpkg"), "--input", tmp_path / "a.npy",
                        "--input", tmp_path / "b.npy", "--top-k", "2")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.endswith(".npy") or ".npy:" in line]
    assert len(lines) == 2
    assert lines[0].split(": ")[1].startswith(f"{y[0]} ")
    assert "HEAVY:\n" in result.stdout or result.stdout.rstrip().endswith("HEAVY:")


_START_UP_COSTS = ("tomllib", "_hashlib", "shutil", "bz2", "lzma", "logging", "traceback", "tempfile",
                   "urllib.request", "pkgutil", "edgekit.bench.tune", "edgekit.formats.building")


def test_a_prediction_loads_none_of_the_start_up_costs(digits_package, tmp_path):
    """What each of these cost a cold start is in the README; the second start (profiles parsed
    and cached by the first) loads none of them."""
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "a.npy", x[0])
    probe = _PROBE.replace('print("HEAVY:"', f'print("COSTS:" + ",".join(m for m in {_START_UP_COSTS!r} if m in sys.modules))\nprint("HEAVY:"')
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", probe, str(digits_package), "-i", str(tmp_path / "a.npy")],
                                capture_output=True, text=True, env=env, cwd=ROOT)
        assert result.returncode == 0, result.stderr
    assert "COSTS:\n" in result.stdout, result.stdout


def test_run_writes_json_output(digits_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "a.npy", x[0])
    result = run_device(digits_package, "-i", tmp_path / "a.npy", "--output", tmp_path / "out.json")
    assert result.returncode == 0, result.stderr
    values = json.loads((tmp_path / "out.json").read_text())
    assert np.asarray(values).shape == (1, 10)


def test_a_one_input_model_reads_its_array_from_an_npz(digits_package, tmp_path):
    """`-i data.npz` was read as an image file ('cannot identify image file') for a one-input model."""
    x, _ = load_npz(EVAL)
    np.savez(tmp_path / "one.npz", whatever=x[:3])
    result = run_device(digits_package, "-i", tmp_path / "one.npz", "--output", tmp_path / "out.npy")
    assert result.returncode == 0, result.stderr
    assert np.load(tmp_path / "out.npy").shape == (3, 10)
    np.savez(tmp_path / "two.npz", a=x[:2], b=x[:2])
    assert_user_error(run_device(digits_package, "-i", tmp_path / "two.npz"), "none named after the model's input")


def test_run_errors_are_one_line_without_traceback(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((8, 8, 1), np.uint8))  # a real input: the package is what is missing
    result = run_device(tmp_path / "missing.edgekit", "--input", tmp_path / "a.npy")
    assert result.returncode == 1
    assert "error: package" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_import_edgekit_run_loads_no_build_side_library():
    code = (
        "import sys, edgekit.cli.run, edgekit.device.runtime\n"
        "heavy = [m for m in ('tensorflow', 'keras', 'coremltools', 'tf2onnx') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_plain_tflite_and_onnx_files_run_without_a_manifest(digits_all_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "x.npy", x[:1].astype(np.float32) / 255)
    outputs = {}
    for artifact in ("tflite/model.int8.tflite", "onnx/model.int8.onnx"):
        result = run_device(digits_all_package / artifact, "-i", tmp_path / "x.npy", "-o", tmp_path / "o.json")
        assert result.returncode == 0, result.stderr
        outputs[artifact] = np.asarray(json.loads((tmp_path / "o.json").read_text()))
    assert outputs["tflite/model.int8.tflite"].shape == (1, 10)
    assert outputs["tflite/model.int8.tflite"].argmax() == outputs["onnx/model.int8.onnx"].argmax()


def test_url_source_profile_choice_and_prediction_cache(digits_all_package, tmp_path):
    from edgekit.device.package_io import write_archive

    archive = tmp_path / "digits.ekpkg"
    write_archive(digits_all_package, archive)
    x, y = load_npz(EVAL)
    np.save(tmp_path / "a.npy", x[0])
    env_cache = {"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")}
    args = (archive.as_uri(), "-i", tmp_path / "a.npy", "--target", "gpu-server", "-v", "--cache-predictions")
    first = run_device(*args, env=env_cache)
    assert first.returncode == 0, first.stderr
    # no GPU here: ONNX Runtime on the CPU, with the ONNX INT8 scheme built for this CPU
    from edgekit.device.devices import DeviceFacts
    from edgekit.formats.onnx.schemes import scheme_for_cpu

    facts = DeviceFacts.read()
    key = scheme_for_cpu(facts.arch, facts.cpu_flags).artifact_key
    assert f"profile=gpu-server, artifact={key}, backend=onnxruntime" in first.stderr
    assert "providers=['CPUExecutionProvider']" in first.stderr
    assert "0 hits, 1 misses" in first.stderr
    second = run_device(*args, env=env_cache)
    assert "1 hits, 0 misses" in second.stderr and "optimized_model_from_cache=True" in second.stderr
    assert first.stdout.split("HEAVY")[0] == second.stdout.split("HEAVY")[0]
    assert f": {y[0]} " in first.stdout


def test_device_errors_name_the_fix(digits_all_package, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((8, 8, 1), np.uint8))
    coreml = run_device(digits_all_package, "-i", tmp_path / "a.npy", "--artifact", "coreml")
    assert coreml.returncode == 1 and "coreml needs coreml" in coreml.stderr and "fix:" in coreml.stderr
    profile = run_device(digits_all_package, "-i", tmp_path / "a.npy", "--target", "nope")
    assert profile.returncode == 1 and "unknown device profile 'nope'" in profile.stderr
    np.save(tmp_path / "bad.npy", np.zeros((3, 3), np.uint8))
    shape = run_device(digits_all_package, "-i", tmp_path / "bad.npy")
    assert shape.returncode == 1 and "the model expects (N, 8, 8, 1)" in shape.stderr
    (tmp_path / "broken.png").write_bytes(b"\x89PNG no")
    image = run_device(digits_all_package, "-i", tmp_path / "broken.png")
    assert image.returncode == 1 and "cannot read image" in image.stderr
    for result in (coreml, profile, shape, image):
        assert "Traceback" not in result.stderr


def test_missing_input_file_is_named_before_the_model_loads(digits_package, tmp_path):
    result = run_device(digits_package, "--input", tmp_path / "cat.jpg")
    assert result.returncode == 1
    assert "input file(s) not found: " in result.stderr and "cat.jpg" in result.stderr
    assert "check the --input paths" in result.stderr and "Traceback" not in result.stderr


def _digit_png(path, image):
    from PIL import Image

    Image.fromarray(image[..., 0], mode="L").save(path)
    return path


def test_every_sample_of_every_input_is_printed_under_its_own_name(digits_package, tmp_path):
    """A .npy of 6 samples then an image: 7 lines, FILE[i] in order, each with its own prediction."""
    import edgekit

    x, _ = load_npz(EVAL)
    np.save(tmp_path / "batch_of_6.npy", x[:6])
    image = _digit_png(tmp_path / "digit8.png", x[8])
    result = device_cli(digits_package, "-i", tmp_path / "batch_of_6.npy", "-i", image, "--top-k", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split(": ")[0] for line in lines] == [f"{tmp_path / 'batch_of_6.npy'}[{i}]" for i in range(6)] + [
        str(image)]
    with edgekit.load(digits_package) as model:
        expected = [model.labels[int(np.argmax(model.predict(x[i])[0]))] for i in range(6)]
        expected.append(model.labels[int(np.argmax(model.predict(str(image))[0]))])
    assert [line.split(": ")[1].split()[0] for line in lines] == expected


def test_output_file_holds_one_row_per_sample(digits_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "three.npy", x[:3])
    np.save(tmp_path / "one.npy", x[3])
    result = device_cli(digits_package, "-i", tmp_path / "three.npy", "-i", tmp_path / "one.npy",
                        "--output", tmp_path / "out.npy")
    assert result.returncode == 0, result.stderr
    assert np.load(tmp_path / "out.npy").shape == (4, 10)
    assert "wrote 4 output rows" in result.stderr


def test_raw_pixels_to_a_bare_int8_tflite_are_said_out_loud(digits_package, tmp_path):
    """The bare artifact knows its int8 input range (about 0..1): 0..255 values are far outside it."""
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "pixels.npy", (np.asarray(x[:2], np.float32) * (255.0 / float(x.max()))).astype(np.uint8))
    result = device_cli(digits_package / "tflite" / "model.int8.tflite", "-i", tmp_path / "pixels.npy")
    assert result.returncode == 0, result.stderr
    assert "warning: input values range 0..255" in result.stderr
    assert "Normalize" in result.stderr or "normalize" in result.stderr


def test_int64_values_far_outside_the_calibration_range_are_said_out_loud(digits_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "wide.npy", (np.asarray(x[:1], np.int64) * 257))
    result = device_cli(digits_package, "-i", tmp_path / "wide.npy")
    assert result.returncode == 0, result.stderr
    assert "warning: input values range" in result.stderr and "expects about" in result.stderr
    assert "calibration data" in result.stderr


def test_in_range_inputs_get_no_warning(digits_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "ok.npy", x[:4])
    result = device_cli(digits_package, "-i", tmp_path / "ok.npy")
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr


def test_sixteen_bit_png_predicts_like_its_eight_bit_original(digits_package, tmp_path):
    from PIL import Image

    import edgekit

    x, _ = load_npz(EVAL)
    eight = _digit_png(tmp_path / "eight.png", x[5])
    sixteen = tmp_path / "sixteen.png"
    Image.fromarray(np.asarray(x[5][..., 0], np.uint16) * 257).save(sixteen)
    assert Image.open(sixteen).mode.startswith("I")
    with edgekit.load(digits_package) as model:
        np.testing.assert_array_equal(model.predict(str(sixteen)), model.predict(str(eight)))
    result = device_cli(digits_package, "-i", sixteen)
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr


def test_litert_load_message_is_silent_unless_verbose(digits_package, tmp_path):
    x, _ = load_npz(EVAL)
    np.save(tmp_path / "a.npy", x[0])
    quiet = device_cli(digits_package, "-i", tmp_path / "a.npy", "--artifact", "tflite")
    assert quiet.returncode == 0 and "XNNPACK" not in quiet.stderr, quiet.stderr
    loud = device_cli(digits_package, "-i", tmp_path / "a.npy", "--artifact", "tflite", "-v")
    assert loud.returncode == 0 and "XNNPACK" in loud.stderr and "using profile=" in loud.stderr


def test_debug_shows_the_traceback_through_edgekit_run(digits_package, tmp_path):
    (tmp_path / "bad.json").write_text("[[1, 2], [3]]")
    plain = edgekit_cli("run", digits_package, "-i", tmp_path / "bad.json")
    assert_user_error(plain, "not a rectangular array")
    for args in (("--debug", "run", digits_package, "-i", tmp_path / "bad.json"),
                 ("run", digits_package, "-i", tmp_path / "bad.json", "--debug")):
        debug = edgekit_cli(*args)
        assert debug.returncode == 1 and "Traceback" in debug.stderr and "not a rectangular array" in debug.stderr


def test_bench_without_report_prints_where_it_wrote(digits_package, tmp_path):
    result = device_cli(digits_package, "--bench", "--runs", "5", "--warmup", "1", "--min-seconds", "0",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = [line.split("report: ", 1)[1] for line in result.stdout.splitlines() if line.startswith("report: ")]
    assert len(written) == 1 and os.path.isabs(written[0]) and os.path.exists(written[0])
    assert os.path.dirname(written[0]) == str(tmp_path)


def test_predict_after_close_is_a_clear_error(digits_package):
    import edgekit
    from edgekit.errors import EdgekitError

    x, _ = load_npz(EVAL)
    model = edgekit.load(digits_package)
    model.close()
    with pytest.raises(EdgekitError, match="was closed"):
        model.predict(x[0])


def test_nan_at_inference_names_the_input_not_calibration(digits_package, tmp_path):
    x, _ = load_npz(EVAL)
    bad = np.asarray(x[:3], np.float32)
    bad[2, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    result = device_cli(digits_package, "-i", tmp_path / "nan.npy")
    assert_user_error(result, "nan.npy", "NaN/Inf", "first in sample 2")
    assert "calibrat" not in result.stderr


def test_raw_pixel_arrays_and_image_folders_run_as_image_files_do(digits_package, tmp_path):
    """`-i images.npy` (uint8 NHWC, another size or RGB) said "pass an image folder", and a folder
    then said "is a directory": pixels are resized and converted as decoded files are, and a
    folder runs each of its images under its own name."""
    from PIL import Image

    import edgekit

    x, _ = load_npz(EVAL)
    big = np.stack([np.asarray(Image.fromarray(x[i][..., 0]).resize((24, 24), Image.Resampling.NEAREST))
                    for i in range(4)])
    rgb = np.repeat(big[..., None], 3, axis=-1)  # (4, 24, 24, 3) uint8, as a camera or PIL gives
    np.save(tmp_path / "pixels.npy", rgb)
    folder = tmp_path / "frames"
    folder.mkdir()
    for i, image in enumerate(big):
        Image.fromarray(image).save(folder / f"{i}.png")
    with edgekit.load(digits_package) as model:
        from_files = np.concatenate([model.predict(str(folder / f"{i}.png")) for i in range(4)])
        np.testing.assert_allclose(model.predict(rgb), from_files, atol=1e-6)
        np.testing.assert_allclose(model.predict(str(folder)), from_files, atol=1e-6)
        np.testing.assert_allclose(model.predict(rgb[0]), from_files[:1], atol=1e-6)  # one (H, W, C) image
    by_folder = device_cli(digits_package, "-i", folder, "--top-k", "1")
    by_pixels = device_cli(digits_package, "-i", tmp_path / "pixels.npy", "--top-k", "1")
    assert by_folder.returncode == 0 and by_pixels.returncode == 0, by_folder.stderr + by_pixels.stderr
    assert [line.split(": ")[0] for line in by_folder.stdout.strip().splitlines()] == [
        str(folder / f"{i}.png") for i in range(4)]
    assert ([line.split(": ")[1] for line in by_folder.stdout.strip().splitlines()]
            == [line.split(": ")[1] for line in by_pixels.stdout.strip().splitlines()])
    (tmp_path / "empty").mkdir()
    assert_user_error(device_cli(digits_package, "-i", tmp_path / "empty"), "holds no images")


def test_fix_lines_point_at_the_real_cause(digits_package, tmp_path):
    """--artifact nosuch was told to repackage with --format nosuch; --backend coreml on a package
    without CoreML to package for a format this device runs; a corrupt .npy header to free memory."""
    wrong_artifact = device_cli(digits_package, "--artifact", "nosuch", "--bench")
    assert_user_error(wrong_artifact, "'nosuch' is no format", "pass --artifact with one of its artifacts: tflite")
    wrong_backend = device_cli(digits_package, "--backend", "coreml", "--bench")
    assert_user_error(wrong_backend, "backend coreml runs none of the artifacts", "leave out --backend")
    corrupt = tmp_path / "corrupt.npy"
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 8, 8, 1), }".ljust(117) + "\n"
    corrupt.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(64))
    truncated = device_cli(digits_package, "--input", corrupt)
    assert_user_error(truncated, "its header says shape [100000000000, 8, 8, 1]", "numpy.save")
    assert "out of memory" not in truncated.stderr


def test_an_input_npz_of_objects_is_a_user_error_not_an_internal_one(digits_package, tmp_path):
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    result = device_cli(digits_package, "--input", tmp_path / "objects.npz")
    assert_user_error(result, "holds Python objects", "numpy.savez")
    assert "allow_pickle" not in result.stderr
