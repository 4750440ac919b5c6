"""The float reference of a source that is an ONNX graph: its outputs on the held-out samples by the
ONNX format's runtime (fixed-batch and batch-less graphs run as the device runs them). Here, above
both, so the sources stand below the formats; other sources run their own framework."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ModelSourceError
from ..sources.base import Source


def run_onnx_graph(prepared: dict[str, Any], inputs_npz: str, output_npz: str, batch_size: int = 64) -> None:
    """Every output of the float ONNX model on ``inputs_npz`` (by input name), saved to ``output_npz``
    by output name; fixed-batch models run in slices (the backend does that)."""
    import numpy as np

    from ..errors import PackageError
    from ..formats.onnx.backend import OnnxRuntimeBackend

    try:
        backend = OnnxRuntimeBackend(prepared["onnx_model"])
    except PackageError as exc:  # the source model, not a package: the fix is on the model's side
        raise ModelSourceError(
            exc.message.replace("ONNX Runtime cannot load", "ONNX Runtime cannot run the source model"),
            hint="ONNX Runtime must run the float model to validate against it: re-export it with ops and types "
                 "ONNX Runtime implements (e.g. int64 indices and depth for OneHot), or check the file is complete",
        ) from None
    with np.load(inputs_npz) as stored:
        inputs = {name: stored[name] for name in stored.files}
    total = len(next(iter(inputs.values())))
    chunks: list[list[Any]] = []
    for start in range(0, total, batch_size):
        chunks.append(backend.run({k: v[start : start + batch_size] for k, v in inputs.items()}))
    names = [t.name for t in backend.outputs]
    np.savez(output_npz, **{name: np.concatenate([c[k] for c in chunks]) for k, name in enumerate(names)})


def reference_runner(source: Source) -> Callable[..., None]:
    """The child function writing ``source``'s float outputs: its own, or for an ONNX graph the
    ONNX format's runtime (``Source.float_reference`` None)."""
    return source.float_reference or run_onnx_graph
