"""LiteRT (TFLite) backend: ``ai_edge_litert``, else ``tflite_runtime``, else ``tensorflow.lite``.

The interpreter is built and its tensors allocated once. A batch whose size differs from the
allocated one resizes the input only when the model's batch dimension is dynamic (and only
on a change of size); otherwise samples run one at a time through the same interpreter.
XNNPACK is LiteRT's default CPU delegate.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, PackageError
from ..backend import Backend, TensorInfo, dequantize, quantize
from ..native_output import quiet_native_stderr

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
        with quiet_native_stderr():
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


def _delegated_ops(originals: list[dict[str, Any]], partitions: list[dict[str, Any]]) -> set[int]:
    """Indices of the original ops inside some DELEGATE op: walking back from each partition's
    outputs through the ops that produced them, stopping at the partition's inputs."""
    producer = {tensor: op for op in originals for tensor in op["outputs"]}
    delegated: set[int] = set()
    for partition in partitions:
        boundary = {int(t) for t in partition["inputs"]}
        pending = [int(t) for t in partition["outputs"]]
        while pending:
            tensor = pending.pop()
            op = producer.get(tensor)
            if tensor in boundary or op is None or op["index"] in delegated:
                continue
            delegated.add(op["index"])
            pending.extend(int(t) for t in op["inputs"] if int(t) >= 0)
    return delegated


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


def output_tensor_names(interpreter: Any) -> dict[str, str]:
    """Each signature output -> the tensor behind it (named by the op that writes it, e.g.
    ``serving_default_output_1_output`` or ``StatefulPartitionedCall_1:0``, not by its layer)."""
    names = {int(d["index"]): d["name"] for d in interpreter.get_tensor_details()}
    found = {}
    for key in interpreter.get_signature_list():
        for output, detail in interpreter.get_signature_runner(key).get_output_details().items():
            found[output] = names.get(int(detail["index"]), "")
    return found


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
        """``[runtime.litert]``: ``delegate`` (an external delegate library), ``delegate_options``,
        and ``xnnpack = false`` to run LiteRT's own kernels without its default XNNPACK delegate."""
        options: dict[str, Any] = {} if section.get("xnnpack", True) else {"xnnpack": False}
        if not section.get("delegate"):
            return options
        return options | {"delegate": section["delegate"], "delegate_options": dict(section.get("delegate_options", {}))}

    def __init__(
        self,
        path: str,
        threads: int | None = None,
        delegate: str | None = None,
        delegate_options: dict[str, Any] | None = None,
        xnnpack: bool = True,
        **_: object,
    ) -> None:
        self.path = path
        self.xnnpack = xnnpack
        self.xnnpack_failed: str | None = None  # why XNNPACK was dropped at the first run, if it was
        self.requested_delegate = delegate
        self.library = _interpreter_module()[1]
        self.threads = threads
        self.delegate = None
        delegates = []
        if delegate:
            loaded = load_delegate(delegate, delegate_options)
            if loaded is not None:
                delegates.append(loaded)
                self.delegate = delegate
        self._open(with_delegates=xnnpack, delegates=delegates)
        dynamic = all(info.shape[:1] == (-1,) for info in self._inputs)
        self._fixed_batch = None if dynamic else int(self._allocated[0][0])  # computed once: run() asks per call

    @property
    def fixed_batch(self) -> int | None:
        return self._fixed_batch

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        try:
            return self._invoke_once(feeds, raw)
        except ValueError as exc:
            if "Tensor data is null" not in str(exc) or not self.xnnpack or self.delegate:
                raise
            # XNNPACK took a tensor the graph reads back out of its partition (seen on a quantized
            # output that is requantized for a concat inside the graph): LiteRT's own kernels run it
            from ...logs import loud

            loud("edgekit.litert").warning(
                "XNNPACK could not run %s (%s): running it on LiteRT's own kernels instead", self.path,
                str(exc).split(".")[0])
            self.xnnpack, self.xnnpack_failed = False, str(exc).split(".")[0]
            self._open(with_delegates=False)
            return self._invoke_once(feeds, raw)

    def _open(self, with_delegates: bool, delegates: list[Any] | None = None) -> None:
        """The interpreter and its signature's tensors, as allocated (at first load, or again
        without XNNPACK)."""
        self._interpreter = open_interpreter(self.path, self.threads, with_delegates=with_delegates,
                                             delegates=delegates)
        inputs, outputs = _signature_details(self._interpreter)
        self._input_indices = [d["index"] for d in inputs]
        self._inputs = [_info(d) for d in inputs]
        self._output_indices = [d["index"] for d in outputs]
        self._outputs = [_info(d) for d in outputs]
        self._allocated = [tuple(int(v) for v in d["shape"]) for d in inputs]

    def _invoke_once(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
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
            "delegate": self.delegate or ("XNNPACK (default CPU delegate)" if self.xnnpack else
                                          f"none (LiteRT kernels{': XNNPACK failed, ' + self.xnnpack_failed if self.xnnpack_failed else ''})"),
        }

    def placement(self) -> dict[str, object]:
        """Delegate partitions from the interpreter's graph: after delegation it holds the original
        ops plus one DELEGATE op per partition; an original op belongs to a partition when it lies
        between that DELEGATE's inputs and outputs. The rest run on LiteRT's own kernels. XNNPACK,
        LiteRT's default CPU delegate, is reported but not "requested": only an external delegate
        (a GPU, an Edge TPU) is an accelerator whose ops can fall back."""
        from ..placement import placement, unreadable_placement

        details = getattr(self._interpreter, "_get_ops_details", None)
        if details is None:
            return unreadable_placement(f"{self.library} does not list its ops")
        ops = details()
        partitions = [op for op in ops if op["op_name"] == "DELEGATE"]
        delegated = _delegated_ops([op for op in ops if op["op_name"] != "DELEGATE"], partitions)
        requested = [self.requested_delegate] if self.requested_delegate else []
        active = [self.delegate] if self.delegate else []
        where = self.delegate or ("XNNPACK" if self.xnnpack else "delegate")
        left = Counter(op["op_name"] for op in ops if op["op_name"] != "DELEGATE" and op["index"] not in delegated)
        by_target = {where: len(delegated)} if delegated else {}
        if left:
            by_target["LiteRT kernels (CPU)"] = sum(left.values())
        return placement(by_target, requested, active, left, "LiteRT delegate partitions", partitions=len(partitions),
                         not_delegated=dict(left.most_common()))

    def close(self) -> None:
        self._interpreter = None
