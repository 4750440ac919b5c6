"""``edgekit export triton``: a Triton model repository (and optionally a KServe InferenceService).

``--backend python`` writes a Python-backend model that runs the whole package with edgekit's
runtime (``triton_python.py``). Otherwise the ONNX artifact goes to ``REPO/NAME/1/model.onnx`` with a ``config.pbtxt`` for Triton's
onnxruntime backend: dims without the batch dimension, ``max_batch_size``, dynamic batching,
an instance group, and with ``--gpu`` the TensorRT execution accelerator (INT8 for the QDQ
model, FP16 fallback). ``--kserve`` adds an InferenceService manifest that serves the
repository with Triton over the v2 protocol.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from ..errors import EdgekitError, OutputExistsError
from ..fsutil import ensure_writable, publish, staging_dir, write_text_atomic
from ..manifest import Manifest
from ..names import check_name, kubernetes_name
from ..device.stored_cards import CARDS_DIR, copy_cards
from ..device.package_io import open_package, verified_artifact_path

# Written into every model directory edgekit exports: --force replaces only directories that
# carry it, never a model (or anything else) that someone else put in the repository.
EXPORT_MARKER = ".edgekit-export"
_YAML_HEADER = "# written by edgekit export triton\n"
# Bounds that keep a typo from writing a config Triton refuses or a server cannot hold:
# Triton allocates max_batch_size x the largest input per instance, and starts every instance.
MAX_BATCH_SIZE = 4096
MAX_INSTANCES = 64
MAX_QUEUE_DELAY_US = 10_000_000
MAX_HOST_THREADS = 1024  # the Triton host's cores are unknown here; more than this is a typo on any server
# Where KServe's storage initializer can fetch a model repository from.
_STORAGE_URI = re.compile(r"^(gs|s3|pvc|hdfs|webhdfs|oci|hf|https?)://[^\s\x00-\x1f\"'`]+$")


def pbtxt_string(value: str, what: str) -> str:
    """``value`` as a quoted protobuf text-format string; control characters are refused (a
    newline in a path is a typo, never a directory someone meant)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise EdgekitError(f"{what} {value!r} contains control characters", hint="pass a plain path")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parameters_block(artifact: str | None, threads: int | None, python_path: str | None) -> list[str]:
    """config.pbtxt ``parameters`` the model reads: which artifact, how many threads, and where
    edgekit is installed when the backend's Python does not have it."""
    lines = []
    for key, value in (("artifact", artifact), ("threads", None if threads is None else str(threads)),
                       ("python_path", python_path)):
        if value:
            lines += ["parameters {", f'  key: "{key}"',
                      f"  value {{ string_value: {pbtxt_string(value, '--' + key.replace('_', '-'))} }}", "}"]
    return lines

def check_export_options(max_batch_size: int, instances: int, queue_delay_us: int,
                         kserve_storage_uri: str | None, threads: int | None) -> None:
    """Refuse values Triton or KServe cannot represent, before anything is written."""
    for flag, value, low, high in (("--max-batch-size", max_batch_size, 1, MAX_BATCH_SIZE),
                                   ("--instances", instances, 1, MAX_INSTANCES),
                                   ("--max-queue-delay-us", queue_delay_us, 0, MAX_QUEUE_DELAY_US)):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise EdgekitError(f"{flag} must be an integer from {low} to {high}, got {value!r}",
                               hint=f"e.g. {flag} {max(low, min(8, high))}")
    if threads is not None and not 1 <= threads <= MAX_HOST_THREADS:
        raise EdgekitError(f"--threads must be from 1 to {MAX_HOST_THREADS}, got {threads}",
                           hint="leave it out to use the Triton host's cores")
    if kserve_storage_uri is not None and not _STORAGE_URI.match(kserve_storage_uri):
        raise EdgekitError(
            f"--kserve {kserve_storage_uri!r} is not a storage URI KServe can fetch from",
            hint="e.g. --kserve gs://bucket/models, s3://bucket/models or pvc://claim/models "
                 "(no spaces or quotes)",
        )


def _dims(shape: list[int]) -> str:
    return "[ " + ", ".join(str(d) for d in shape[1:]) + " ]"


