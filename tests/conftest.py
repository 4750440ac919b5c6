"""Shared fixtures: the committed digits model and data, packages built once per session.

Every package here is built with the real converters and validated with the real LiteRT
runtime; TensorFlow runs only in child processes, as in production.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgekit.cli import cli
from edgekit.clitools import invoke

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "models" / "digits"
DIGITS_MODEL = DIGITS / "digits.keras"
CALIBRATION = DIGITS / "data" / "calibration.npz"
EVAL = DIGITS / "data" / "eval.npz"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["EDGEKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    os.environ["CI"] = os.environ.get("CI", "true")  # no spinners in test output


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``edgekit ARGS`` in-process as the console script does; (exit code, stdout, stderr)."""
    code = invoke(cli, [str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_tf(code: str) -> None:
    """Run TensorFlow/Keras code in a child process (keeps TF out of the test process)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, env=env, cwd=ROOT)


def load_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as data:
        return data["x"], data["y"]


@pytest.fixture(scope="session")
def digits_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits reference model packaged for TFLite (with an .ekpkg archive)."""
    import edgekit

    out = tmp_path_factory.mktemp("digits")
    result = edgekit.package(
        str(DIGITS_MODEL), str(CALIBRATION), str(out), eval=str(EVAL), archive=True
    )
    return result.path


def write_digit_images(root: Path, x: np.ndarray, y: np.ndarray) -> None:
    """Class sub-folders of 8x8 grayscale PNGs, like a user's image dataset."""
    from PIL import Image

    for i, (image, label) in enumerate(zip(x, y)):
        folder = root / str(int(label))
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image[..., 0], mode="L").save(folder / f"{i:04d}.png")


@pytest.fixture(scope="session")
def digits_all_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits model packaged for every target (tflite, onnx, coreml) from one calibration."""
    import edgekit
    from edgekit.targets import TARGETS

    out = tmp_path_factory.mktemp("digits_all")
    result = edgekit.package(str(DIGITS_MODEL), str(CALIBRATION), str(out), eval=str(EVAL), targets=list(TARGETS))
    return result.path


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
    path = tmp_path_factory.mktemp("sin") / "sin_model"
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
    path = tmp_path_factory.mktemp("lgamma") / "lgamma_model"
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
