"""CoreML backend (macOS only): ``coremltools.models.MLModel`` loaded once, ``predict`` per batch.

CoreML prediction exists only on macOS; elsewhere ``available()`` says no without importing
coremltools (2 s and 0.5 GB), so Linux devices never pay for it. The ML programs edgekit
writes have batch size 1: a batch runs sample by sample through the same loaded model.
"""

from __future__ import annotations

import platform
import sys
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, PackageError
from ..backend import Backend, TensorInfo


class CoreMLBackend(Backend):
    name = "coreml"
    libraries = ("coremltools",)
    suffixes = (".mlpackage", ".mlmodel")

    @classmethod
    def available(cls) -> str | None:
        if sys.platform != "darwin":
            return None
        try:
            import coremltools
        except ImportError:
            return None
        return f"coremltools {coremltools.__version__} (macOS {platform.mac_ver()[0]})"

    def __init__(self, path: str, threads: int | None = None, **_: object) -> None:
        if sys.platform != "darwin":
            raise BackendUnavailableError(
                "CoreML models run only on macOS/iOS",
                hint="use the package's tflite or onnx artifact on this device (--artifact tflite|onnx)",
            )
        try:
            from .tools import coremltools

            ct = coremltools()
        except ImportError:
            raise BackendUnavailableError("coremltools is not installed", hint="pip install coremltools") from None
        try:
            self._model: Any = ct.models.MLModel(path, compute_units=ct.ComputeUnit.ALL)
        except Exception as exc:
            raise PackageError(f"CoreML cannot load {path}: {exc}") from None
        spec = self._model.get_spec()
        from .names import source_name

        self._feed_names = [i.name for i in spec.description.input]  # as CoreML names them
        self._inputs = [
            TensorInfo(source_name(i.name), tuple(int(d) for d in i.type.multiArrayType.shape), np.dtype(np.float32))
            for i in spec.description.input
        ]
        self._outputs = [
            TensorInfo(o.name, tuple(int(d) for d in o.type.multiArrayType.shape), np.dtype(np.float32))
            for o in spec.description.output
        ]

    @property
    def fixed_batch(self) -> int | None:
        return 1  # CoreML artifacts are converted with batch 1

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        per_sample = [self._model.predict({name: x.astype(np.float32) for name, x in zip(self._feed_names, feeds)})]
        return [
            np.concatenate([np.asarray(result[out.name], dtype=np.float32) for result in per_sample])
            for out in self._outputs
        ]

    def placement(self) -> dict[str, object]:
        """Per-operation preferred compute device from CoreML's compute plan (``MLComputePlan``,
        macOS 14.4+ with coremltools 8+): ops the plan keeps on the CPU although the model was
        loaded for all compute units are the fallback. Not available: said so."""
        from collections import Counter

        from ..placement import placement, unreadable_placement

        try:
            from .tools import coremltools

            ct = coremltools()
            from coremltools.models.compute_plan import MLComputePlan

            plan = MLComputePlan.load_from_path(path=self._model.get_compiled_model_path(),
                                                compute_units=ct.ComputeUnit.ALL)
            devices: Counter[str] = Counter()
            on_cpu: Counter[str] = Counter()
            for function in plan.model_structure.program.functions.values():
                for operation in function.block.operations:
                    usage = plan.get_compute_device_usage_for_mlprogram_operation(operation)
                    if usage is None or operation.operator_name == "const":
                        continue
                    device = type(usage.preferred_compute_device).__name__.removeprefix("ML").removesuffix(
                        "ComputeDevice")
                    devices[device] += 1
                    if device == "CPU":
                        on_cpu[operation.operator_name] += 1
        except Exception as exc:  # an older macOS or coremltools has no compute plan
            return unreadable_placement(f"CoreML's compute plan is not available here ({type(exc).__name__}: {exc})"[:200])
        accelerator = "NeuralEngine/GPU"  # compute units ALL: either one is what was asked for
        taken = devices.get("NeuralEngine", 0) + devices.get("GPU", 0)
        return placement(dict(devices), [accelerator], [accelerator] if taken else [], on_cpu,
                         "CoreML compute plan (operation -> preferred device)")

    def close(self) -> None:
        self._model = None
