"""Float fallback artifacts (``--also-float``): a float artifact next to each format's INT8 one.

INT8 is slower than float on many CPUs (x86 without VNNI; measured here: MobileNetV2 ONNX
INT8 at 0.67x of float), and a device without an INT8 kernel for an op has nothing else to
run. The builders already convert the float model (to tell conversion error from quantization
error); with a fallback requested they keep it: float16 weights for TFLite (float32 arithmetic,
half the size) and CoreML (an ML program computes in float16), float32 for ONNX (ONNX Runtime's
CPU kernels have no float16). Each is validated against the source like the INT8 artifact, and
``edgekit tune`` measures on the device which one is faster.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..formats import Builder, BuildResult
from ..fsutil import sha256_file, sha256_tree, tree_bytes
from ..manifest import Artifact

FLOAT_FALLBACK_MAX_MB = 50  # by default, models up to this size get a float fallback


def wants_float_fallback(also_float: bool | None, model: str) -> bool:
    """``--also-float`` / ``--no-also-float``, else whether the model is small enough that a
    float copy costs little (its file or directory size)."""
    if also_float is not None:
        return also_float
    path = Path(model.rpartition(":")[0] if ".py:" in model else model)  # file.py:factory: the file
    try:
        size = tree_bytes(path) if path.is_dir() else path.stat().st_size
    except OSError:
        return False
    return size <= FLOAT_FALLBACK_MAX_MB * (1 << 20)


def fallback_result(builder: Builder, built: BuildResult, staged: Path) -> BuildResult | None:
    """The float artifact the builder kept, placed in the package with its manifest entry; None
    when the builder made none."""
    if not built.fallback_model or not Path(built.fallback_model).exists():
        return None
    source = Path(built.fallback_model)
    relative = f"{builder.name}/model.{built.fallback_precision}{'.mlpackage' if source.is_dir() else source.suffix}"
    target = staged / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    builder.place_fallback(source, target)
    if target.is_dir():
        digest, size = sha256_tree(target), tree_bytes(target)
    else:
        digest, size = sha256_file(target), target.stat().st_size
    quantized = built.artifact
    inputs, outputs = builder.fallback_io(target, quantized)
    artifact = Artifact(
        format=quantized.format, path=relative, sha256=digest, bytes=size, precision=built.fallback_precision,
        inputs=inputs, outputs=outputs,
        converter={"tool": built.float_by.split(",")[0] or quantized.converter.get("tool", ""),
                   "float_fallback_for": quantized.key},
    )
    evaluated = built.fallback_evaluated_npy
    return BuildResult(artifact, evaluated_npy=evaluated,
                       evaluated_by="edgekit NumPy MIL evaluator (float32 arithmetic)" if evaluated else "")


def discard(path: Path) -> None:
    """Remove a fallback artifact from the staged package (a file or an .mlpackage directory)."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
