"""ExecuTorch backend: a ``.pte`` program loaded once with ExecuTorch's Python runtime, its
``forward`` method run per sample (programs are exported with batch 1).

ExecuTorch's runtime imports torch before its C++ extension, so this backend needs torch on the
device (``edgekit[executorch]``); XNNPACK's kernels ship in that extension. The program keeps
float inputs and outputs: its int8 arithmetic is inside the XNNPACK delegate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, PackageError
from ..backend import Backend, TensorInfo

# ExecuTorch's ScalarType codes (c10) as NumPy dtypes: the ones a program's inputs and outputs use
_DTYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32,
           7: np.float64, 11: np.bool_}


class ExecuTorchBackend(Backend):
    name = "executorch"
    libraries = ("executorch", "torch")
    suffixes = (".pte",)

    @classmethod
    def available(cls) -> str | None:
        try:
            from importlib.metadata import PackageNotFoundError, version

            found = version("executorch")
        except PackageNotFoundError:
            return None
        return f"executorch {found}"

    def __init__(self, path: str, threads: int | None = None, **_: object) -> None:
        try:
            import torch
            from executorch.extension.pybindings import portable_lib
            from executorch.runtime import Runtime, Verification
        except ImportError as exc:
            raise BackendUnavailableError(f"ExecuTorch's runtime is not installed ({exc.name} is missing)",
                                          hint="pip install 'edgekit[executorch]' (it installs torch too)") from None
        if threads is not None:  # XNNPACK's thread pool is one per process
            portable_lib._unsafe_reset_threadpool(max(1, int(threads)))
        self._torch = torch
        try:
            program = Runtime.get().load_program(path, verification=Verification.Minimal)
            self._method: Any = program.load_method("forward")
        except Exception as exc:  # noqa: BLE001 - the runtime raises RuntimeError/ValueError for a bad file
            raise PackageError(f"ExecuTorch cannot load {path}: {exc}",
                               hint="the package may be corrupt: build it again") from None
        meta = self._method.metadata
        self._inputs = [self._info(f"input_{i}", meta.input_tensor_meta(i)) for i in range(meta.num_inputs())]
        self._outputs = [self._info(f"output_{i}", meta.output_tensor_meta(i)) for i in range(meta.num_outputs())]

    @staticmethod
    def _info(name: str, meta: Any) -> TensorInfo:
        code = int(meta.dtype())
        if code not in _DTYPES:
            raise PackageError(f"ExecuTorch program tensor {name} has a dtype edgekit does not feed (ScalarType {code})")
        return TensorInfo(name, tuple(int(d) for d in meta.sizes()), np.dtype(_DTYPES[code]))

    @property
    def fixed_batch(self) -> int | None:
        return 1  # edgekit exports ExecuTorch programs with batch 1

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        tensors = [self._torch.from_numpy(np.ascontiguousarray(x, dtype=info.dtype))
                   for x, info in zip(feeds, self._inputs)]
        produced = self._method.execute(tensors)
        return [np.asarray(t.numpy(), dtype=np.float32 if info.dtype.kind == "f" and not raw else info.dtype)
                for t, info in zip(produced, self._outputs)]