_TRITON_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "float64": "TYPE_FP64", "int8": "TYPE_INT8",
                 "int16": "TYPE_INT16", "int32": "TYPE_INT32", "int64": "TYPE_INT64", "uint8": "TYPE_UINT8",
                 "uint16": "TYPE_UINT16", "bool": "TYPE_BOOL"}


def _tensors(kind: str, specs: list) -> list[str]:
    """A config.pbtxt ``input [...]`` or ``output [...]`` block with every tensor, by name."""
    lines = [f"{kind} ["]
    for index, spec in enumerate(specs):
        if spec.dtype not in _TRITON_TYPES:
            raise EdgekitError(f"{kind} {spec.name!r} has dtype {spec.dtype}, which Triton's config cannot name")
        lines += ["  {", f"    name: {pbtxt_string(spec.name, kind + ' name')}", f"    data_type: {_TRITON_TYPES[spec.dtype]}",
                  f"    dims: {_dims(spec.shape)}"]
        if kind == "output" and spec.labels:
            lines.append('    label_filename: "labels.txt"')
        lines.append("  }," if index < len(specs) - 1 else "  }")
    return lines + ["]"]


def config_pbtxt(manifest: Manifest, max_batch_size: int, gpu: bool, instances: int, queue_delay_us: int,
                 backend: str = "onnxruntime", parameters: list[str] | None = None) -> str:
    """Every input and output of the package (never only the first), with its datatype."""
    lines = [
        f"name: {pbtxt_string(manifest.name, 'package name')}",
        f'backend: "{backend}"',
        f"max_batch_size: {max_batch_size}",
        *(parameters or []),
        *_tensors("input", manifest.inputs),
        *_tensors("output", manifest.outputs),
    ]
    lines += [
        "dynamic_batching {",
        f"  preferred_batch_size: [ {', '.join(str(b) for b in sorted({max(1, max_batch_size // 2), max_batch_size}))} ]",
        f"  max_queue_delay_microseconds: {queue_delay_us}",
        "}",
        "instance_group [",
        "  {",
        f"    count: {instances}",
        f"    kind: {'KIND_GPU' if gpu else 'KIND_CPU'}",
        "  }",
        "]",
    ]
    if gpu:
        lines += [
            "optimization {",
            "  execution_accelerators {",
            "    gpu_execution_accelerator : [ {",
            '      name : "tensorrt"',
            '      parameters { key: "precision_mode" value: "INT8" }',
            '      parameters { key: "max_workspace_size_bytes" value: "1073741824" }',
            '      parameters { key: "trt_engine_cache_enable" value: "1" }',
            "    } ]",
            "  }",
            "}",
        ]
    return "\n".join(lines) + "\n"


def inference_service_yaml(name: str, storage_uri: str, gpu: bool) -> str:
    resources = '          nvidia.com/gpu: "1"\n' if gpu else '          cpu: "2"\n          memory: 2Gi\n'
    return _YAML_HEADER + f"""apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: {kubernetes_name(name)}
spec:
  predictor:
    model:
      modelFormat:
        name: triton
      protocolVersion: v2
      runtime: kserve-tritonserver
      storageUri: {json.dumps(storage_uri)}
      resources:
        limits:
{resources}"""


def export_triton(
    package: str, output: str, max_batch_size: int = 8, gpu: bool = False, instances: int = 1,
    queue_delay_us: int = 500, kserve_storage_uri: str | None = None, force: bool = False,
    backend: str = "onnxruntime", artifact: str | None = None, threads: int | None = None,
    python_path: str | None = None,
) -> Path:
    check_export_options(max_batch_size, instances, queue_delay_us, kserve_storage_uri, threads)
    root, manifest = open_package(package)
    if backend == "python":
        return _export_python(root, manifest, Path(output), max_batch_size, instances, queue_delay_us, force,
                              artifact, threads, kserve_storage_uri, gpu, python_path)
    if backend != "onnxruntime":
        raise EdgekitError(f"unknown Triton backend {backend!r}", hint="use onnxruntime or python")
    if not any(a.format == "onnx" for a in manifest.artifacts):
        raise EdgekitError(
            f"package {manifest.name!r} has no ONNX artifact; Triton export serves the ONNX model",
            hint="repackage with --format onnx (formerly --target onnx), or --format all",
        )
    model_file = verified_artifact_path(root, manifest.artifact("onnx"))

    def fill(version: Path) -> str:
        shutil.copyfile(model_file, version / "model.onnx")
        return config_pbtxt(manifest, max_batch_size, gpu, instances, queue_delay_us)

    return _write_model(root, Path(output), manifest, force, fill, kserve_storage_uri, gpu)


