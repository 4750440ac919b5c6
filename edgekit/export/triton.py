"""``edgekit export triton``: a Triton model repository (and optionally a KServe InferenceService).

``--backend python`` writes a Python-backend model that runs the whole package with edgekit's
runtime (``triton_python.py``). Otherwise the ONNX artifact goes to ``REPO/NAME/1/model.onnx`` with a ``config.pbtxt`` for Triton's
onnxruntime backend: dims without the batch dimension, ``max_batch_size``, dynamic batching,
an instance group, and with ``--gpu`` the TensorRT execution accelerator (INT8 for the QDQ
model, FP16 fallback). ``--kserve`` adds an InferenceService manifest that serves the
repository with Triton over the v2 protocol.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from ..errors import EdgekitError, OutputExistsError
from ..fsutil import ensure_writable, publish, staging_dir, write_text_atomic
from ..manifest import Manifest
from ..package_io import open_package, verified_artifact_path


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
        lines += ["  {", f'    name: "{spec.name}"', f"    data_type: {_TRITON_TYPES[spec.dtype]}",
                  f"    dims: {_dims(spec.shape)}"]
        if kind == "output" and spec.labels:
            lines.append('    label_filename: "labels.txt"')
        lines.append("  }," if index < len(specs) - 1 else "  }")
    return lines + ["]"]


def config_pbtxt(manifest: Manifest, max_batch_size: int, gpu: bool, instances: int, queue_delay_us: int,
                 backend: str = "onnxruntime", parameters: list[str] | None = None) -> str:
    """Every input and output of the package (never only the first), with its datatype."""
    lines = [
        f'name: "{manifest.name}"',
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
    return f"""apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: {name.lower().replace('_', '-')}
spec:
  predictor:
    model:
      modelFormat:
        name: triton
      protocolVersion: v2
      runtime: kserve-tritonserver
      storageUri: {storage_uri}
      resources:
        limits:
{resources}"""


def export_triton(
    package: str, output: str, max_batch_size: int = 8, gpu: bool = False, instances: int = 1,
    queue_delay_us: int = 500, kserve_storage_uri: str | None = None, force: bool = False,
    backend: str = "onnxruntime", artifact: str | None = None, threads: int | None = None,
    python_path: str | None = None,
) -> Path:
    root, manifest = open_package(package)
    if backend == "python":
        return _export_python(root, manifest, Path(output), max_batch_size, instances, queue_delay_us, force,
                              artifact, threads, kserve_storage_uri, gpu, python_path)
    if backend != "onnxruntime":
        raise EdgekitError(f"unknown Triton backend {backend!r}", hint="use onnxruntime or python")
    if not any(a.target == "onnx" for a in manifest.artifacts):
        raise EdgekitError(
            f"package {manifest.name!r} has no ONNX artifact; Triton export serves the ONNX model",
            hint="repackage with --format onnx (formerly --target onnx), or --format all",
        )
    if max_batch_size < 1:
        raise EdgekitError("--max-batch-size must be at least 1")
    model_file = verified_artifact_path(root, manifest.artifact("onnx"))

    def fill(version: Path) -> str:
        shutil.copyfile(model_file, version / "model.onnx")
        return config_pbtxt(manifest, max_batch_size, gpu, instances, queue_delay_us)

    return _write_model(Path(output), manifest, force, fill, kserve_storage_uri, gpu)


def _write_model(repo: Path, manifest: Manifest, force: bool, fill: Callable[[Path], str],
                 kserve_storage_uri: str | None, gpu: bool) -> Path:
    """REPO/NAME staged and published by rename: ``fill(NAME/1)`` writes the version's files and
    returns config.pbtxt; labels.txt and the optional InferenceService come with it."""
    destination = repo / manifest.name
    if destination.exists() and not force:
        raise OutputExistsError(f"{destination} already exists")
    ensure_writable(repo, "Triton model repository", is_dir=True)
    with staging_dir(destination) as staged:
        (staged / "1").mkdir(parents=True)
        (staged / "config.pbtxt").write_text(fill(staged / "1"))
        if manifest.labels:
            (staged / "labels.txt").write_text("\n".join(manifest.labels) + "\n")
        repo.mkdir(parents=True, exist_ok=True)
        publish(staged, destination, replace=force)
    if kserve_storage_uri is not None:
        write_text_atomic(repo / f"{manifest.name}.inferenceservice.yaml",
                          inference_service_yaml(manifest.name, kserve_storage_uri, gpu))
    return destination


def _export_python(root: Path, manifest: Manifest, repo: Path, max_batch_size: int, instances: int,
                   queue_delay_us: int, force: bool, artifact: str | None, threads: int | None,
                   kserve_storage_uri: str | None, gpu: bool, python_path: str | None) -> Path:
    """NAME/config.pbtxt (Python backend) + NAME/1/model.py + NAME/1/package/ (every artifact verified)."""
    from .triton_python import MODEL_PY, parameters_block

    if artifact is not None and not any(artifact in (a.key, a.target) for a in manifest.artifacts):
        raise EdgekitError(f"package {manifest.name!r} has no {artifact} artifact",
                           hint=f"choose one of {', '.join(a.key for a in manifest.artifacts)}")
    for entry in manifest.artifacts:
        verified_artifact_path(root, entry)  # a tampered package is refused here, not on the Triton host

    def fill(version: Path) -> str:
        shutil.copytree(root, version / "package")
        (version / "model.py").write_text(MODEL_PY)
        return config_pbtxt(manifest, max_batch_size, False, instances, queue_delay_us, backend="python",
                            parameters=parameters_block(artifact, threads, python_path))

    return _write_model(repo, manifest, force, fill, kserve_storage_uri, gpu)
