"""Stage 5: every artifact against the float model, output by output.

Outputs are compared on the validation samples (device runtime on this machine, or outputs
a builder computed itself): SQNR, cosine and error per output and per joined quantity, the
task metric of outputs whose kind is known, the user's ``--metric``, and for formats whose
runtime fuses int8 kernels (ONNX) the quantization itself without fusion. The float model each
format converted (before quantization) is compared too, so that a loss in conversion is told
apart from a loss in quantization. ``gates.py`` judges the numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..conversion.messages import Message
from ..errors import OTHER_ROUTES, ConversionError, EdgekitError, PackageError, first_line
from ..formats import Builder, BuildResult, get_backend
from ..kinds import OutputKind, TaskResult, evaluate, infer
from ..comparison.metrics import OutputComparison, compare_outputs
from ..comparison.user_metric import run_metric
from ..device.model import align
from ..sources.description import SourceDescription
from .data import PreparedData


@dataclass(frozen=True)
class Judging:
    """How outputs are judged: their kinds (inferred, or ``--output-kind``), a ``--metric`` function."""

    kinds: dict[str, OutputKind] = field(default_factory=dict)  # output name -> its kind
    metric_spec: str | None = None
    metric: Callable[..., Any] | None = None
    max_accuracy_drop: float = 1.0


@dataclass(frozen=True)
class Measured:
    """One artifact against the float model: every output, and the summary the table shows (the
    labelled output's, else the worst output's: a collapsed head must not hide behind a good one)."""

    outputs: dict[str, OutputComparison]
    summary: OutputComparison
    tasks: dict[str, TaskResult] = field(default_factory=dict)  # output -> its task metric
    metric: TaskResult | None = None  # the --metric function's result
    # ONNX: the same artifact evaluated without int8 kernel fusion (the quantization itself)
    quantization: dict[str, OutputComparison] | None = None
    # the float model the format converted, before quantization: what the conversion alone lost
    conversion: dict[str, OutputComparison] | None = None
    conversion_by: str = ""
    # which arithmetic the verdict above is on: this CPU's runtime as a device runs it, or the
    # quantization itself for an artifact built for devices whose kernels compute it exactly
    judged_by: str = ""
    kernels: str = ""  # this CPU's fused int8 kernels in words (``Builder.fused_kernels``), where they run
    # judged as quantized: what this CPU's own fused kernels give (information, not the verdict)
    on_this_cpu: dict[str, OutputComparison] | None = None
    # the outputs judged, by name (sample-aligned with the reference): what the search's confirmation
    # re-cuts into halves without running the artifact again; never written to the manifest
    candidate: dict[str, np.ndarray] | None = field(default=None, repr=False, compare=False)
    # a quantized source's float model (--float-reference): the same outputs judged against it too
    against_float: Measured | None = None

    @property
    def degenerate(self) -> dict[str, str]:
        return {name: c.degenerate for name, c in self.outputs.items() if c.degenerate}


def infer_kinds(described: SourceDescription, reference: dict[str, np.ndarray], data: PreparedData,
                given: dict[str, str]) -> dict[str, OutputKind]:
    """Every output's kind: ``--output-kind`` (``given``, by output name), labels, the source's
    graph structure, then the float values on the validation samples."""
    structure = described.output_structure
    labelled = data.labels is not None or data.targets_y is not None
    return {name: infer(name, values, structure.get(name), labelled and name == data.labelled_output,
                        given.get(name)) for name, values in reference.items()}


def silent_outputs(reference: dict[str, np.ndarray]) -> dict[str, str]:
    """Outputs the float model gives the same value for on every validation sample: nothing there
    can tell a good artifact from a broken one, so the verdict on them says little."""
    found = {}
    for name, values in reference.items():
        flat = values.reshape(len(values), -1)
        if len(flat) > 1 and flat.size and not np.any(np.ptp(flat, axis=0) > 0):
            found[name] = (f"the float model's output {name!r} is the same for all {len(flat)} validation samples: "
                           "the data does not exercise it, so its verdict says little (give --eval data that "
                           "makes the model's answers differ)")
    return found


def measure(built: BuildResult, builder: Builder, staged: Path, data: PreparedData,
            reference: dict[str, np.ndarray], judging: Judging | None = None, quantized: bool = True,
            as_quantized: str | None = None) -> Measured | None:
    """The artifact's outputs vs the float reference; None when nothing here can run it.
    ``quantized=False`` (a float fallback): no unfused run and no separate float conversion.
    ``as_quantized``: why the verdict is on the quantization itself (``Builder.judged_as_quantized``)
    rather than on this CPU's fused kernels, which are then reported beside it."""
    judging = judging or Judging()
    names = list(reference)
    if built.evaluated_npy is not None and get_backend(builder.backend).available() is None:
        fused = _rows(_evaluated(built.evaluated_npy, names), data.rows)
    else:
        fused = _run_artifact(staged / built.artifact.path, builder.backend, data.evaluation, names, built)
    if fused is None:
        return None
    unfused = builder.unfused_backend_options() if quantized else None
    plain = None
    if unfused is not None:
        plain = _run_artifact(staged / built.artifact.path, builder.backend, data.evaluation, names, built, **unfused)
    verdict_on_plain = as_quantized is not None and plain is not None
    candidate = plain if verdict_on_plain else fused
    judged_by = ""
    if unfused is not None:
        judged_by = (f"as quantized (the QDQ graph without int8 kernel fusion: the exact int8 arithmetic of the "
                     f"devices it is built for): {as_quantized}" if verdict_on_plain
                     else f"on this CPU's fused int8 kernels ({builder.fused_kernels()}), as the runtime here runs it")
    judged = compared(reference, candidate, data, judging)
    quantization = None
    if plain is not None:
        quantization = {n: compare_outputs(reference[n], plain[n], kind=judging.kinds.get(n)) for n in names}
    on_this_cpu = None
    if verdict_on_plain:
        on_this_cpu = {n: compare_outputs(reference[n], fused[n], kind=judging.kinds.get(n)) for n in names}
    conversion = _float_conversion(built, builder, data, reference, judging) if quantized else None
    return replace(judged, quantization=quantization, conversion=conversion,
                   conversion_by=built.float_by if conversion else "", judged_by=judged_by,
                   kernels=builder.fused_kernels() if unfused is not None else "", on_this_cpu=on_this_cpu)


