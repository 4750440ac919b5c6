"""Shared fixtures: the committed digits model and data, packages built once per test run (once
for all pytest-xdist workers: the first builds under a lock, the others reuse it read-only).

Every package here is built with the real converters and validated with the real LiteRT
runtime; TensorFlow runs only in child processes, as in production.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from edgekit.cli.main import run as edgekit_main

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "models" / "digits"
DIGITS_MODEL = DIGITS / "digits.keras"
CALIBRATION = DIGITS / "data" / "calibration.npz"
EVAL = DIGITS / "data" / "eval.npz"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["EDGEKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    os.environ["CI"] = os.environ.get("CI", "true")  # no spinners in test output


def _worker_threads() -> dict[str, str]:
    """Under pytest-xdist each worker has its share of the cores: the converters and trainers its
    children start (PyTorch, TensorFlow, OpenMP) and the packager's validation runs (ONNX Runtime,
    ``EDGEKIT_THREADS``) default to every core, and on 2 cores with 2 workers their thread pools
    spin against each other's (tests/sources/test_pytorch.py: 310 s -> 230 s with one thread each;
    the PyTorch and search tests 188 s -> 169 s when the validation runs took one too). Runtimes
    under test get their threads from edgekit's device options, not from these."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return {}
    share = str(max(1, (os.cpu_count() or 1) // workers))
    return {name: os.environ.get(name, share)
            for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "EDGEKIT_THREADS")}


os.environ.update(_worker_threads())  # at import, before a test module imports PyTorch in this worker


@pytest.fixture(autouse=True, scope="session")
def _warm_converters() -> Iterator[None]:
    """In-process packaging runs share this test process's converter children, as one run's steps
    do (``worker_reuse``): TensorFlow and PyTorch are imported once per child, not once per run (6.5
    and 4 s each). A child is still replaced after its step budget, a crash, a timeout or a change
    in the environment it would be given. tests/conversion/ checks the children themselves and
    runs without this."""
    if os.environ.get("EDGEKIT_TEST_FRESH_CHILDREN"):
        yield
        return
    from edgekit.conversion.worker_reuse import reusing

    with reusing():
        yield


@pytest.fixture
def own_converter_children() -> Iterator[None]:
    """For a test whose step ends the child running it (a timeout, a crash): its steps get reused
    children of their own, so the session's (``_warm_converters``), with TensorFlow and PyTorch
    imported, are not ended with it and started again by the next test (15-20 s of imports)."""
    from edgekit.conversion import worker
    from edgekit.conversion.worker_reuse import reusing

    held = getattr(worker.reuse, "pool", None)
    worker.reuse.pool = None
    try:
        with reusing():
            yield
    finally:
        worker.reuse.pool = held


SHARED_BUILDS_ENV = "EDGEKIT_TEST_SHARED_BUILDS"  # scripts/test.sh: a folder both of its pytest runs build into


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(folder)`` once per test run. Under xdist the workers share the run's base folder:
    the first builds under a file lock and records the result; the others wait and reuse it.
    ``EDGEKIT_TEST_SHARED_BUILDS`` names a folder shared further, by every pytest run that is given
    it (scripts/test.sh's parallel and serial parts). Tests must treat the result as read-only
    (copy it to change it)."""
    given = os.environ.get(SHARED_BUILDS_ENV)
    if not given and not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(tmp_path_factory.mktemp(name))
    from filelock import FileLock

    # pytest-N/, above every worker's popen-gwK/, unless a folder outlives this run
    shared = Path(given) if given else tmp_path_factory.getbasetemp().parent
    record = shared / f"{name}.built"
    with FileLock(str(shared / f"{name}.lock")):
        if record.is_file():
            return Path(record.read_text())
        folder = shared / f"{name}.shared"
        shutil.rmtree(folder, ignore_errors=True)  # what a build that failed earlier left
        folder.mkdir()
        result = build(folder)
        record.write_text(str(result))
        return result


def verdict_model(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """``models/verdict/build.py NAME``'s folder, built once per test run (``built_once``)."""

    def build(folder: Path) -> Path:
        subprocess.run([sys.executable, str(ROOT / "models/verdict/build.py"), name, "--output", str(folder)],
                       check=True, capture_output=True, env={"TF_CPP_MIN_LOG_LEVEL": "3", **os.environ})
        return folder / name

    return built_once(tmp_path_factory, name.replace("_", "-"), build)


def outlier_cnn_searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The verdict models' ``outlier_cnn`` packaged once per test run for every format with default
    flags but ``--no-equalize`` (the simulated layer search, each format's own, the float fallbacks;
    equalization repairs this model whole on ONNX, its own test's subject): the package and its
    command's result. The layer search's tests read facets of this one package."""
    model = verdict_model(tmp_path_factory, "outlier_cnn")

    def build(folder: Path) -> Path:
        result = edgekit_cli("package", model / "outlier_cnn.keras", "-c", model / "calibration.npz", "--eval",
                             model / "eval.npz", "--format", "all", "--profile", "x86-cpu", "--no-equalize", "-o",
                             folder)
        (folder / "result.json").write_text(json.dumps([result.returncode, result.stdout, result.stderr]))
        return folder

    folder = built_once(tmp_path_factory, "outlier-cnn-searched", build)
    code, out, err = json.loads((folder / "result.json").read_text())
    return folder / "outlier_cnn.edgekit", subprocess.CompletedProcess(["edgekit", "package"], code, out, err)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``edgekit ARGS`` in-process as the console script does; (exit code, stdout, stderr)."""
    code = edgekit_main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_tf(code: str) -> None:
    """Run TensorFlow/Keras code that builds a model, in this test process as a fresh interpreter
    would (``exec_here``): Keras's global state cleared first, so its automatic layer names start
    over as they do there. The test workers import TensorFlow anyway (coremltools' probes load it
    at collection); a fresh interpreter spent 4-6 s importing it again."""
    import keras

    keras.backend.clear_session()
    exec_here(code, ROOT)


def load_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as data:
        return data["x"], data["y"]


@pytest.fixture(scope="session")
def digits_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits reference model packaged for TFLite (with an .ekpkg archive)."""
    import edgekit

    return built_once(tmp_path_factory, "digits", lambda out: edgekit.package(
        str(DIGITS_MODEL), str(CALIBRATION), str(out), eval=str(EVAL), archive=True).path)


def write_digit_images(root: Path, x: np.ndarray, y: np.ndarray) -> None:
    """Class sub-folders of 8x8 grayscale PNGs, like a user's image dataset."""
    from PIL import Image

    for i, (image, label) in enumerate(zip(x, y)):
        folder = root / str(int(label))
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image[..., 0], mode="L").save(folder / f"{i:04d}.png")


@pytest.fixture(scope="session")
def digits_all_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits model packaged for every format from one calibration: the README tour's first
    command, run once as a user runs it (``tests/tour.py``; its calibration data are uint8, so the
    tour's ``--preprocessing 0..1`` is the scale edgekit infers without it). Read-only."""
    from tests.tour import tour_package

    return tour_package(tmp_path_factory) / "dist" / "digits.edgekit"


def exec_here(code: str, cwd: Path) -> str:
    """Python as a user runs it in a fresh interpreter in ``cwd``, run in this test process instead:
    what it prints. Its packaging runs share this worker's warm converter children and imports
    (a fresh interpreter spent 10-15 s importing TensorFlow, PyTorch and the converters again)."""
    import contextlib
    import io

    printed = io.StringIO()
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(textwrap.dedent(code), "<snippet>", "exec"), {"__name__": "__main__"})
    finally:
        os.chdir(previous)
    return printed.getvalue()


def run_python(code: str) -> str:
    """Run Python in a child process (for heavy imports such as coremltools); its stdout."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="session")
def sin_saved_model(tmp_path_factory):
    """A model with an op TFLite cannot run in INT8 (sin), exported as a SavedModel."""
    return built_once(tmp_path_factory, "sin", _sin_model)


def _sin_model(folder: Path) -> Path:
    path = folder / "sin_model"
    run_tf(f"""
        import keras, tensorflow as tf
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8, 8, 1))
        x = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inputs)
        x = keras.layers.Lambda(lambda t: tf.math.sin(t), name="wave")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        outputs = keras.layers.Dense(10, activation="softmax", name="head")(x)
        keras.Model(inputs, outputs).export({str(path)!r}, verbose=False)
    """)
    return path


@pytest.fixture(scope="session")
def lgamma_saved_model(tmp_path_factory):
    """A model using lgamma: TFLite, tf2onnx and coremltools all have no conversion for it."""
    return built_once(tmp_path_factory, "lgamma", _lgamma_model)


def _lgamma_model(folder: Path) -> Path:
    path = folder / "lgamma_model"
    run_tf(f"""
        import keras, tensorflow as tf
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8, 8, 1))
        x = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inputs)
        x = keras.layers.Lambda(lambda t: tf.math.lgamma(tf.nn.relu(t) + 1.0), name="gamma")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        outputs = keras.layers.Dense(10, activation="softmax", name="head")(x)
        keras.Model(inputs, outputs).export({str(path)!r}, verbose=False)
    """)
    return path


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def readonly_dir(tmp_path: Path):
    """A directory on a real read-only file system (a read-only bind mount): root's permission bypass
    does not apply, so writes fail with EROFS as on a read-only SD card."""
    path = tmp_path / "readonly"
    path.mkdir()
    (path / "existing.txt").write_text("kept\n")
    if not _mount("--bind", str(path), str(path)) or not _mount("-o", "remount,bind,ro", str(path)):
        _unmount(path)
        pytest.skip("mounting is not permitted here (read-only file system tests need root)")
    yield path
    _unmount(path)


@pytest.fixture
def full_dir(tmp_path: Path):
    """A directory on a 256 KiB tmpfs that is then filled up: writes fail with ENOSPC."""
    path = tmp_path / "full"
    path.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)):
        pytest.skip("mounting is not permitted here (full-disk tests need root)")
    filler = path / ".filler"
    try:
        with open(filler, "wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
    except OSError:
        pass
    yield path
    _unmount(path)


def digits_tflite(package: Path) -> Path:
    return package / "tflite" / "model.int8.tflite"


# A packaging command's limit in tests: a hang fails, a slow machine does not (a search on a busy 2-core
# machine has taken 4-5 minutes; the product's own steps time out at 30)
PACKAGE_TIMEOUT_S = 900


def edgekit_cli(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None,
                timeout: float = PACKAGE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """The `edgekit` command as a user runs it: its exit code, stdout and stderr.

    ``edgekit package`` without ``env`` runs in this process (in ``cwd`` while it runs), as the
    console script's ``main`` (its converter children are this test process's shared ones,
    ``_warm_converters``); everything else, and a package command given its own environment, in a
    child process. ``timeout`` bounds the child; an in-process run is bounded by the product's own
    step timeouts."""
    argv = [str(a) for a in args]
    if argv[:1] == ["package"] and env is None:
        import contextlib

        with contextlib.chdir(cwd or os.getcwd()):
            return edgekit_in_process(argv)
    return subprocess.run([sys.executable, "-m", "edgekit.cli", *argv], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd or ROOT, timeout=timeout)


def edgekit_in_process(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``edgekit ARGV`` through the console script's ``main`` in this process, its output captured;
    edgekit's log handler (bound to the stderr of the run that set it up) is removed after it."""
    import contextlib
    import io
    import logging

    from edgekit import logs

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = edgekit_main(argv)
            except SystemExit as stop:  # argparse's usage errors
                code = stop.code if isinstance(stop.code, int) else 1
    finally:
        logger = logging.getLogger("edgekit")
        for handler in [h for h in logger.handlers if getattr(h, "_edgekit", False)]:
            logger.removeHandler(handler)
        logs._pending, logs._detail = None, False
    return subprocess.CompletedProcess(["edgekit", *argv], code, out.getvalue(), err.getvalue())


