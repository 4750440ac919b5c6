"""ONNX Runtime backend: one ``InferenceSession`` per artifact, created once.

Providers are taken in the order given (e.g. TensorRT -> CUDA -> CPU) but only those that
``onnxruntime.get_available_providers()`` lists, so a GPU build and a CPU build run the same
package. QDQ artifacts keep float32 IO (quantization is inside the graph); an artifact with
integer IO is quantized/dequantized here like the LiteRT backend does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...machine import compiled_cache
from ...errors import BackendUnavailableError, PackageError
from ..backend import Backend, TensorInfo, dequantize, quantize

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)
OPTIMIZED_NAME = "model.optimized.onnx"  # the optimized graph kept in the compiled cache
_ONNX_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise BackendUnavailableError(
            "ONNX Runtime is not installed", hint="pip install 'edgekit[onnx]'  (installs onnxruntime)"
        ) from None
    return onnxruntime


def _with_engine_cache(provider: Any, compiled_dir: Path) -> Any:
    """TensorRT builds engines once per device: point its engine and timing caches at the cache."""
    name, options = (provider if isinstance(provider, tuple) else (provider, {}))
    if name != "TensorrtExecutionProvider":
        return provider
    trt_dir = compiled_dir / "tensorrt"
    trt_dir.mkdir(parents=True, exist_ok=True)
    return (name, {
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(trt_dir),
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": str(trt_dir),
        **options,
    })


def providers_from_profile(section: dict[str, Any]) -> list[str | tuple[str, dict[str, Any]]]:
    """``[runtime.onnxruntime]``: providers in order, with ``provider_options`` where given."""
    names = section.get("providers", ["CPUExecutionProvider"])
    options = section.get("provider_options", {})
    return [(name, dict(options[name])) if name in options else name for name in names]


def choose_providers(preferred: Sequence[str | tuple[str, dict[str, Any]]], available: Sequence[str]) -> list[Any]:
    """``preferred`` filtered to what this onnxruntime build has; CPU always last as the fallback."""
    chosen: list[Any] = []
    for entry in preferred:
        name = entry[0] if isinstance(entry, tuple) else entry
        if name in available and name not in [c[0] if isinstance(c, tuple) else c for c in chosen]:
            chosen.append(entry)
    if "CPUExecutionProvider" not in [c[0] if isinstance(c, tuple) else c for c in chosen]:
        chosen.append("CPUExecutionProvider")
    return chosen


def _cache_unusable(directory: Path, reason: str) -> None:
    import warnings

    from ...machine.cache import describe_space
    from ...errors import CacheWarning

    warnings.warn(CacheWarning(
        f"the compiled-model cache at {directory} cannot be written ({reason}; {describe_space(directory)}): "
        "running without a compiled-model cache"
    ), stacklevel=4)


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    libraries = ("onnxruntime",)
    suffixes = (".onnx", ".ort")

    @classmethod
    def available(cls) -> str | None:
        try:
            return f"onnxruntime {_ort().__version__}"
        except BackendUnavailableError:
            return None

    @classmethod
    def profile_options(cls, section: dict[str, Any], cache_dir: Callable[[str], Path | None]) -> dict[str, Any]:
        """Providers from the profile; compiled copies (optimized graph, TensorRT engines) per provider list."""
        providers = providers_from_profile(section)
        compiled = cache_dir(str([p[0] if isinstance(p, tuple) else p for p in providers]))
        return {"providers": providers, "compiled_dir": str(compiled) if compiled is not None else None}

    def __init__(
        self,
        path: str,
        threads: int | None = None,
        providers: Sequence[str | tuple[str, dict[str, Any]]] = DEFAULT_PROVIDERS,
        compiled_dir: str | None = None,
        graph_optimizations: bool = True,
        spin: bool = True,
        **_: object,
    ) -> None:
        """``compiled_dir``: where this device keeps the optimized model and TensorRT engines.
        ``graph_optimizations=False`` runs the QDQ graph node by node (no int8 kernel fusion): the
        quantization as written, which validation compares with the fused kernels.
        ``spin=False``: intra-op threads sleep between runs instead of spinning for the next one
        (a server decoding requests on the same cores gets them back)."""
        ort = _ort()
        self.path = path
        self.threads = threads
        self.spin = spin
        self.requested_providers = [p[0] if isinstance(p, tuple) else p for p in providers]
        self.providers = choose_providers(providers, ort.get_available_providers())
        if compiled_dir is not None:
            self.providers = [_with_engine_cache(p, Path(compiled_dir)) for p in self.providers]
        self.optimized_from_cache = False
        self.cache_replaced: str | None = None  # why the compiled entry was emptied before this load
        optimized = Path(compiled_dir) / OPTIMIZED_NAME if compiled_dir and graph_optimizations else None
        self._session = None
        with compiled_cache.held(compiled_dir) if compiled_dir else contextlib.nullcontext():
            if compiled_dir is not None:
                self.cache_replaced = compiled_cache.heal(compiled_dir)  # a truncated or edited copy is never read
            self._session = self._load(ort, path, threads, optimized, graph_optimizations)
        self._inputs = [self._info(t) for t in self._session.get_inputs()]
        self._outputs = [self._info(t) for t in self._session.get_outputs()]
        self._input_names = [t.name for t in self._inputs]
        self._output_names = [t.name for t in self._outputs]
        self.active_providers = self._session.get_providers()

    def _load(self, ort: Any, path: str, threads: int | None, optimized: Path | None,
              graph_optimizations: bool) -> Any:
        if optimized is not None and optimized.is_file():
            try:
                session = self._open(ort, str(optimized), threads, already_optimized=True)
                self.optimized_from_cache = True
                return session
            except PackageError:  # the runtime cannot read its own copy any more: rebuild it from the artifact
                optimized.unlink(missing_ok=True)
        if not graph_optimizations:
            return self._open(ort, path, threads, already_optimized=True)  # level ORT_DISABLE_ALL
        return self._open_and_save(ort, path, threads, optimized)

    def _open(self, ort: Any, model: str, threads: int | None, already_optimized: bool,
              save_to: Path | None = None) -> Any:
        options = self._options(ort, threads, already_optimized=already_optimized, spin=self.spin)
        if save_to is not None:
            options.optimized_model_filepath = str(save_to)
        try:
            session = ort.InferenceSession(model, sess_options=options, providers=self.providers)
            self._opened = (model, already_optimized)  # what placement() profiles again
            return session
        except Exception as exc:  # onnxruntime raises its own exception types for bad models
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PackageError(f"ONNX Runtime cannot load {model}: {first}") from None

    def _open_and_save(self, ort: Any, path: str, threads: int | None, optimized: Path | None) -> Any:
        """A session on the artifact; its optimized graph is saved for the next load when the cache
        can take it. A cache that cannot (full, read-only) costs the saved copy, never the model."""
        if optimized is None:
            return self._open(ort, path, threads, already_optimized=False)
        partial = optimized.with_name(f".{optimized.name}.{os.getpid()}.partial")
        try:
            optimized.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _cache_unusable(optimized.parent, exc.strerror or str(exc))
            return self._open(ort, path, threads, already_optimized=False)
        try:
            session = self._open(ort, path, threads, already_optimized=False, save_to=partial)
        except PackageError as exc:
            partial.unlink(missing_ok=True)
            session = self._open(ort, path, threads, already_optimized=False)  # the artifact itself is bad: raises
            _cache_unusable(optimized.parent, exc.message.split(": ", 1)[-1])
            return session  # the artifact loads: only saving the optimized copy failed
        try:
            if not partial.exists() or partial.stat().st_size == 0:
                raise OSError("ONNX Runtime wrote no optimized model")
            os.replace(partial, optimized)  # published whole, for the next load on this device
            compiled_cache.seal(optimized.parent, only=[OPTIMIZED_NAME])
        except OSError as exc:
            _cache_unusable(optimized.parent, exc.strerror or str(exc))
        finally:
            partial.unlink(missing_ok=True)
        return session

    @staticmethod
    def _options(ort: Any, threads: int | None, already_optimized: bool, spin: bool = True) -> Any:
        options = ort.SessionOptions()
        options.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_DISABLE_ALL if already_optimized else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        )
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return options

    def describe(self) -> dict[str, object]:
        return {
            "backend": self.name,
            "library": self.available(),
            "threads": self.threads,
            "spin": self.spin,
            "providers": self.active_providers,
            "requested_providers": self.requested_providers,
            "optimized_model_from_cache": self.optimized_from_cache,
            **({"compiled_cache_replaced": self.cache_replaced} if self.cache_replaced else {}),
        }

    def placement(self) -> dict[str, object]:
        """Node -> provider from one profiled run of a second session on the same graph and providers
        (ONNX Runtime records each node's provider in its profile). Nodes ONNX Runtime keeps on the
        CPU on purpose (shape arithmetic, host copies) are not counted as a fallback."""
        from .placement_profile import profiled_placement

        model, already_optimized = self._opened
        options = self._options(_ort(), self.threads, already_optimized=already_optimized, spin=self.spin)
        return profiled_placement(_ort(), model, options, self.providers, self.requested_providers, self._inputs)

    @staticmethod
    def _info(tensor: Any) -> TensorInfo:
        shape = tuple(d if isinstance(d, int) else -1 for d in tensor.shape)
        return TensorInfo(name=tensor.name, shape=shape, dtype=np.dtype(_ONNX_DTYPES.get(tensor.type, np.float32)))

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        given = {name: (x if x.dtype == info.dtype else quantize(x, info))
                 for name, info, x in zip(self._input_names, self._inputs, feeds)}
        results = self._session.run(self._output_names, given)
        if raw:
            return list(results)
        return [dequantize(np.asarray(r), out) for r, out in zip(results, self._outputs)]

    def close(self) -> None:
        self._session = None
