"""A new format is one new folder: nothing else in edgekit is edited.

The toy format's artifact is a linear model (weights as ``.npy``) fitted to the float model's
outputs on the calibration data; its backend runs it with NumPy. The folder is added to a copy
of the edgekit package, and a child process using that copy must show the format in
`edgekit package --format` choices, `edgekit profiles`, the manifest, the runtime's choice of
artifact/backend and the server's model metadata.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, edgekit_with

pytestmark = pytest.mark.slow

TOY_INIT = '''
"""Toy: a linear model fitted to the float model, stored as .npy weights, run with NumPy."""

from ...conversion import forms
from ..base import Accepts, Builder, Format
from .backend import LinearBackend


def _builder() -> Builder:
    from .builder import LinearBuilder

    return LinearBuilder()


FORMAT = Format(name="toy", description="linear model fitted to the float outputs (NumPy)", builder=_builder,
                backends=(LinearBackend,), extra="numpy", serving_platform="toy_linear", bare_suffixes=(".linear",),
                accepts=(Accepts(forms.TF_GRAPH),))
'''

TOY_BACKEND = '''
import numpy as np

from ..backend import Backend, TensorInfo


class LinearBackend(Backend):
    name = "numpy-linear"
    suffixes = (".npz",)

    @classmethod
    def available(cls):
        return f"numpy {np.__version__}"

    def __init__(self, path, threads=None, **options):
        with np.load(path) as weights:
            self.w, self.b, shape = weights["w"], weights["b"], weights["input_shape"]
        self._inputs = [TensorInfo("image", tuple(int(d) for d in shape), np.dtype(np.float32))]
        self._outputs = [TensorInfo("output", (-1, self.w.shape[1]), np.dtype(np.float32))]

    def _invoke(self, feeds, raw=False):
        (x,) = feeds
        return [(x.reshape(len(x), -1) @ self.w + self.b).astype(np.float32)]
'''

TOY_BUILDER = '''
from ...conversion import worker
from ...fsutil import sha256_file
from ...manifest import Artifact
from ..building import Builder, BuildResult
from .convert import FitRequest, fit

PATH = "toy/model.linear.npz"


class LinearBuilder(Builder):
    name = "toy"
    backend = "numpy-linear"

    def build(self, context, on_progress=None):
        output = context.package_dir / PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        report = worker.convert(fit, FitRequest(context.model.path, context.calibration_npy, str(output)),
                                what="toy fit")
        return BuildResult(Artifact(format="toy", path=PATH, sha256=sha256_file(output),
                                    bytes=output.stat().st_size, precision="float32",
                                    converter={"tool": "numpy.linalg.lstsq", "seconds": report.seconds}))
'''

TOY_CONVERT = '''
import time
from dataclasses import dataclass

import numpy as np

from ...conversion.messages import Message


@dataclass(frozen=True)
class FitRequest(Message):
    saved_model: str
    calibration_npy: str
    output: str


@dataclass(frozen=True)
class FitReport(Message):
    seconds: float


def fit(request: FitRequest) -> FitReport:
    import tensorflow as tf

    started = time.perf_counter()
    x = np.load(request.calibration_npy)
    signature = tf.saved_model.load(request.saved_model).signatures["serving_default"]
    (name,) = signature.structured_input_signature[1].keys()
    y = list(signature(**{name: tf.constant(x)}).values())[0].numpy()
    design = np.concatenate([x.reshape(len(x), -1), np.ones((len(x), 1), np.float32)], axis=1)
    solution = np.linalg.lstsq(design, y, rcond=None)[0]
    shape = np.array([-1, *x.shape[1:]])
    np.savez(request.output, w=solution[:-1].astype(np.float32), b=solution[-1].astype(np.float32),
             input_shape=shape)
    return FitReport(seconds=round(time.perf_counter() - started, 3))
'''

PROBE = '''
import json, subprocess, sys
import numpy as np
import edgekit
from edgekit.cli.main import parser
from edgekit.server.app import ServerOptions
from edgekit.server.dataplane import DataPlane

package, x_npy = sys.argv[1], sys.argv[2]
with edgekit.load(package) as model:
    chosen = (model.artifact.format, model.backend.name)
    outputs = model.predict(np.load(x_npy)).shape
plane = DataPlane([edgekit.load(package)], ServerOptions())
metadata = plane.lookup("digits").metadata()
print(json.dumps({"chosen": chosen, "outputs": outputs, "platform": metadata["platform"],
                  "artifact": metadata["parameters"]["artifact"], "edgekit": edgekit.__file__}))
'''


def test_a_toy_format_is_one_folder(tmp_path):
    python = edgekit_with(tmp_path, {"formats/toy/__init__.py": TOY_INIT, "formats/toy/backend.py": TOY_BACKEND,
                                     "formats/toy/builder.py": TOY_BUILDER, "formats/toy/convert.py": TOY_CONVERT},
                         profiles=False)
    site = python.site

    def edgekit_cli(*args):
        return python("-m", "edgekit.cli", *args, timeout=600)

    assert "toy" in edgekit_cli("package", "--help").stdout  # --format choices
    profiles = edgekit_cli("profiles")
    assert profiles.returncode == 0 and "toy" in profiles.stdout and "numpy-linear" in profiles.stdout
    built = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "--eval", EVAL, "--format", "toy",
                        "--allow-accuracy-drop", "-o", tmp_path / "out")
    assert built.returncode == 0, built.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "digits.edgekit" / "manifest.json").read_text())
    assert [a["format"] for a in manifest["artifacts"]] == ["toy"]
    assert manifest["validation"]["artifacts"]["toy"]["measured"] is True
    import numpy as np

    from tests.conftest import load_npz

    x, _ = load_npz(EVAL)
    np.save(tmp_path / "x.npy", (x[:3] / 255).astype(np.float32))
    probe = python("-c", PROBE, tmp_path / "out" / "digits.edgekit", tmp_path / "x.npy")
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["edgekit"].startswith(str(site))  # the copy with the new folder, nothing else
    assert found["chosen"] == ["toy", "numpy-linear"] and found["outputs"] == [3, 10]
    assert found["platform"] == "toy_linear" and found["artifact"] == "toy"
    run = python("-m", "edgekit.run", tmp_path / "out" / "digits.edgekit", "-i", tmp_path / "x.npy", "--artifact",
                 "toy", "-v")
    assert run.returncode == 0 and "artifact=toy" in run.stderr and "backend=numpy-linear" in run.stderr, run.stderr