def _write_model(root: Path, repo: Path, manifest: Manifest, force: bool, fill: Callable[[Path], str],
                 kserve_storage_uri: str | None, gpu: bool) -> Path:
    """REPO/NAME staged and published by rename: ``fill(NAME/1)`` writes the version's files and
    returns config.pbtxt; labels.txt, the package's latency cards (``NAME/cards/``, checked against
    the manifest) and the optional InferenceService come with it."""
    name = check_name(manifest.name, "package name")  # read checked already; a path is built from it here
    destination = repo / name
    service = repo / f"{name}.inferenceservice.yaml"
    _check_replaceable(destination, force, lambda path: (path / EXPORT_MARKER).is_file(), "model directory")
    if kserve_storage_uri is not None:
        _check_replaceable(service, force, _is_our_yaml, "InferenceService manifest")
    ensure_writable(repo, "Triton model repository", is_dir=True)
    with staging_dir(destination) as staged:
        (staged / "1").mkdir(parents=True)
        (staged / EXPORT_MARKER).write_text(json.dumps({"package": manifest.name}) + "\n")
        (staged / "config.pbtxt").write_text(fill(staged / "1"))
        if manifest.labels:
            (staged / "labels.txt").write_text("\n".join(manifest.labels) + "\n")
        copy_cards(root, manifest, staged / CARDS_DIR)  # Triton ignores a model folder's non-numeric subfolders
        repo.mkdir(parents=True, exist_ok=True)
        publish(staged, destination, replace=force)
    if kserve_storage_uri is not None:
        write_text_atomic(service, inference_service_yaml(name, kserve_storage_uri, gpu))
    return destination


def _is_our_yaml(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.readline() == _YAML_HEADER
    except OSError:
        return False


def _check_replaceable(path: Path, force: bool, ours: Callable[[Path], bool], what: str) -> None:
    """``path`` may be written: it does not exist, or ``--force`` and edgekit wrote it."""
    if not (path.exists() or path.is_symlink()):
        return
    if not force:
        raise OutputExistsError(f"{path} already exists", hint="pass --force to replace what edgekit exported there")
    if path.is_symlink() or not ours(path):
        raise OutputExistsError(
            f"{path} exists and was not written by edgekit export; --force replaces only edgekit's own exports",
            hint="remove it yourself if it should go, or export into another -o",
        )


def _export_python(root: Path, manifest: Manifest, repo: Path, max_batch_size: int, instances: int,
                   queue_delay_us: int, force: bool, artifact: str | None, threads: int | None,
                   kserve_storage_uri: str | None, gpu: bool, python_path: str | None) -> Path:
    """NAME/config.pbtxt (Python backend) + NAME/1/model.py + NAME/1/package/ (every artifact verified)."""
    from .triton_python import MODEL_PY

    if artifact is not None and artifact.split("-")[0] == "coreml":
        raise EdgekitError(
            "--backend python --artifact coreml cannot run on Triton: Triton servers run Linux and "
            "CoreML runs only on macOS/iOS",
            hint="choose --artifact tflite or onnx (or leave it out to pick the best on the Triton host)",
        )
    if artifact is not None and not any(artifact in (a.key, a.format) for a in manifest.artifacts):
        raise EdgekitError(f"package {manifest.name!r} has no {artifact} artifact",
                           hint=f"choose one of {', '.join(a.key for a in manifest.artifacts)}")
    parameters = parameters_block(artifact, threads, python_path)  # refused before anything is written
    for entry in manifest.artifacts:
        verified_artifact_path(root, entry)  # a tampered package is refused here, not on the Triton host

    def fill(version: Path) -> str:
        shutil.copytree(root, version / "package")
        (version / "model.py").write_text(MODEL_PY)
        return config_pbtxt(manifest, max_batch_size, False, instances, queue_delay_us, backend="python",
                            parameters=parameters)

    return _write_model(root, repo, manifest, force, fill, kserve_storage_uri, gpu)