def compared(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray], data: PreparedData,
             judging: Judging) -> Measured:
    """``candidate``'s outputs against ``reference``'s, output by output: the comparison, the task
    metric of each output whose kind is known, the user's ``--metric``. (The float reference of a
    quantized source, ``--float-reference``, is judged by this as well.)"""
    names = list(reference)
    outputs = {n: compare_outputs(reference[n], candidate[n], data.targets_y if n == data.labelled_output else None,
                                  judging.kinds.get(n)) for n in names}
    if data.labelled_output is not None:
        summary = outputs[data.labelled_output]
    else:
        summary = min(outputs.values(), key=lambda c: c.sqnr_db if c.sqnr_db == c.sqnr_db else float("inf"))
    tasks = {}
    for name in names:
        labelled = name == data.labelled_output and data.targets_y is not None
        kind = judging.kinds.get(name) or (infer(name, reference[name], None, labelled) if labelled else None)
        if kind is not None:
            targets = data.targets_y if labelled else None
            result = evaluate(kind.spec, reference[name], candidate[name], targets, judging.max_accuracy_drop,
                              kind.axis)
            if result is not None:
                tasks[name] = result
    metric = None
    if judging.metric is not None and judging.metric_spec is not None:
        metric = run_metric(judging.metric_spec, judging.metric, reference, candidate, data.targets_y)
    return Measured(outputs, summary, tasks, metric, candidate=candidate)


def _float_conversion(built: BuildResult, builder: Builder, data: PreparedData,
                      reference: dict[str, np.ndarray], judging: Judging) -> dict[str, OutputComparison] | None:
    """The converted float model vs the source, per output; None when the builder left none to run."""
    names = list(reference)
    produced: dict[str, np.ndarray] | None = None
    if built.float_model is not None and Path(built.float_model).exists():
        produced = _run_artifact(Path(built.float_model), builder.backend, data.evaluation, names, built)
    elif built.float_evaluated_npy is not None and Path(built.float_evaluated_npy).exists():
        produced = _rows(_evaluated(built.float_evaluated_npy, names), data.rows)
    if produced is None:
        return None
    return {n: compare_outputs(reference[n], produced[n], kind=judging.kinds.get(n)) for n in names}


