"""The runtime's default on a CPU of the kind a package was timed on is the fastest passing
artifact measured there, across formats and precisions (``Manifest.speed``); elsewhere, or with a
profile named for another device, the profile's order stays, and ``-v`` says which rule chose."""

from __future__ import annotations

import pytest

from edgekit.device.devices import Profile
from edgekit.device.runtime import candidates, why_chosen
from edgekit.errors import PackageError
from edgekit.machine.facts import DeviceFacts
from edgekit.manifest import Artifact, Manifest, TensorSpec

PREFER = [("tflite", "litert"), ("onnx", "onnxruntime")]


def _manifest(order: list[tuple[str, str, float]], kind: str | None = None) -> Manifest:
    artifacts = [
        Artifact("tflite", "tflite/model.int8.tflite", "0" * 64, 1, precision="int8"),
        Artifact("tflite", "tflite/model.float16.tflite", "1" * 64, 1, precision="float16", variant="float16",
                 converter={"float_fallback_for": "tflite"}),
        Artifact("onnx", "onnx/model.int8.onnx", "2" * 64, 1, precision="int8"),
        Artifact("onnx", "onnx/model.float32.onnx", "3" * 64, 1, precision="float32", variant="float32",
                 converter={"float_fallback_for": "onnx"}),
    ]
    speed = {"by_cpu_kind": {kind or DeviceFacts.read().cpu_kind(): {
        "order": [{"artifact": a, "backend": b, "ms": ms, "precision": "", "float": False} for a, b, ms in order]}}}
    spec = TensorSpec(name="x", shape=[1, 4], dtype="float32")
    return Manifest(name="m", edgekit_version="", created="", source={}, inputs=[spec], outputs=[spec],
                    artifacts=artifacts, speed=speed)


GENERIC = Profile(name="generic", description="", prefer=PREFER)


def test_the_fastest_passing_artifact_measured_on_this_cpu_kind_runs_first_across_formats():
    manifest = _manifest([("onnx-float32", "onnxruntime", 0.2), ("tflite", "litert", 0.5), ("onnx", "onnxruntime", 0.9)])
    order = [(a.key, b.name) for a, b in candidates(manifest, GENERIC)]
    assert order[:3] == [("onnx-float32", "onnxruntime"), ("tflite", "litert"), ("onnx", "onnxruntime")]
    assert ("tflite-float16", "litert") in order[3:]  # not measured: after the measured ones, the profile's place
    why = why_chosen(manifest, GENERIC, manifest.artifact("onnx-float32"), "onnxruntime")
    assert "fastest passing artifact measured on this CPU kind" in why and "tflite 0.5 ms" in why


def test_another_cpu_kind_or_a_profile_for_another_device_keeps_the_profiles_order():
    elsewhere = _manifest([("onnx-float32", "onnxruntime", 0.2)], kind="aarch64 | Raspberry Pi 5 | asimd")
    assert candidates(elsewhere, GENERIC)[0][0].key == "tflite"
    why = why_chosen(elsewhere, GENERIC, elsewhere.artifact("tflite"), "litert")
    assert "timed on another CPU kind (aarch64 | Raspberry Pi 5 | asimd)" in why
    here = _manifest([("onnx-float32", "onnxruntime", 0.2)])
    other_device = Profile(name="gpu-box", description="", prefer=PREFER, detect={"cuda": True, "arch": ["none"]})
    assert candidates(here, other_device)[0][0].key == "tflite"
    pinned = Profile(name="generic", description="", prefer=PREFER, use_tuned=False)
    assert candidates(here, pinned)[0][0].key == "tflite"


def test_a_tampered_speed_record_is_a_package_error():
    data = _manifest([("tflite", "litert", 0.5)]).to_dict()
    kind = next(iter(data["speed"]["by_cpu_kind"]))
    data["speed"]["by_cpu_kind"][kind]["order"][0]["ms"] = "fast"
    with pytest.raises(PackageError, match="ms as a number"):
        Manifest.from_dict(data)
    data["speed"] = []
    with pytest.raises(PackageError, match="manifest.speed must be a dict"):
        Manifest.from_dict(data)
    assert Manifest.from_dict(_manifest([("tflite", "litert", 0.5)]).to_dict()).speed_order(kind)[0].ms == 0.5
