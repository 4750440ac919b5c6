"""ONNX's device rules: which INT8 scheme build (``schemes.py``) a device runs, what a device
profile's ``[quantization] onnx`` may list, and where this CPU's kernels saturate. Light: a
device imports it with the format."""

from __future__ import annotations

from typing import Any

from ..base import DeviceRules
from .schemes import DEFAULT, SCHEMES, U8S8_REDUCED, artifact_for_cpu, exact_key, exact_name, saturates, \
    schemes_for_cpu, schemes_named


class SchemeRules(DeviceRules):
    default_builds = (DEFAULT.name,)
    artifact_example = f"{U8S8_REDUCED.artifact_key} on x86 without VNNI; {DEFAULT.artifact_key}-{DEFAULT.name} " \
                       "is the main ONNX build exactly"
    builds_help = "ONNX INT8 schemes: " + "; ".join(f"{s.name} ({s.artifact_key}) for {s.why}" for s in SCHEMES.values())

    def artifact_for_device(self, present: Any, facts: Any) -> str | None:
        return artifact_for_cpu(present, facts.arch, facts.cpu_flags, facts.cuda)

    def exact_key(self, name: str) -> str:
        return exact_key(name)

    def exact_name(self, key: str) -> str:
        return exact_name(key)

    def saturates(self, key: str, backend: str, facts: Any) -> bool:
        return backend == "onnxruntime" and saturates(key, facts.arch, facts.cpu_flags)

    def saturation_fix(self) -> str:
        return f"repackage with --profile x86-cpu (an {U8S8_REDUCED.artifact_key} build for this CPU), or run the " \
               "tflite artifact"

    def profile_builds(self, value: Any, where: str) -> list[str]:
        from ...errors import EdgekitError

        if not isinstance(value, list) or not value or not all(isinstance(s, str) for s in value):
            raise EdgekitError(f"{where}: quantization.onnx must be a list of scheme names",
                               hint=f'write [quantization] onnx = ["{DEFAULT.name}"]')
        return [s.name for s in schemes_named(value, where)]

    def describe_device(self, facts: Any) -> str:
        order = ", ".join(s.artifact_key for s in schemes_for_cpu(facts.arch, facts.cpu_flags))
        return f"ONNX INT8 artifacts run here in order: {order}"


RULES = SchemeRules()
__all__ = ["RULES", "SCHEMES"]