def _rows(outputs: dict[str, np.ndarray] | None, rows: tuple[int, ...] | None) -> dict[str, np.ndarray] | None:
    """Outputs a builder computed on every validation sample, cut to a subset's rows."""
    if outputs is None or rows is None:
        return outputs
    return {name: values[list(rows)] for name, values in outputs.items()}


def _evaluated(path: str, names: list[str]) -> dict[str, np.ndarray] | None:
    """Outputs a builder computed itself (``.npz`` by output name), by the manifest's names: one
    output needs no name; several must all match, never guessed by position."""
    with np.load(path) as stored:
        found = {name: stored[name] for name in stored.files}
    if len(found) == len(names) == 1:
        return {names[0]: next(iter(found.values()))}
    if sorted(found) != sorted(names):
        return None
    return {name: found[name] for name in names}


def _run_artifact(artifact: Path, backend_name: str, inputs: dict[str, np.ndarray], names: list[str],
                  built: BuildResult, batch: int = 32, **backend_options: Any) -> dict[str, np.ndarray] | None:
    """Every output of the artifact on the validation inputs, by name; None without a runtime here.

    Run in a child process (``run_artifact``): a runtime library that crashes on what a converter
    wrote (LiteRT dying with SIGSEGV on a quantized attention graph) ends that child, and the
    format fails with the signal named, never the packager."""
    from ..conversion import threads, worker
    from ..fsutil import temp_dir

    backend_cls = get_backend(backend_name)
    if backend_cls.available() is None:
        return None
    cap = threads.cap()
    if cap and not backend_options.get("threads"):
        backend_options = {**backend_options, "threads": cap}
    with temp_dir("edgekit-run-") as folder:
        feed, answer = Path(folder) / "inputs.npz", Path(folder) / "outputs"
        np.savez(feed, **inputs)
        try:
            ran = worker.convert(run_artifact, ArtifactRun(
                backend=worker.reference(backend_cls), artifact=str(artifact), inputs_npz=str(feed), names=tuple(names),
                key=built.artifact.key, fmt=built.artifact.format, batch=batch, options=dict(backend_options),
                output_dir=str(answer)), what=f"running the {built.artifact.key} artifact in {backend_name}")
        except ConversionError as exc:
            if "crashed:" not in exc.message:
                raise
            raise ConversionError(
                f"{backend_name} crashed running the {built.artifact.key} artifact the converter wrote: "
                f"{exc.message.split('crashed: ', 1)[-1].replace('the converter process', 'its process')}",
                hint=f"package without --format {built.artifact.format}, or {OTHER_ROUTES} (and report the model: "
                     "the runtime library dies on the file its converter wrote)") from None
        # mapped, not read: every artifact's outputs on every held-out sample stay on disk until a gate
        # reads them (copy on write: a reader that writes gets its own page); the mapping outlives the
        # folder's removal
        return {name: np.load(path, mmap_mode="c") for name, path in zip(names, ran.files)}


# what one validation batch may add to the runtime's memory: a 256x256 U-Net's intermediates are
# ~200 MB a sample, so 32 at a time ran validation to 19 GB; its batches now hold about 5
VALIDATION_BYTES = 1 << 30


