"""A mixed artifact measured slower than its float fallback: the runtime on that CPU kind runs
the fallback first; on another CPU kind, or when it was faster, the order stays."""

from __future__ import annotations

import os

from edgekit.manifest import Artifact
from edgekit.packaging.speed import is_mixed
from edgekit.device.runtime import _float_before_slower_mixed


def _artifacts(speedup: float, arch: str) -> dict[str, Artifact]:
    mixed = Artifact("tflite", "tflite/model.int8.tflite", "0" * 64, 1, precision="int8+float (3 layers)",
                     details={"speed_vs_float": {"speedup": speedup, "arch": arch, "float_artifact": "tflite-float16"}})
    fallback = Artifact("tflite", "tflite/model.float16.tflite", "1" * 64, 1, precision="float16",
                        variant="float16", converter={"float_fallback_for": "tflite"})
    return {a.key: a for a in (mixed, fallback)}


ORDER = [("tflite", "litert"), ("onnx", "onnxruntime"), ("tflite-float16", "litert")]


def test_the_float_fallback_goes_first_where_the_mixed_artifact_was_measured_slower():
    present = _artifacts(0.8, os.uname().machine)
    assert _float_before_slower_mixed(ORDER, present) == [("tflite-float16", "litert"), ("tflite", "litert"),
                                                         ("onnx", "onnxruntime")]


def test_another_formats_int8_runs_before_a_format_whose_int8_was_measured_slower_than_its_float():
    """A package whose preferred format's INT8 is slower here than its float fallback still runs
    INT8 where it has one: another format's plain INT8 goes first, then that format's pair."""
    present = _artifacts(0.8, os.uname().machine)
    present["onnx"] = Artifact("onnx", "onnx/model.int8.onnx", "2" * 64, 1, precision="int8")
    assert _float_before_slower_mixed(ORDER, present) == [("onnx", "onnxruntime"), ("tflite-float16", "litert"),
                                                         ("tflite", "litert")]
    assert _float_before_slower_mixed(ORDER, _artifacts(1.3, os.uname().machine) | {"onnx": present["onnx"]}) == ORDER
    # another build of the slow format (a scheme variant: the same plan) is not taken for a faster INT8
    variant = Artifact("tflite", "tflite/model.int8.arm.tflite", "3" * 64, 1, precision="int8+float (3 layers)",
                       variant="arm")
    order = [("tflite", "litert"), ("tflite-arm", "litert"), ("tflite-float16", "litert")]
    assert _float_before_slower_mixed(order, _artifacts(0.8, os.uname().machine) | {"tflite-arm": variant}) == [
        ("tflite-float16", "litert"), ("tflite", "litert"), ("tflite-arm", "litert")]


def test_the_order_stays_where_it_was_faster_or_measured_on_another_cpu_kind():
    assert _float_before_slower_mixed(ORDER, _artifacts(1.3, os.uname().machine)) == ORDER
    assert _float_before_slower_mixed(ORDER, _artifacts(0.8, "some-other-arch")) == ORDER


def test_mixed_precision_labels():
    assert is_mixed("int8+float (2 layers)") and is_mixed("int8+int16 (1 layer)")
    assert not is_mixed("int8") and not is_mixed("int8+float tail") and not is_mixed("float16")


def test_a_mixed_artifact_no_faster_than_float_runs_after_it_as_the_build_line_says():
    """A 1.00x plan has its int8 accuracy cost for nothing: the build line says the runtime
    prefers the float fallback, and the runtime does (``FASTER_THAN_FLOAT``)."""
    present = _artifacts(1.0, os.uname().machine)
    assert _float_before_slower_mixed(ORDER, present)[0] == ("tflite-float16", "litert")
    assert _float_before_slower_mixed(ORDER, _artifacts(1.06, os.uname().machine)) == ORDER


def test_int8_within_timing_noise_of_float_is_not_said_to_pay():
    """A 40-step GRU's ExecuTorch INT8 at 1.67 ms beside its float at 1.68 ms read "INT8 pays
    here ... 1.00x the fastest float", two lines after the build line said it ran 0.99x its float."""
    from edgekit.packaging.ranking import Timed, verdict_line

    close = (Timed("executorch", "executorch", "int8+float (3 layers)", False, 1.67),
             Timed("executorch-float32", "executorch", "float32", True, 1.68))
    line = verdict_line(close)
    assert "INT8 runs as fast as float" in line and "pays" not in line
    faster = (Timed("tflite", "litert", "int8", False, 0.5), Timed("tflite-float32", "litert", "float32", True, 1.0))
    assert verdict_line(faster).startswith("INT8 pays here")
