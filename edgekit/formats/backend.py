"""Device-side runtimes: one module per runtime library, one small interface.

A Backend is created once per artifact (interpreter/session built and tensors allocated at
load), then ``run`` is called many times. Callers pass and receive float32 arrays; the
backend quantizes inputs and dequantizes outputs with the artifact's own parameters;
``raw=True`` returns outputs in the artifact's native dtype, and input already in that dtype
is fed unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np


class TensorInfo(NamedTuple):
    """One input or output as the runtime sees it (a NamedTuple: docs/architecture.md, cold start)."""

    name: str
    shape: tuple[int, ...]  # -1 where the dimension is dynamic
    dtype: np.dtype
    scale: float = 0.0  # 0 means not quantized
    zero_point: int = 0

    @property
    def quantized(self) -> bool:
        return self.scale != 0.0 and self.dtype.kind in "iu"

    @property
    def _constants(self) -> tuple[np.float32, np.float32, np.float32, np.float32, np.float32]:
        return _quantization_constants(self.dtype, self.scale, self.zero_point)


@lru_cache(maxsize=1024)
def _quantization_constants(dtype: np.dtype, scale: float, zero_point: int) -> tuple[np.float32, ...]:
    """1/scale, zero point, dtype limits and scale as float32 scalars, computed once per tensor."""
    limits = np.iinfo(dtype)
    return (np.float32(1.0 / scale), np.float32(zero_point), np.float32(limits.min), np.float32(limits.max),
            np.float32(scale))


class Backend(ABC):
    name: ClassVar[str]  # also the name of its device-profile table, [runtime.NAME]
    suffixes: ClassVar[tuple[str, ...]]  # artifact file suffixes this backend runs
    libraries: ClassVar[tuple[str, ...]] = ()  # top-level modules of the runtime library (a tuned choice's identity)

    @classmethod
    def profile_options(cls, section: dict[str, Any], cache_dir: Callable[[str], Path | None]) -> dict[str, Any]:
        """Constructor options from the device profile's ``[runtime.NAME]`` table.

        ``cache_dir(key)`` is a directory for this artifact x device x runtime version x ``key``
        where compiled copies can be kept, or None when the cache cannot be written.
        """
        return {}

    @classmethod
    @abstractmethod
    def available(cls) -> str | None:
        """The runtime library's name and version if importable here, else None."""

    @abstractmethod
    def __init__(self, path: str, threads: int | None = None, **options: object) -> None:
        """Load once. ``options`` come from the device profile (delegates, providers, caches)."""

    _inputs: list[TensorInfo]  # set by each backend's __init__
    _outputs: list[TensorInfo]

    @property
    def inputs(self) -> list[TensorInfo]:
        return self._inputs

    @property
    def outputs(self) -> list[TensorInfo]:
        return self._outputs

    def run(self, x: np.ndarray | Sequence[np.ndarray] | Mapping[str, np.ndarray], raw: bool = False) -> list[np.ndarray]:
        """One batch through the model: every output, in ``outputs`` order.

        ``x`` is one array (a one-input model), a sequence in ``inputs`` order, or a mapping by
        input name. Float input is quantized with the artifact's parameters; input already in
        the artifact's dtype (e.g. int8) is fed as is. Outputs are float32, or the artifact's
        native dtype with ``raw``. A model with a fixed batch size runs bigger batches in
        slices of that size (the last one padded, its padding dropped from the outputs).
        """
        feeds = self.feeds(x)
        batch = int(feeds[0].shape[0]) if feeds[0].ndim else 1
        fixed = self.fixed_batch
        if fixed is None or batch == fixed:
            return self._invoke(feeds, raw)
        parts = []
        for start in range(0, batch, fixed):
            chunk = [f[start : start + fixed] for f in feeds]
            n = len(chunk[0])
            if n < fixed:
                chunk = [np.concatenate([c, np.repeat(c[-1:], fixed - n, axis=0)]) for c in chunk]
            parts.append([out[:n] for out in self._invoke(chunk, raw)])
        return [np.concatenate([part[k] for part in parts]) for k in range(len(self.outputs))]

    @abstractmethod
    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        """One call of the runtime with one array per input (``inputs`` order), batch sizes agreeing."""

    @property
    def fixed_batch(self) -> int | None:
        """The batch size the model was exported with, or None when it takes any."""
        first = self.inputs[0].shape[0] if self.inputs and self.inputs[0].shape else -1
        return None if first == -1 else int(first)

    def feeds(self, x: np.ndarray | Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """``x`` as one array per input, in ``inputs`` order; names are checked, never guessed."""
        count = len(self.inputs)
        if type(x) is list and len(x) == count and (count == 1 or len({len(f) for f in x}) == 1):
            return x  # the common case (the Model's checked feeds), first
        if type(x) is np.ndarray and count == 1:
            return [x]
        names = [t.name for t in self.inputs]
        if isinstance(x, Mapping):
            missing, extra = [n for n in names if n not in x], [n for n in x if n not in names]
            if missing or extra:
                from ..errors import InputError

                raise InputError(f"inputs named {sorted(x)} do not match the model's inputs {names}",
                                 hint="pass one array per model input, by name")
            return [np.asarray(x[n]) for n in names]
        if isinstance(x, np.ndarray):
            x = [x]
        feeds = list(x)
        if len(feeds) != len(names):
            from ..errors import InputError

            raise InputError(f"{len(feeds)} input array(s) given; the model takes {len(names)}: {names}",
                             hint="pass one array per model input (a mapping by name is clearest)")
        sizes = {int(f.shape[0]) if f.ndim else 1 for f in feeds}
        if len(sizes) > 1:
            from ..errors import InputError

            raise InputError(f"the inputs hold different numbers of samples ({sorted(sizes)})",
                             hint="give every input the same batch size")
        return feeds

    def warmup(self, runs: int = 1) -> None:
        """Run a zero batch of one so lazy allocation and kernel selection happen at load time."""
        if any(d == -1 for info in self.inputs for d in info.shape[1:]):
            return  # dynamic spatial size: nothing representative to run
        feeds = [np.zeros((self.fixed_batch or 1, *info.shape[1:]),
                          np.float32 if info.quantized or info.dtype.kind == "f" else info.dtype)
                 for info in self.inputs]
        for _ in range(runs):
            self.run(feeds)

    def describe(self) -> dict[str, object]:
        """What actually runs: library version, delegate/providers, threads."""
        return {"backend": self.name, "library": self.available()}

    def placement(self) -> dict[str, object]:
        """Which ops ran on which accelerator (``edgekit.formats.placement``'s shape); a backend
        whose runtime gives no account says so."""
        from .placement import unreadable_placement

        return unreadable_placement(f"{self.name} does not report where its ops run")

    def close(self) -> None:
        """Release the runtime's resources."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def quantize(x: np.ndarray, info: TensorInfo) -> np.ndarray:
    """``clip(round(x / scale) + zero_point)`` in the tensor's integer dtype (hot path: in place)."""
    if not info.quantized:
        return x.astype(info.dtype, copy=False)
    inverse, zero_point, low, high, _ = info._constants
    q = np.multiply(x, inverse, dtype=np.float32)
    np.rint(q, out=q)
    q += zero_point
    np.minimum(q, high, out=q)
    np.maximum(q, low, out=q)
    return q.astype(info.dtype)


def dequantize(q: np.ndarray, info: TensorInfo) -> np.ndarray:
    """``(q - zero_point) * scale`` as float32."""
    if not info.quantized:
        return q.astype(np.float32, copy=False)
    _, zero_point, _, _, scale = info._constants
    x = q.astype(np.float32)
    x -= zero_point
    x *= scale
    return x
