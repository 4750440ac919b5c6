"""LiteRT (TFLite) backend: ``ai_edge_litert``, else ``tflite_runtime``, else ``tensorflow.lite``.

The interpreter is built and its tensors allocated once. A batch whose size differs from the
allocated one resizes the input only when the model's batch dimension is dynamic (and only
on a change of size); otherwise samples run one at a time through the same interpreter.
XNNPACK is LiteRT's default CPU delegate.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, PackageError
from ..backend import Backend, TensorInfo, dequantize, quantize

_MODULES = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter", "tensorflow.lite")


def _interpreter_module() -> tuple[Any, str]:
    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        root = importlib.import_module(name.split(".")[0])
        return module, f"{name.split('.')[0]} {getattr(root, '__version__', '?')}"
    raise BackendUnavailableError(
        "no TFLite runtime is installed (tried ai_edge_litert, tflite_runtime, tensorflow.lite)",
        hint="pip install 'edgekit[tflite]'  (installs ai-edge-litert)",
    )


def load_delegate(library: str, options: dict[str, Any] | None = None) -> Any:
    """An external delegate (e.g. ``libedgetpu.so.1`` for a Coral Edge TPU), or None if it does not load."""
    module, _ = _interpreter_module()
    loader = getattr(module, "load_delegate", None)
    if loader is None:
        return None
    try:
        return loader(library, {k: str(v) for k, v in (options or {}).items()})
    except (ValueError, OSError, RuntimeError):
        return None


def open_interpreter(
    path: str, threads: int | None = None, with_delegates: bool = True, delegates: list[Any] | None = None
) -> Any:
    """A LiteRT interpreter for ``path`` with tensors allocated; clear errors for bad models."""
    module, _ = _interpreter_module()
    kwargs: dict[str, Any] = {"model_path": path, "num_threads": threads}
    if delegates:
        kwargs["experimental_delegates"] = delegates
    if not with_delegates:
        kwargs["experimental_op_resolver_type"] = module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    try:
        with _quiet_native_stderr():
            interpreter = module.Interpreter(**kwargs)
            interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        text = str(exc)
        if "custom op" in text:
            op = text.split("custom op:", 1)[-1].split(".")[0].strip() if "custom op:" in text else "?"
            raise PackageError(
                f"{path} uses the custom op {op}, which this LiteRT build does not have",
                hint="rebuild the model without custom ops, or register the op's kernel",
            ) from None
        raise PackageError(f"LiteRT cannot load {path}: {text.strip().splitlines()[0]}") from None
    return interpreter


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """LiteRT's C++ prints "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on every load;
    keep it out of users' output unless they asked for detail (-v sets EDGEKIT_VERBOSE=1). Errors
    still reach the caller: the interpreter raises them as Python exceptions."""
    if os.environ.get("EDGEKIT_VERBOSE") == "1" or os.environ.get("EDGEKIT_DEBUG") == "1":
        yield
        return
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (captured, closed): nothing to hide
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _signature_details(interpreter: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Input and output details named as the model names them (its signature's keys, e.g. "image",
    "output_0"), not as the converter named the tensors ("serving_default_image:0"); a model
    without exactly one signature keeps the tensor names."""
    try:
        signatures = interpreter.get_signature_list()
    except (AttributeError, ValueError, RuntimeError):
        signatures = {}
    if len(signatures) == 1:
        runner = interpreter.get_signature_runner(next(iter(signatures)))
        named = [({**d, "name": key}) for key, d in runner.get_input_details().items()]
        outputs = [({**d, "name": key}) for key, d in runner.get_output_details().items()]
        return named, outputs
    return list(interpreter.get_input_details()), list(interpreter.get_output_details())


def _info(detail: dict[str, Any]) -> TensorInfo:
    scale, zero_point = detail.get("quantization", (0.0, 0))
    signature = detail.get("shape_signature", detail["shape"])
    return TensorInfo(
        name=detail["name"],
        shape=tuple(int(d) for d in signature),
        dtype=np.dtype(detail["dtype"]),
        scale=float(scale),
        zero_point=int(zero_point),
    )


class LiteRTBackend(Backend):
    name = "litert"
    libraries = tuple(dict.fromkeys(m.split(".")[0] for m in _MODULES))
    suffixes = (".tflite",)

    @classmethod
    def available(cls) -> str | None:
        try:
            return _interpreter_module()[1]
        except BackendUnavailableError:
            return None

    @classmethod
    def profile_options(cls, section: dict[str, Any], cache_dir: Callable[[str], Path | None]) -> dict[str, Any]:
        """``[runtime.litert]``: ``delegate`` (an external delegate library) and ``delegate_options``."""
        if not section.get("delegate"):
            return {}
        return {"delegate": section["delegate"], "delegate_options": dict(section.get("delegate_options", {}))}

    def __init__(
        self,
        path: str,
        threads: int | None = None,
        delegate: str | None = None,
        delegate_options: dict[str, Any] | None = None,
        **_: object,
    ) -> None:
        self.path = path
        self.library = _interpreter_module()[1]
        self.threads = threads
        self.delegate = None
        delegates = []
        if delegate:
            loaded = load_delegate(delegate, delegate_options)
            if loaded is not None:
                delegates.append(loaded)
                self.delegate = delegate
        self._interpreter = open_interpreter(path, threads, delegates=delegates)
        inputs, outputs = _signature_details(self._interpreter)
        self._input_indices = [d["index"] for d in inputs]
        self._inputs = [_info(d) for d in inputs]
        self._output_indices = [d["index"] for d in outputs]
        self._outputs = [_info(d) for d in outputs]
        self._allocated = [tuple(int(v) for v in d["shape"]) for d in inputs]
        dynamic = all(info.shape[:1] == (-1,) for info in self._inputs)
        self._fixed_batch = None if dynamic else int(self._allocated[0][0])  # computed once: run() asks per call

    @property
    def fixed_batch(self) -> int | None:
        return self._fixed_batch

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        shapes = [f.shape for f in feeds]
        if shapes != self._allocated:  # a new batch size (or spatial size) on a dynamic model
            for index, shape in zip(self._input_indices, shapes):
                self._interpreter.resize_tensor_input(index, list(shape))
            self._interpreter.allocate_tensors()
            self._allocated = shapes
        for index, info, x in zip(self._input_indices, self._inputs, feeds):
            self._interpreter.set_tensor(index, x if x.dtype == info.dtype else quantize(x, info))
        self._interpreter.invoke()
        results = []
        for index, out in zip(self._output_indices, self._outputs):
            value = self._interpreter.get_tensor(index)
            results.append(value.copy() if raw else dequantize(value, out))
        return results

    def describe(self) -> dict[str, object]:
        return {
            "backend": self.name,
            "library": self.library,
            "threads": self.threads,
            "delegate": self.delegate or "XNNPACK (default CPU delegate)",
        }

    def close(self) -> None:
        self._interpreter = None
