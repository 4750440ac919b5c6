"""Hostile files and careless flags, end to end through the real CLI: names from a manifest
never leave the output folder, export arguments are escaped or refused, thread counts are
bounded by the device, and tune never stores a choice slower than the untuned default."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.device.devices import DeviceFacts, max_threads
from edgekit.errors import EdgekitError, InputError, PackageError
from edgekit.manifest import Manifest
from edgekit.names import is_safe_name, kubernetes_name, name_from_source, slug
from tests.conftest import assert_user_error, device_cli, edgekit_cli

pytestmark = pytest.mark.slow


def renamed_copy(package: Path, folder: Path, name: object) -> Path:
    """A copy of ``package`` whose manifest claims ``name`` (as an attacker would edit it)."""
    copy = folder / "hostile.edgekit"
    shutil.copytree(package, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["name"] = name
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.parametrize("name", ["../victim", "..", "a/../../b", "/etc", ".hidden", "x\\..\\y", "a\nb", "", 7])
def test_a_manifest_name_that_could_escape_is_refused_where_it_is_read(name):
    from tests.test_manifest import _manifest

    document = _manifest().to_dict() | {"name": name}
    with pytest.raises(PackageError, match="not a safe name"):
        Manifest.from_dict(document)


def test_export_never_writes_outside_its_output_folder(digits_all_package, tmp_path):
    """`export triton` of a package named ../victim once deleted victim/ beside the repository
    and wrote the model there (exit 0)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    hostile = renamed_copy(digits_all_package, tmp_path, "../victim")
    result = edgekit_cli("export", "triton", hostile, "-o", tmp_path / "repo", "--force")
    assert_user_error(result, "not a safe name", "../victim")
    assert (victim / "precious.txt").read_text() == "keep me"
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_force_replaces_only_what_edgekit_exported(digits_all_package, tmp_path):
    repo = tmp_path / "repo"
    foreign = repo / "digits"
    foreign.mkdir(parents=True)
    (foreign / "config.pbtxt").write_text('name: "someone else\'s model"\n')
    result = edgekit_cli("export", "triton", digits_all_package, "-o", repo, "--force")
    assert_user_error(result, "was not written by edgekit export")
    assert "someone else" in (foreign / "config.pbtxt").read_text()
    shutil.rmtree(foreign)
    for _ in range(2):  # the second --force replaces edgekit's own export
        result = edgekit_cli("export", "triton", digits_all_package, "-o", repo, "--force", "--kserve", "gs://b/r")
        assert result.returncode == 0, result.stderr
    assert (repo / "digits" / ".edgekit-export").is_file()


@pytest.mark.parametrize("args, needle", [
    (["--kserve", "not a uri"], "not a storage URI"),
    (["--kserve", "s3://b/x\nkind: Pod"], "not a storage URI"),
    (["--max-batch-size", "1000000000"], "--max-batch-size must be an integer from 1 to"),
    (["--instances", "100000"], "--instances must be an integer from 1 to"),
    (["--backend", "python", "--artifact", "coreml"], "CoreML runs only on macOS"),
    (["--backend", "python", "--threads", "100000"], "--threads must be from 1 to"),
    (["--backend", "python", "--python-path", "/opt/x\n}"], "control characters"),
])
def test_export_arguments_triton_or_kserve_cannot_represent_are_refused(digits_all_package, tmp_path, args, needle):
    result = edgekit_cli("export", "triton", digits_all_package, "-o", tmp_path / "repo", *args)
    assert_user_error(result, needle)
    assert not (tmp_path / "repo").exists()


