"""ExecuTorch backend: a ``.pte`` program loaded once with ExecuTorch's Python runtime, its
``forward`` method run per sample (programs are exported with batch 1).

ExecuTorch's runtime imports torch before its C++ extension, so this backend needs torch on the
device (``edgekit[executorch]``); XNNPACK's kernels ship in that extension. The program keeps
float inputs and outputs: its int8 arithmetic is inside the XNNPACK delegate. A program has no
tensor names; edgekit's programs return them from a constant method (``IO_METHOD``), and a
program without one names its tensors ``input_0``, ``output_0``, ... by position.

Threads: ExecuTorch has one thread pool per process, and XNNPACK binds a loaded program to the
pool it was loaded with; resetting the pool for another thread count under a loaded program
crashes the process (glibc aborts on the freed pool's mutex). So a backend asking for another
count first unloads every other program in the process, then resets the pool and loads its own
(``_ThreadPool``); an unloaded backend loads again on its next call. One count per process
costs nothing; a benchmark interleaving counts pays a load per switch (in its untimed call).
"""

from __future__ import annotations

import json
import os
import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, PackageError
from ..backend import Backend, TensorInfo
from .ops import LAYOUT_OPS

IO_METHOD = "edgekit_io"  # the constant method edgekit's programs return their tensor names from (JSON)

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
        from ..native_output import quiet_native_stderr

        _inductor_cache_of_this_process()
        try:
            with quiet_native_stderr():  # cpuinfo and thread-pool lines from its C++ on import
                import torch

                portable_lib = _runtime_without_exir()
                from executorch.runtime import Runtime, Verification
        except ImportError as exc:
            raise BackendUnavailableError(f"ExecuTorch's runtime is not installed ({exc.name} is missing)",
                                          hint="pip install 'edgekit[executorch]' (it installs torch too)") from None
        from .verify import check_loadable

        check_loadable(path)  # a corrupt program crashes a child, not this process
        self.path, self.threads = path, (max(1, int(threads)) if threads is not None else None)
        self._torch, self._pool = torch, portable_lib
        self._runtime, self._verification = Runtime.get(), Verification.Minimal
        self._program: Any = None
        self._method: Any = None
        try:
            with quiet_native_stderr():  # the pool's first use reads the CPU (cpuinfo lines)
                _POOL.bind(self)
            program = self._load()
        except Exception as exc:  # noqa: BLE001 - the runtime raises RuntimeError/ValueError for a bad file
            raise PackageError(f"ExecuTorch cannot load {path}: {exc}",
                               hint="the package may be corrupt: build it again") from None
        meta = self._method.metadata
        inputs, outputs = self._names(program, meta.num_inputs(), meta.num_outputs(), path)
        self._inputs = [self._info(name, meta.input_tensor_meta(i)) for i, name in enumerate(inputs)]
        self._outputs = [self._info(name, meta.output_tensor_meta(i)) for i, name in enumerate(outputs)]

    @staticmethod
    def _names(program: Any, inputs: int, outputs: int, path: str) -> tuple[list[str], list[str]]:
        """The names ``IO_METHOD`` returns, checked against the program's own counts."""
        if IO_METHOD not in program.method_names:
            return [f"input_{i}" for i in range(inputs)], [f"output_{i}" for i in range(outputs)]
        try:
            names = json.loads(program.load_method(IO_METHOD).execute([])[0])
            found = [str(n) for n in names["inputs"]], [str(n) for n in names["outputs"]]
        except Exception as exc:  # noqa: BLE001 - a bad value is a bad file, whatever raised
            raise PackageError(f"ExecuTorch program {path}: its {IO_METHOD} method does not hold tensor names ({exc})",
                               hint="the package may be corrupt: build it again") from None
        if (len(found[0]), len(found[1])) != (inputs, outputs):
            raise PackageError(f"ExecuTorch program {path} names {len(found[0])} inputs and {len(found[1])} outputs "
                               f"but has {inputs} and {outputs}", hint="the package may be corrupt: build it again")
        return found

    @staticmethod
    def _info(name: str, meta: Any) -> TensorInfo:
        code = int(meta.dtype())
        if code not in _DTYPES:
            raise PackageError(f"ExecuTorch program tensor {name} has a dtype edgekit does not feed (ScalarType {code})")
        return TensorInfo(name, tuple(int(d) for d in meta.sizes()), np.dtype(_DTYPES[code]))

    def describe(self) -> dict[str, object]:
        return {"backend": self.name, "library": self.available(),
                "threads": self.threads or self._pool._threadpool_get_thread_count(),
                "delegate": "XNNPACK (lowered into the program)"}

    def placement(self) -> dict[str, object]:
        """From the program's own execution plan: each delegate call (a partition lowered to
        XNNPACK, opaque here: counted once) and each kernel call left to ExecuTorch's portable
        kernels, by operator. Portable compute ops are XNNPACK's fallback; layout copies
        (``_to_dim_order_copy``) are listed but are not compute."""
        from ..placement import placement, unreadable_placement

        try:
            from ..native_output import quiet_native_stderr

            # the reader alone, not the compiler; it imports its generated flatbuffer classes as it reads
            with quiet_native_stderr(), _exir_as_an_empty_package(), open(self.path, "rb") as stream:
                from executorch.exir._serialize._program import deserialize_pte_binary

                read = deserialize_pte_binary(stream.read())
        except Exception as exc:  # noqa: BLE001 - an exir that cannot read the file: say so, run on
            return unreadable_placement(f"ExecuTorch's program reader failed ({type(exc).__name__}: {exc})")
        plan = next(p for p in getattr(read, "program", read).execution_plan if p.name == "forward")
        delegates: Counter[str] = Counter()
        kernels: Counter[str] = Counter()
        for chain in plan.chains:
            for instruction in chain.instructions:
                args = instruction.instr_args
                if type(args).__name__ == "DelegateCall":
                    delegates[plan.delegates[args.delegate_index].id] += 1
                elif type(args).__name__ == "KernelCall":
                    kernels[plan.operators[args.op_index].name.split("::")[-1]] += 1
        partitions = sum(delegates.values())
        compute = Counter({op: n for op, n in kernels.items() if op not in LAYOUT_OPS})
        by_target = {"XNNPACK partitions": partitions} if partitions else {}
        if kernels:
            by_target["portable kernels (CPU)"] = sum(kernels.values())
        return placement(by_target, ["XNNPACK"], ["XNNPACK"] if partitions else [], compute,
                         "ExecuTorch execution plan (delegate calls, kernel calls)", partitions=partitions,
                         not_delegated=dict(kernels.most_common()))

    @property
    def fixed_batch(self) -> int | None:
        return 1  # edgekit exports ExecuTorch programs with batch 1

    def _load(self) -> Any:
        """The program and its ``forward`` method, loaded on the pool as it is now."""
        if self._method is None:
            from ..native_output import quiet_native_stderr

            with quiet_native_stderr():
                self._program = self._runtime.load_program(self.path, verification=self._verification)
                self._method = self._program.load_method("forward")
        return self._program

    def unload(self) -> None:
        """Free the program (and the XNNPACK runtime bound to the thread pool); the next call loads it again."""
        self._method = self._program = None

    def close(self) -> None:
        self.unload()
        _POOL.forget(self)

    def _invoke(self, feeds: list[np.ndarray], raw: bool) -> list[np.ndarray]:
        _POOL.bind(self)
        self._load()
        tensors = [self._torch.from_numpy(np.ascontiguousarray(x, dtype=info.dtype))
                   for x, info in zip(feeds, self._inputs)]
        produced = self._method.execute(tensors)
        return [np.asarray(t.numpy(), dtype=np.float32 if info.dtype.kind == "f" and not raw else info.dtype)
                for t, info in zip(produced, self._outputs)]