def device_cli(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m edgekit.run` in a child process."""
    return subprocess.run([sys.executable, "-m", "edgekit.run", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd or ROOT, timeout=timeout)


def assert_user_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """One `error:` line naming the problem, a `fix:` line, exit 1, no traceback, not an internal error."""
    assert result.returncode == 1, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert any(line.strip().startswith("fix: ") for line in result.stderr.splitlines()), result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def device_matches(package: Path, x: np.ndarray, expected: np.ndarray, tolerance: float, work: Path,
                   artifacts: tuple[str, ...] = ("tflite", "onnx")) -> None:
    """``python -m edgekit.run`` on each artifact, ``x`` saved as .npy, gives ``expected`` within ``tolerance``."""
    np.save(work / "device_in.npy", x)
    for artifact in artifacts:
        run = device_cli(package, "-i", work / "device_in.npy", "--artifact", artifact,
                         "--output", work / "device_out.npy")
        assert run.returncode == 0, run.stderr
        got = np.load(work / "device_out.npy")
        assert got.shape == expected.shape and np.abs(got - expected).max() < tolerance, artifact


def edgekit_with(tmp_path: Path, added: dict[str, str], profiles: bool = True
                 ) -> Callable[..., subprocess.CompletedProcess[str]]:
    """A copy of the edgekit package with ``added`` files (path below ``edgekit/`` -> text) and a
    ``child(*args)`` that runs ``python ARGS`` on it in ``tmp_path``: a toy format, source, kind or
    step is one new module, nothing else edited. ``profiles``: the checkout's device profiles (the
    copy has no ``targets/``; without them a package is for this machine alone)."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "edgekit", site / "edgekit", ignore=shutil.ignore_patterns("__pycache__"))
    add_to_copy(site, added)
    env = {**os.environ, "PYTHONPATH": str(site), "TF_CPP_MIN_LOG_LEVEL": "3",
           **({"EDGEKIT_PROFILES": str(ROOT / "targets")} if profiles else {})}

    def child(*args: object, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=timeout)

    child.site = site  # type: ignore[attr-defined]
    return child


def add_to_copy(site: Path, added: dict[str, str]) -> None:
    """Write files into ``edgekit_with``'s copy (``site``), dedented."""
    for relative, text in added.items():
        path = site / "edgekit" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


# A toy module's function (inserted into its text: the module runs in the copy, without tests/):
# a dense layer with a ReLU (``w``, ``b`` in an .npz) as a float ONNX graph
DENSE_LAYER_ONNX = '''
def dense_layer_onnx(weights, path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    with np.load(weights) as stored:
        w, b = stored["w"].astype(np.float32), stored["b"].astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "w"], ["z"], name="dense"),
         helper.make_node("Add", ["z", "b"], ["y"], name="bias"),
         helper.make_node("Relu", ["y"], ["activation"], name="relu")],
        "linear", [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", w.shape[0]])],
        [helper.make_tensor_value_info("activation", TensorProto.FLOAT, ["batch", w.shape[1]])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return w.shape
'''


def dense_layer_files(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``DENSE_LAYER_ONNX``'s layer as ``dense.linear.npz`` and 240 calibration rows as
    ``calibration.npz`` in ``folder``: (w, b, x)."""
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=8).astype(np.float32) * 0.1
    np.savez(folder / "dense.linear.npz", w=w, b=b)
    x = rng.normal(size=(240, 16)).astype(np.float32)
    np.savez(folder / "calibration.npz", x=x)
    return w, b, x


def _write_heads_onnx(folder: Path) -> Path:
    """One input, two heads of different kinds (5 class scores, one value) as a float ONNX graph,
    with 200 calibration and 200 evaluation rows (``heads.npz``, ``heads_eval.npz``), no labels."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(size=(16, 5)).astype(np.float32), rng.normal(size=(16, 1)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "w1"], ["logits"], name="kind_dense"),
         helper.make_node("Softmax", ["logits"], ["kind"], name="kind_softmax", axis=-1),
         helper.make_node("MatMul", ["features", "w2"], ["age"], name="age_dense")],
        "heads", [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("kind", TensorProto.FLOAT, ["batch", 5]),
         helper.make_tensor_value_info("age", TensorProto.FLOAT, ["batch", 1])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "heads.onnx"))
    x = rng.normal(size=(400, 16)).astype(np.float32)
    np.savez(folder / "heads.npz", features=x[:200])
    np.savez(folder / "heads_eval.npz", features=x[200:])
    return folder / "heads.onnx"


@pytest.fixture(scope="session")
def heads_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``_write_heads_onnx``'s model packaged for ONNX (seconds: no TensorFlow); its data beside it.
    Read-only: copy it to change it."""
    def build(folder: Path) -> Path:
        source = _write_heads_onnx(folder)
        result = edgekit_cli("package", source, "-c", folder / "heads.npz", "--eval", folder / "heads_eval.npz",
                             "--format", "onnx", "-o", folder / "out")
        assert result.returncode == 0, result.stderr[-3000:]
        return folder / "out" / "heads.edgekit"

    return built_once(tmp_path_factory, "heads", build)
