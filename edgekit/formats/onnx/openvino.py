"""OpenVINO backend: the package's ONNX artifacts (float and QDQ INT8) on Intel/AMD x86 CPUs.

OpenVINO reads the ``.onnx`` file itself (no separate IR format: the QDQ graph is what its
low-precision transformations turn into int8 kernels), compiles it once per device, and keeps
the compiled blob in edgekit's compiled-model cache (``CACHE_DIR``), so the second load on a
device skips compilation. Inference precision is pinned to f32 for the parts of the graph that
are not quantized: on CPUs with bf16 support OpenVINO would otherwise run them in bf16, which is
not what validation measured.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...machine import compiled_cache
from ...errors import BackendUnavailableError, PackageError
from ..backend import Backend, TensorInfo, dequantize, quantize

_OV_DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8, "u8": np.uint8,
              "i16": np.int16, "i32": np.int32, "i64": np.int64, "boolean": np.bool_}


def _ov() -> Any:
    try:
        import openvino
    except ImportError:
        raise BackendUnavailableError(
            "OpenVINO is not installed", hint="pip install 'edgekit[openvino]'  (installs openvino; x86-64 CPUs)"
        ) from None
    return openvino


class OpenVINOBackend(Backend):
    name = "openvino"
    libraries = ("openvino",)
    suffixes = (".onnx",)

    @classmethod
    def available(cls) -> str | None:
        try:
            return f"openvino {_ov().__version__.split('-')[0]}"
        except BackendUnavailableError:
            return None

    @classmethod
    def profile_options(cls, section: dict[str, Any], cache_dir: Callable[[str], Path | None]) -> dict[str, Any]:
        """``[runtime.openvino]``: device (CPU) and precision hint; the compiled blob per device."""
        device = str(section.get("device", "CPU"))
        compiled = cache_dir(f"openvino-{device}")
        return {"device": device, "precision": str(section.get("precision", "f32")),
                "compiled_dir": str(compiled) if compiled is not None else None}

    def __init__(self, path: str, threads: int | None = None, device: str = "CPU", precision: str = "f32",
                 compiled_dir: str | None = None, **_: object) -> None:
        ov = _ov()
        self.path = path
        self.threads = threads
        self.device = device
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        # the compiled blob: "hit" (read back), "written" (compiled now and kept), "replaced: why"
        # (a bad blob was removed, then compiled again), "off" (no writable cache)
        self.compiled_cache = "off"
        if compiled_dir is None:
            self._compiled = self._compile(ov, path, device, config, None)
        else:
            with compiled_cache.held(compiled_dir):
                self._compiled = self._compile_cached(ov, path, device, config, Path(compiled_dir))
        self.compiled_dir = compiled_dir if self.compiled_cache != "off" else None
        self._request = self._compiled.create_infer_request()
        self._inputs = [self._info(port) for port in self._compiled.inputs]
        self._outputs = [self._info(port) for port in self._compiled.outputs]

    def _compile_cached(self, ov: Any, path: str, device: str, config: dict[str, Any], folder: Path) -> Any:
        """Compiled through the blob cache: a blob that fails its seal is removed first, and one
        OpenVINO cannot import (another version's, damaged in a way the seal predates) is removed
        and compiled again, never left to fail every load."""
        replaced = compiled_cache.heal(folder)
        had_blob = replaced is None and any(p.suffix == ".blob" for p in folder.glob("*"))
        try:
            folder.mkdir(parents=True, exist_ok=True)
            compiled = self._compile(ov, path, device, config, str(folder))
        except OSError:
            return self._compile(ov, path, device, config, None)  # a cache that cannot be written costs the blob
        except PackageError as exc:
            if not had_blob:
                raise
            compiled_cache.clear(folder)
            compiled = self._compile(ov, path, device, config, str(folder))
            replaced = f"OpenVINO could not read the blob ({exc.message.split(': ', 1)[-1][:120]})"
        before = compiled_cache.problem(folder) is None and had_blob
        compiled_cache.seal(folder)
        self.compiled_cache = f"replaced: {replaced}" if replaced else ("hit" if before else "written")
        return compiled

    @staticmethod
    def _compile(ov: Any, path: str, device: str, config: dict[str, Any], cache_dir: str | None) -> Any:
        core = ov.Core()
        if cache_dir is not None:
            try:
                core.set_property({"CACHE_DIR": cache_dir})
            except RuntimeError as exc:
                raise OSError(str(exc)) from None
        try:
            return core.compile_model(core.read_model(path), device, config)
        except Exception as exc:  # OpenVINO raises RuntimeError subclasses for models it cannot read or compile
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PackageError(f"OpenVINO cannot load {path}: {first}",
                               hint="run it with ONNX Runtime instead (--backend onnxruntime)") from None

    @staticmethod
    def _info(port: Any) -> TensorInfo:
        shape = tuple(d.get_length() if d.is_static else -1 for d in port.get_partial_shape())
        names = port.get_names()
        name = port.get_any_name() if names else ""
        dtype = _OV_DTYPES.get(port.get_element_type().get_type_name(), np.float32)
        return TensorInfo(name=name, shape=shape, dtype=np.dtype(dtype))

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        given = [np.ascontiguousarray(x if x.dtype == info.dtype else quantize(x, info))
                 for info, x in zip(self._inputs, feeds)]
        results = self._request.infer(given)
        produced = [np.array(results[port]) for port in self._compiled.outputs]  # copies: the request reuses its buffers
        if raw:
            return produced
        return [dequantize(r, out) for r, out in zip(produced, self._outputs)]

    def describe(self) -> dict[str, object]:
        return {"backend": self.name, "library": self.available(), "threads": self.threads, "device": self.device,
                "compiled_cache": self.compiled_cache}

    def placement(self) -> dict[str, object]:
        """Layers of the compiled (runtime) model per device and per runtime precision: which layers
        run int8 kernels and which were left at f32/bf16 (OpenVINO's own per-layer account)."""
        from collections import Counter

        from ..placement import placement, unreadable_placement

        try:
            ops = self._compiled.get_runtime_model().get_ordered_ops()
            info = [op.get_rt_info() for op in ops]
            layers = [(str(i["layerType"].astype(str)), str(i["runtimePrecision"].astype(str))) for i in info]
        except Exception as exc:  # openvino raises its own types; placement is a report, never a failure
            return unreadable_placement(f"OpenVINO's runtime model could not be read: {exc}"[:200])
        compute = [(kind, precision) for kind, precision in layers if kind not in ("Const", "Parameter", "Result")]
        requested = [self.device] if self.device.split(":")[0] not in ("CPU",) else []
        return placement({self.device: len(compute)}, requested, [self.device], Counter(),
                         "OpenVINO runtime model (layer -> device, runtime precision)",
                         precisions=dict(Counter(precision for _, precision in compute).most_common()),
                         float_layers=dict(Counter(kind for kind, precision in compute
                                                   if precision in ("f32", "bf16", "f16")).most_common(10)))

    def close(self) -> None:
        self._request = None
        self._compiled = None