def fitting(one_sample_bytes: int, most: int) -> int:
    """Samples per batch whose memory fits ``VALIDATION_BYTES``, from what one sample's run added to
    the process's peak (at least one, at most ``most``); nothing measured (0): ``most``."""
    if one_sample_bytes <= 0:
        return most
    return max(1, min(most, VALIDATION_BYTES // one_sample_bytes))


def memory_bytes() -> tuple[int, int, int]:
    """This process's peak resident memory so far, its resident memory now and the bytes its
    allocator has handed out now (0 where the platform does not say). Each alone can miss what a
    run adds: a reused child's peak may be an earlier step's, and memory freed before is reused
    without growing the resident set; the allocator's count sees a runtime's arena either way."""
    try:
        import resource
    except ImportError:  # Windows: no getrusage; batches keep their size
        return 0, 0, 0
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        now = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):  # macOS: no /proc
        now = 0
    return int(peak if sys.platform == "darwin" else peak * 1024), now, _allocated_bytes()


def _allocated_bytes() -> int:
    """glibc's bytes in use (``mallinfo2``: heap chunks and mmapped ones); 0 elsewhere."""
    mallinfo2 = _mallinfo2()
    if mallinfo2 is None:
        return 0
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


@functools.lru_cache(maxsize=1)
def _mallinfo2() -> Any:
    """glibc's ``mallinfo2``, looked up once per process: ``ctypes.util.find_library`` runs
    ``ldconfig -p`` in a subprocess each time (a fork of a process that may hold a converter's
    gigabytes), and each batch of a validation run asks twice. None where libc is not glibc 2.33 or newer."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):  # not glibc, or older than 2.33
        return None
    mallinfo2.restype = MallInfo2
    return mallinfo2


@dataclass(frozen=True)
class ArtifactRun(Message):
    """Run one artifact in its runtime (``backend``: a reference to its Backend class) on the
    inputs stored in ``inputs_npz``, at most ``batch`` samples at a time, every output of
    ``names`` saved into ``output_dir``; ``key``/``fmt`` name the artifact in errors."""

    backend: str
    artifact: str
    inputs_npz: str
    names: tuple[str, ...]
    key: str
    fmt: str
    batch: int
    options: dict[str, Any]
    output_dir: str


@dataclass(frozen=True)
class ArtifactOutputs(Message):
    """Where each output was saved, in the order of the request's ``names``, and the batch the
    run settled on (``fitting``)."""

    files: tuple[str, ...]
    batch: int


def run_artifact(request: ArtifactRun) -> ArtifactOutputs:
    """Child side of ``_run_artifact``: load the artifact in its runtime and run it in batches of
    at most ``batch``, fewer where one sample's run adds much memory (``fitting``); the outputs
    saved into ``output_dir`` by position of ``names`` (``o0.npy``, ``o1.npy``...: names may not
    be file names), which the packager maps instead of reading."""
    from ..conversion import worker

    backend, artifact, inputs_npz, names = request.backend, request.artifact, request.inputs_npz, list(request.names)
    key, fmt, batch, options = request.key, request.fmt, request.batch, request.options
    backend_cls: Any = worker.resolve(backend)
    with np.load(inputs_npz) as stored:
        inputs = {name: stored[name] for name in stored.files}
    try:
        opened = backend_cls(artifact, **options)
    except PackageError as exc:  # the runtime refuses what the converter wrote: name the artifact, not a temp path
        raise ConversionError(
            f"{backend_cls.name} cannot load the {key} artifact the converter wrote: {exc.message.split(': ', 1)[-1]}",
            hint=f"package without --format {fmt} (or report the model: the converter produced a file its own "
                 "runtime refuses)",
        ) from None
    try:
        order = align(names, [t.name for t in opened.outputs], "output", SimpleNamespace(format=fmt))  # type: ignore[arg-type]
        total = len(next(iter(inputs.values())))
        parts, start, step = [], 0, 1  # one sample first: what it adds to memory sets the batch (``fitting``)
        while start < total:
            chunk = {k: v[start : start + step] for k, v in inputs.items()}
            before = memory_bytes()
            try:
                parts.append(opened.run(chunk if len(chunk) > 1 else list(chunk.values())))
                if not start:
                    after = memory_bytes()
                    step = fitting(max(a - b for a, b in zip(after, before)), batch)
                start += len(next(iter(chunk.values())))
            except EdgekitError:
                raise
            except Exception as exc:  # the runtime fails on what the converter wrote: this format's failure
                size = len(next(iter(chunk.values())))
                raise ConversionError(
                    f"{backend_cls.name} cannot run the {key} artifact the converter wrote (a batch of {size}): "
                    f"{type(exc).__name__}: {first_line(exc)[:300]}",
                    hint=f"package without --format {fmt}, or {OTHER_ROUTES} (and report the model: the converter "
                         "produced a file its own runtime cannot run)",
                ) from None
    finally:
        opened.close()
    folder = Path(request.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for j, i in enumerate(order):  # the runtime's output j is names[i]
        np.save(folder / f"o{i}.npy", np.concatenate([p[j] for p in parts]))
    return ArtifactOutputs(files=tuple(str(folder / f"o{i}.npy") for i in range(len(names))), batch=step)