class _ThreadPool:
    """The process's one ExecuTorch thread pool and the backends with a program loaded on it."""

    def __init__(self) -> None:
        self.loaded: weakref.WeakSet[ExecuTorchBackend] = weakref.WeakSet()

    def bind(self, backend: ExecuTorchBackend) -> None:
        """Make the pool what ``backend`` asks for before it loads or runs: where that is another
        thread count, every other program is unloaded first (none may outlive its pool)."""
        wanted = backend.threads
        if wanted is not None and backend._pool._threadpool_get_thread_count() != wanted:
            for other in list(self.loaded):
                other.unload()
            backend.unload()
            self.loaded.clear()
            from ..native_output import quiet_native_stderr

            with quiet_native_stderr():  # the new pool's threadpool.cpp lines
                backend._pool._unsafe_reset_threadpool(wanted)
        self.loaded.add(backend)

    def forget(self, backend: ExecuTorchBackend) -> None:
        self.loaded.discard(backend)


_POOL = _ThreadPool()


def _inductor_cache_of_this_process() -> None:
    """Importing ExecuTorch's runtime makes PyTorch's compile cache folder (``torchinductor_<user>``
    in the system temp folder), empty, and nothing removed it: it goes in a folder of this process,
    removed when it exits (a cache the user set is kept)."""
    import atexit
    import shutil
    import tempfile

    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="edgekit-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    atexit.register(shutil.rmtree, folder, True)


def _runtime_without_exir() -> Any:
    """ExecuTorch's runtime extension, imported without its compiler.

    ``portable_lib`` imports ``executorch.exir._warnings`` (two decorators), and that import runs
    ``executorch/exir/__init__.py``: the whole compiler stack (torch.export, torchao), ~10 s
    before the first inference on this machine against ~2 s for torch itself
    (``_exir_as_an_empty_package``)."""
    with _exir_as_an_empty_package():
        from executorch.extension.pybindings import portable_lib
    _quantized_kernels()
    return portable_lib


@contextmanager
def _exir_as_an_empty_package() -> Iterator[None]:
    """While it lasts, ``executorch.exir`` is an empty package over its own folder, so importing
    one of its modules (the runtime's ``_warnings``, the program reader ``_serialize``) runs that
    module and what it imports, not ``executorch/exir/__init__.py``: the compiler (torch.export,
    dynamo, torchao), 4-8 s on a device for a runtime or a report that never compiles. Then the
    empty package and the modules imported under it are forgotten, so a later ``import
    executorch.exir`` (the build side) imports the real package whole. Where the real one is
    already imported, or the folder is not found, nothing changes."""
    import importlib.util
    import sys
    import types

    if "executorch.exir" in sys.modules:
        yield
        return
    import executorch

    spec = importlib.util.find_spec("executorch.exir")
    if spec is None or not spec.submodule_search_locations:
        yield
        return
    before = set(sys.modules)
    empty = types.ModuleType("executorch.exir")
    empty.__path__ = list(spec.submodule_search_locations)
    sys.modules["executorch.exir"] = empty
    try:
        yield
    finally:
        for name in set(sys.modules) - before:
            if name == "executorch.exir" or name.startswith("executorch.exir."):
                del sys.modules[name]
        sys.modules.pop("executorch.exir", None)
        if getattr(executorch, "exir", None) is empty:
            delattr(executorch, "exir")


def _quantized_kernels() -> None:
    """ExecuTorch's quantized kernels (``quantized_decomposed::dequantize_per_channel.out``, ...):
    a program runs them where XNNPACK left a quantized op; the runtime extension has only the
    portable ones until this library is loaded."""
    try:
        import executorch.kernels.quantized  # noqa: F401
    except ImportError:
        pass