def test_quotes_in_python_path_are_escaped_in_config_pbtxt(digits_all_package, tmp_path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    odd = '/opt/my "venv"\\site-packages'
    result = edgekit_cli("export", "triton", digits_all_package, "-o", tmp_path / "repo", "--backend", "python",
                         "--python-path", odd)
    assert result.returncode == 0, result.stderr
    config = text_format.Parse((tmp_path / "repo" / "digits" / "config.pbtxt").read_text(),
                               model_config_pb2.ModelConfig())
    assert config.parameters["python_path"].string_value == odd


def test_kserve_names_and_uris_are_valid_yaml_values():
    import yaml

    from edgekit.export.triton import inference_service_yaml

    document = yaml.safe_load(inference_service_yaml("My_Model.v2", "s3://bucket/a: b#c", False))
    assert document["metadata"]["name"] == "my-model-v2"
    assert document["spec"]["predictor"]["model"]["storageUri"] == "s3://bucket/a: b#c"
    assert kubernetes_name("3d-net") == "m-3d-net"


def test_names_from_urls_and_paths_keep_their_words():
    assert name_from_source("https://h.example/m/mobilenet.v2.ekpkg?sig=abc") == "mobilenet.v2"
    assert name_from_source("https://h.example/dl?id=../../x") == "dl"
    assert name_from_source("models/digits.edgekit/") == "digits"
    assert name_from_source("https://h.example/") == "h.example"
    assert is_safe_name(slug("../../etc/passwd")) and slug("...") == "model"


def test_report_names_from_urls_are_safe_file_names():
    from edgekit.bench.harness import default_report_path

    path = default_report_path("https://h.example/pkgs/mobilenet.v2.ekpkg?token=a/b")
    assert path.parent == Path(".") and path.name.startswith("mobilenet.v2.")


# --- threads -------------------------------------------------------------------------------------


def test_thread_counts_above_the_device_bound_are_usage_errors(digits_package):
    """--threads 100000 once segfaulted LiteRT (rc 139); tune held 100,000 ONNX Runtime threads."""
    too_many = str(max_threads() + 1)
    for args in (["--threads", too_many], ["--tune", "--tune-threads", f"1,{too_many}"],
                 ["--bench", "--sweep", "--sweep-threads", too_many]):
        result = device_cli(digits_package, *args, timeout=120)
        assert result.returncode == 2, (args, result.returncode, result.stderr[-2000:])
        assert "threads" in result.stderr and "Traceback" not in result.stderr and "cores" in result.stderr
    result = edgekit_cli("tune", digits_package, "--tune-threads", too_many, timeout=120)
    assert result.returncode == 2 and "cores" in result.stderr, result.stderr[-2000:]
    result = edgekit_cli("serve", digits_package, "--workers", too_many, timeout=120)  # not a fork bomb either
    assert result.returncode == 2 and "at most" in result.stderr and "workers each" in result.stderr


def test_the_api_refuses_unbounded_threads_too(digits_package):
    import edgekit

    with pytest.raises(InputError, match="threads must be from 1 to"):
        edgekit.load(digits_package, threads=100_000)
    assert max_threads(DeviceFacts.read().cpu_count) >= 4


def test_tune_measures_the_untuned_default_and_never_stores_a_slower_choice(digits_all_package, tmp_path,
                                                                            monkeypatch):
    """`--tune-artifacts tflite --tune-threads N` once stored tflite at N threads as "fastest
    measured" without ever measuring the untuned default it replaced."""
    from edgekit.device.runtime import choose, default_threads
    from edgekit.bench.tune import tune

    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    package = tmp_path / "digits.edgekit"
    shutil.copytree(digits_all_package, package)
    manifest = Manifest.from_json((package / "manifest.json").read_bytes())
    from edgekit.device.devices import detect

    entry, backend_cls = choose(manifest, detect())
    untuned = {"artifact": entry.key, "backend": backend_cls.name, "threads": default_threads()}
    asked = "onnx" if entry.key != "onnx" else "tflite"
    report = tune(str(package), runs=20, min_seconds=0.05, threads=[1], artifacts=[asked])
    tuning = report["tuning"]
    measured = [{k: c[k] for k in ("artifact", "backend", "threads")} for c in tuning["candidates"]]
    assert untuned in measured and tuning["default"] == untuned
    if tuning["decision"] != untuned:  # stored only when significantly faster than the default
        assert tuning["evidence"]["ci_high"] < 1.0


def test_exhausted_threads_or_memory_are_named_not_internal_errors():
    """EAGAIN from a starved machine was reported as `internal error: BlockingIOError` (exit 70)."""
    from edgekit.errors import resource_error

    for exc, needle in ((BlockingIOError(11, "Resource temporarily unavailable"), "out of threads or processes"),
                        (MemoryError(), "out of memory"), (OSError(12, "Cannot allocate memory"), "out of memory"),
                        (RuntimeError("can't start new thread"), "out of threads")):
        error = resource_error(exc)
        assert isinstance(error, EdgekitError) and needle in error.message, (exc, error)
    assert resource_error(ValueError("x")) is None
    code = ("import sys, edgekit.packaging.preflight as p\n"
            "def starved(*a, **k): raise BlockingIOError(11, 'Resource temporarily unavailable')\n"
            "p.preflight = starved\n"
            "import edgekit.packaging as b; b.preflight = starved\n"
            "sys.argv = ['edgekit', 'package', 'models/digits/digits.keras', '--calibration',"
            " 'models/digits/data/calibration.npz', '-o', sys.argv[1]]\n"
            "from edgekit.cli.main import main\n"
            "main()\n")
    result = subprocess.run([sys.executable, "-c", code, "/tmp/edgekit-never-written"], capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert_user_error(result, "out of threads or processes")


def test_a_factory_that_blocks_ends_at_the_timeout(tmp_path, own_converter_children):
    """`--timeout` once bounded only conversions: a blocking factory hung `edgekit package` forever."""
    pytest.importorskip("torch")
    import numpy as np

    factory = tmp_path / "blocking.py"
    factory.write_text("import time\n\ndef build():\n    time.sleep(3600)\n")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((60, 4), dtype=np.float32))
    result = edgekit_cli("package", f"{factory}:build", "-c", tmp_path / "x.npy", "-o", tmp_path / "out",
                         "--format", "onnx", "--timeout", "5", timeout=240)
    # the child sleeps past any timeout: a short one ends the test sooner (on a slow machine the
    # timeout may end the child's imports instead, with the same message)
    assert_user_error(result, "loading the model did not finish within 5 s", "--timeout")
    assert "runs that file's Python code" in result.stderr


def test_a_label_with_a_line_break_is_refused_where_it_is_read():
    """labels.txt holds one label per line: a label with a newline would shift every later class."""
    from tests.test_manifest import _manifest

    document = _manifest().to_dict()
    document["outputs"][0]["labels"] = ["cat", "dog\nbird"]
    with pytest.raises(PackageError, match="line break"):
        Manifest.from_dict(document)
